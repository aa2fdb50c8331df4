package session

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"strconv"

	"bitalign/capture"
)

// kind is how a dtype's elements are compared.
type kind uint8

const (
	kindFloat    kind = iota // sign-magnitude float: ordered-integer ULP distance
	kindSigned               // two's complement integer: |a−b|
	kindUnsigned             // unsigned integer or bool: |a−b|
)

// format describes one dtype's element layout for comparison.
type format struct {
	dt       capture.DType
	size     int // bytes per element
	kind     kind
	expBits  uint // floats only
	mantBits uint
	// noInf: f8e4m3fn has no infinities and a single NaN pattern per sign (exponent and mantissa all ones).
	noInf     bool
	width     uint64 // all ones over the element's bits
	laneShift uint   // log2 of the element's bits (a bit index >> laneShift is its lane in a word)
	sign      uint64 // the sign bit (floats and signed ints)
	// SWAR masks for finding NaN/Inf eight bytes at a time: in ((w & swM) + swL) & swH a lane's top (sign)
	// bit is set exactly when its masked bits are all ones (NaN or Inf; NaN only for f8e4m3fn). swM never
	// covers the sign bit, so the addition carries into the lane's own sign bit, never into the next lane.
	swM, swL, swH uint64
}

var formats = func() [16]*format {
	var fs [16]*format
	mk := func(dt capture.DType, k kind, e, m uint, noInf bool) {
		f := &format{dt: dt, size: dt.Size(), kind: k, expBits: e, mantBits: m, noInf: noInf}
		nb := uint(8 * f.size)
		f.width = math.MaxUint64 >> (64 - nb)
		f.laneShift = uint(bits.TrailingZeros(nb))
		f.sign = 1 << (nb - 1)
		if k == kindFloat {
			lane := ((uint64(1)<<e - 1) << m) // exponent all ones
			if noInf {
				lane = f.width &^ f.sign // exponent and mantissa all ones
			}
			for i := 0; i < 8/f.size; i++ {
				sh := uint(i) * nb
				f.swM |= lane << sh
				f.swL |= (lane & -lane) << sh // the mask's lowest bit
				f.swH |= f.sign << sh
			}
		}
		fs[dt] = f
	}
	mk(capture.BF16, kindFloat, 8, 7, false)
	mk(capture.F16, kindFloat, 5, 10, false)
	mk(capture.F32, kindFloat, 8, 23, false)
	mk(capture.F64, kindFloat, 11, 52, false)
	mk(capture.F8E4M3, kindFloat, 4, 3, true)
	mk(capture.F8E5M2, kindFloat, 5, 2, false)
	mk(capture.I32, kindSigned, 0, 0, false)
	mk(capture.I64, kindSigned, 0, 0, false)
	mk(capture.U8, kindUnsigned, 0, 0, false)
	mk(capture.Bool, kindUnsigned, 0, 0, false)
	return fs
}()

// formatOf returns the comparison format of dt.
func formatOf(dt capture.DType) (*format, error) {
	if int(dt) < len(formats) && formats[dt] != nil {
		return formats[dt], nil
	}
	return nil, fmt.Errorf("session: unsupported dtype %s", dt)
}

// load reads element i of data (little-endian) as its bit pattern.
func (f *format) load(data []byte, i int) uint64 {
	switch f.size {
	case 1:
		return uint64(data[i])
	case 2:
		return uint64(binary.LittleEndian.Uint16(data[2*i:]))
	case 4:
		return uint64(binary.LittleEndian.Uint32(data[4*i:]))
	default:
		return binary.LittleEndian.Uint64(data[8*i:])
	}
}

func (f *format) isNaN(x uint64) bool {
	if f.kind != kindFloat {
		return false
	}
	if f.noInf {
		return x&^f.sign == f.width&^f.sign
	}
	e := (x >> f.mantBits) & (1<<f.expBits - 1)
	return e == 1<<f.expBits-1 && x&(1<<f.mantBits-1) != 0
}

func (f *format) isInf(x uint64) bool {
	if f.kind != kindFloat || f.noInf {
		return false
	}
	return x&^f.sign == (1<<f.expBits-1)<<f.mantBits
}

// ordered maps a float's bit pattern to an unsigned integer that sorts like the values: negative patterns
// are flipped below the positive ones, so −0 and +0 are adjacent.
func (f *format) ordered(x uint64) uint64 {
	if x&f.sign != 0 {
		return ^x & f.width
	}
	return x | f.sign
}

// signed sign-extends an integer element.
func (f *format) signed(x uint64) int64 {
	s := 64 - 8*uint(f.size)
	return int64(x<<s) >> s
}

// Class says how two elements compare.
type Class uint8

