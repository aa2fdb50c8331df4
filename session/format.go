package session

import (
	"fmt"
	"math/bits"

	"bitalign/capture"
	"bitalign/internal/fp"
)

// The dtype rules (layouts, ordered-integer ULP distance, ±0, NaN, decoding) live in bitalign/internal/fp;
// this file adapts them to the diff's loops.

// kind is how a dtype's elements are compared.
type kind = fp.Kind

const (
	kindFloat    = fp.KindFloat    // sign-magnitude float: ordered-integer ULP distance
	kindSigned   = fp.KindSigned   // two's complement integer: |a−b|
	kindUnsigned = fp.KindUnsigned // unsigned integer or bool: |a−b|
)

// format is one dtype's layout (fp.Format) with what the diff's word-at-a-time loops need.
type format struct {
	fp.Format
	// the layout's fields under the names the diff's loops use
	dt                capture.DType
	size              int // bytes per element
	kind              kind
	expBits, mantBits uint   // floats only
	noInf             bool   // f8e4m3fn: no infinities, one NaN per sign
	width             uint64 // all ones over the element's bits
	sign              uint64 // the sign bit (floats and signed ints)

	laneShift uint // log2 of the element's bits (a bit index >> laneShift is its lane in a word)
	// SWAR masks for finding NaN/Inf eight bytes at a time: in ((w & swM) + swL) & swH a lane's top (sign)
	// bit is set exactly when its masked bits are all ones (NaN or Inf; NaN only for f8e4m3fn). swM never
	// covers the sign bit, so the addition carries into the lane's own sign bit, never into the next lane.
	swM, swL, swH uint64
}

var formats = func() [16]*format {
	var fs [16]*format
	for _, dt := range capture.DTypes() {
		l := fp.FormatOf(dt)
		f := &format{Format: *l, dt: dt, size: l.Size, kind: l.Kind, expBits: l.ExpBits, mantBits: l.MantBits,
			noInf: l.NoInf, width: l.Mask, sign: l.Sign}
		nb := uint(8 * f.size)
		f.laneShift = uint(bits.TrailingZeros(nb))
		if f.kind == kindFloat {
			lane := (uint64(1)<<f.expBits - 1) << f.mantBits // exponent all ones
			if f.noInf {
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
	return fs
}()

// formatOf returns the comparison format of dt.
func formatOf(dt capture.DType) (*format, error) {
	if int(dt) < len(formats) && formats[dt] != nil {
		return formats[dt], nil
	}
	return nil, fmt.Errorf("session: unsupported dtype %s", dt)
}

func (f *format) load(data []byte, i int) uint64      { return f.Format.Bits(data, i) }
func (f *format) isNaN(x uint64) bool                 { return f.Format.IsNaN(x) }
func (f *format) isInf(x uint64) bool                 { return f.Format.IsInf(x) }
func (f *format) ordered(x uint64) uint64             { return f.Format.Ordered(x) }
func (f *format) compare(x, y uint64) (Class, uint64) { return f.Format.Compare(x, y) }
func (f *format) value(x uint64) float64              { return f.Format.Value(x) }
func (f *format) hex(x uint64) string                 { return f.Format.Hex(x) }
func (f *format) decimal(x uint64) string             { return f.Format.Decimal(x) }

// Class says how two elements compare (fp.Class).
type Class = fp.Class

const (
	ClassEqual      = fp.ClassEqual      // identical bits
	ClassNumeric    = fp.ClassNumeric    // bits differ, neither is NaN (infinities included)
	ClassNaNPayload = fp.ClassNaNPayload // both NaN, bits differ
	ClassNaNNumber  = fp.ClassNaNNumber  // one side NaN, the other not
)

// ULPNaNNumber is the distance ULP gives a NaN compared with a number.
const ULPNaNNumber = fp.ULPNaNNumber

// bucket is the log2 histogram bucket of a distance: 0 for 0, b for [2^(b−1), 2^b).
func bucket(d uint64) int { return int(fp.Bucket(d)) }

// ULP is the distance between two elements of dtype dt given as little-endian bytes (dt.Size() each):
// ordered-integer distance for floats (0 for identical bits, +0 vs −0 is 1, ULPNaNNumber for NaN against a
// number), |a−b| for integers and bools (docs/capture-format.md, "Element types"). An unsupported dtype or a
// short slice gives ULPNaNNumber.
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
