package fp

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
)

// Kind is how a dtype's bits are read.
type Kind uint8

const (
	KindFloat    Kind = iota // sign, exponent, mantissa: ordered-integer ULP distance
	KindSigned               // two's complement integer: |a−b|
	KindUnsigned             // unsigned integer or bool: |a−b|
)

// Format is one dtype's bit layout. Elements are handled as their bit patterns in the low bits of a uint64
// (Bits reads them little-endian).
type Format struct {
	DType    DType
	Name     string // DType.String()
	Size     int    // bytes per element
	Kind     Kind
	ExpBits  uint // floats: exponent bits
	MantBits uint // floats: explicit mantissa bits
	// NoInf: f8e4m3fn has no infinities and one NaN per sign (exponent and mantissa all ones); its exponent
	// field all ones with any other mantissa is a finite value (up to 448).
	NoInf  bool
	Digits int    // floats: significant decimal digits that tell any two values apart (max_digits10)
	Mask   uint64 // all ones over the element's bits
	Sign   uint64 // the top bit: the sign of floats and signed integers
}

var formats = func() (fs [numDTypes]Format) {
	mk := func(dt DType, size int, k Kind, e, m uint, digits int) {
		nb := uint(8 * size)
		fs[dt] = Format{DType: dt, Name: dt.String(), Size: size, Kind: k, ExpBits: e, MantBits: m,
			NoInf: dt == F8E4M3, Digits: digits, Mask: math.MaxUint64 >> (64 - nb), Sign: 1 << (nb - 1)}
	}
	mk(BF16, 2, KindFloat, 8, 7, 4)
	mk(F16, 2, KindFloat, 5, 10, 5)
	mk(F32, 4, KindFloat, 8, 23, 9)
	mk(F64, 8, KindFloat, 11, 52, 17)
	mk(F8E4M3, 1, KindFloat, 4, 3, 3)
	mk(F8E5M2, 1, KindFloat, 5, 2, 3)
	mk(I32, 4, KindSigned, 0, 0, 0)
	mk(I64, 8, KindSigned, 0, 0, 0)
	mk(U8, 1, KindUnsigned, 0, 0, 0)
	mk(Bool, 1, KindUnsigned, 0, 0, 0)
	return fs
}()

// FormatOf returns the layout of dt, nil for an invalid dtype. The result is shared: do not modify it.
func FormatOf(dt DType) *Format {
	if !dt.Valid() {
		return nil
	}
	return &formats[dt]
}

// Parse returns the layout of the dtype named s (as DType.String spells it).
func Parse(s string) (Format, error) {
	dt, err := ParseDType(s)
	if err != nil {
		return Format{}, err
	}
	return formats[dt], nil
}

// Bits reads element i of data (little-endian) as its bit pattern.
func (f *Format) Bits(data []byte, i int) uint64 {
	switch f.Size {
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

// IsNaN reports whether x is a NaN: exponent all ones and a non-zero mantissa (f8e4m3fn: exponent and
// mantissa all ones). Integers are never NaN.
func (f *Format) IsNaN(x uint64) bool {
	if f.Kind != KindFloat {
		return false
	}
	if f.NoInf {
		return x&^f.Sign == f.Mask&^f.Sign
	}
	e := (x >> f.MantBits) & (1<<f.ExpBits - 1)
	return e == 1<<f.ExpBits-1 && x&(1<<f.MantBits-1) != 0
}

// IsInf reports whether x is ±Inf (never for f8e4m3fn or integers).
func (f *Format) IsInf(x uint64) bool {
	if f.Kind != KindFloat || f.NoInf {
		return false
	}
	return x&^f.Sign == (1<<f.ExpBits-1)<<f.MantBits
}

// signed sign-extends an integer element.
func (f *Format) signed(x uint64) int64 {
	s := 64 - 8*uint(f.Size)
	return int64(x<<s) >> s
}

// Value decodes an element to float64: exact for every float dtype (NaN stays NaN), integers beyond 2^53
// round.
func (f *Format) Value(x uint64) float64 {
	switch f.Kind {
	case KindSigned:
		return float64(f.signed(x))
	case KindUnsigned:
		return float64(x)
	}
	switch f.DType {
	case F64:
		return math.Float64frombits(x)
	case F32:
		return float64(math.Float32frombits(uint32(x)))
	}
	return float64(f.widen(x))
}

// Hex formats a bit pattern as 0x and lowercase digits over the element's full width: "0x3c7b".
func (f *Format) Hex(x uint64) string { return fmt.Sprintf("0x%0*x", 2*f.Size, x) }

// Decimal formats an element's value: the shortest decimal that reads back to the same float32 (float64 for
// f64), "NaN" and "-NaN", "+Inf" and "-Inf", "-0"; integers exactly, bools as true/false.
func (f *Format) Decimal(x uint64) string { return f.decimal(x, -1) }

// Short formats an element like Decimal but with the dtype's Digits significant digits (enough to tell
// neighbouring values apart), for narrow columns: bf16 0x3c7b is "0.01532".
func (f *Format) Short(x uint64) string { return f.decimal(x, f.Digits) }

func (f *Format) decimal(x uint64, digits int) string {
	switch f.Kind {
	case KindSigned:
		return strconv.FormatInt(f.signed(x), 10)
	case KindUnsigned:
		if f.DType == Bool && x <= 1 {
			return strconv.FormatBool(x == 1)
		}
		return strconv.FormatUint(x, 10)
	}
	if f.IsNaN(x) {
		if x&f.Sign != 0 {
			return "-NaN"
		}
		return "NaN"
	}
	v := f.Value(x)
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case v == 0 && x&f.Sign != 0:
		return "-0"
	case digits > 0:
		return fmt.Sprintf("%.*g", digits, v)
	case f.DType == F64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', -1, 32)
}

// Fields splits x into its sign, exponent and mantissa bit strings (most significant first). Signed integers
// give their sign bit and the value bits as "mantissa", unsigned ones all bits as "mantissa".
func (f *Format) Fields(x uint64) (sign, exp, mant string) {
	s := fmt.Sprintf("%0*b", 8*f.Size, x)
	if f.Kind == KindUnsigned {
		return "", "", s
	}
	return s[:1], s[1 : 1+f.ExpBits], s[1+f.ExpBits:]
}

// RelErr is |a−b| / max(|a|, |b|) of the two elements' values: 0 when the bits or the values are equal,
// +Inf when they differ and either is NaN or infinite.
func (f *Format) RelErr(a, b uint64) float64 {
	x, y := f.Value(a), f.Value(b)
	if a == b || x == y {
		return 0
	}
	if math.IsNaN(x) || math.IsNaN(y) || math.IsInf(x, 0) || math.IsInf(y, 0) {
		return math.Inf(1)
	}
	return math.Abs(x-y) / math.Max(math.Abs(x), math.Abs(y))
}

// IsInt reports an integer (or boolean) dtype: elements are counted as differing values, never in ULPs.
func (f *Format) IsInt() bool { return f.Kind != KindFloat }