const (
	ClassEqual      Class = iota // identical bits
	ClassNumeric                 // bits differ, neither is NaN (infinities included)
	ClassNaNPayload              // both NaN, bits differ
	ClassNaNNumber               // one side NaN, the other not
)

var classNames = [...]string{"equal", "numeric", "nan_payload", "nan_vs_number"}

func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return "class(" + strconv.Itoa(int(c)) + ")"
}

// ULPNaNNumber is the distance ULP gives a NaN compared with a number.
const ULPNaNNumber = math.MaxUint64

func absDiff(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return b - a
}

// compare classifies two elements' bit patterns and gives their distance (ULPs for floats, |a−b| for
// integers).
func (f *format) compare(x, y uint64) (Class, uint64) {
	if x == y {
		return ClassEqual, 0
	}
	switch f.kind {
	case kindFloat:
		nx, ny := f.isNaN(x), f.isNaN(y)
		if nx != ny {
			return ClassNaNNumber, ULPNaNNumber
		}
		d := absDiff(f.ordered(x), f.ordered(y))
		if nx {
			if d == math.MaxUint64 {
				d-- // keep MaxUint64 for NaN against a number
			}
			return ClassNaNPayload, d
		}
		return ClassNumeric, d
	case kindSigned:
		a, b := f.signed(x), f.signed(y)
		if a > b {
			return ClassNumeric, uint64(a) - uint64(b)
		}
		return ClassNumeric, uint64(b) - uint64(a)
	default:
		return ClassNumeric, absDiff(x, y)
	}
}

// value decodes an element to float64 (exact for every float dtype; integers beyond 2^53 round).
func (f *format) value(x uint64) float64 {
	switch f.kind {
	case kindSigned:
		return float64(f.signed(x))
	case kindUnsigned:
		return float64(x)
	}
	switch f.dt {
	case capture.F64:
		return math.Float64frombits(x)
	case capture.F32:
		return float64(math.Float32frombits(uint32(x)))
	case capture.BF16:
		return float64(math.Float32frombits(uint32(x) << 16))
	}
	// minifloats: f16, f8e4m3fn, f8e5m2
	neg := x&f.sign != 0
	e := int((x >> f.mantBits) & (1<<f.expBits - 1))
	m := x & (1<<f.mantBits - 1)
	bias := 1<<(f.expBits-1) - 1
	var v float64
	switch {
	case f.isNaN(x):
		return math.NaN()
	case f.isInf(x):
		v = math.Inf(1)
	case e == 0:
		v = math.Ldexp(float64(m), 1-bias-int(f.mantBits))
	default:
		v = math.Ldexp(float64(m|1<<f.mantBits), e-bias-int(f.mantBits))
	}
	if neg {
		v = -v
	}
	return v
}

// hex formats a bit pattern with the element's full width.
func (f *format) hex(x uint64) string {
	return fmt.Sprintf("0x%0*x", 2*f.size, x)
}

// decimal formats an element's value: the shortest decimal that reads back to the same float32 (float64 for
// f64), NaN with its sign, integers exactly.
func (f *format) decimal(x uint64) string {
	switch f.kind {
	case kindSigned:
		return strconv.FormatInt(f.signed(x), 10)
	case kindUnsigned:
		if f.dt == capture.Bool && x <= 1 {
			return strconv.FormatBool(x == 1)
		}
		return strconv.FormatUint(x, 10)
	}
	if f.isNaN(x) {
		if x&f.sign != 0 {
			return "-NaN"
		}
		return "NaN"
	}
	v := f.value(x)
	if math.IsInf(v, 0) {
		if v < 0 {
			return "-Inf"
		}
		return "+Inf"
	}
	if v == 0 && x&f.sign != 0 {
		return "-0"
	}
	if f.dt == capture.F64 {
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', -1, 32)
}

// bucket is the log2 histogram bucket of a distance: 0 for 0, b for [2^(b−1), 2^b).
func bucket(d uint64) int { return bits.Len64(d) }

// ULP is the distance between two elements of dtype dt given as little-endian bytes (dt.Size() each):
// ordered-integer distance for floats (0 for identical bits, ULPNaNNumber for NaN against a number), |a−b|
// for integers and bools. An unsupported dtype or a short slice gives ULPNaNNumber.
func ULP(dt capture.DType, a, b []byte) uint64 {
	_, d := CompareElement(dt, a, b)
	return d
}

// CompareElement classifies two elements of dtype dt (little-endian bytes) and gives their distance.
func CompareElement(dt capture.DType, a, b []byte) (Class, uint64) {
	f, err := formatOf(dt)
	if err != nil || len(a) < f.size || len(b) < f.size {
		return ClassNaNNumber, ULPNaNNumber
	}
	return f.compare(f.load(a, 0), f.load(b, 0))
}
