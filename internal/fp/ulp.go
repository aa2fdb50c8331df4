package fp

import (
	"math"
	"math/bits"
	"strconv"
)

// Class says how two elements compare.
type Class uint8

const (
	ClassEqual      Class = iota // identical bits
	ClassNumeric                 // bits differ, neither is NaN (infinities and ±0 included)
	ClassNaNPayload              // both NaN, bits differ
	ClassNaNNumber               // one side NaN, the other not
)

var classNames = [...]string{"equal", "numeric", "nan_payload", "nan_vs_number"}

// String is the class's name in reports: "equal", "numeric", "nan_payload", "nan_vs_number".
func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return "class(" + strconv.Itoa(int(c)) + ")"
}

// ULPNaNNumber is the distance of a NaN from a number: not a count of steps, a marker no real distance
// reaches (two NaNs are capped one below it).
const ULPNaNNumber = math.MaxUint64

// Ordered maps a float's bit pattern to an unsigned integer that sorts like the values: negative patterns
// are flipped below the positive ones, so −0 (Mask>>1) and +0 (Sign) are adjacent and every step between
// neighbouring floats is 1.
func (f *Format) Ordered(x uint64) uint64 {
	if x&f.Sign != 0 {
		return ^x & f.Mask
	}
	return x | f.Sign
}

func absDiff(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return b - a
}

// Compare classifies two elements' bit patterns and gives their distance: for floats the difference of
// their Ordered images (+0 vs −0 is 1; NaN vs number is ClassNaNNumber, ULPNaNNumber; NaN vs other NaN is
// ClassNaNPayload, at most ULPNaNNumber−1), for integers and bools |a−b|.
func (f *Format) Compare(x, y uint64) (Class, uint64) {
	if x == y {
		return ClassEqual, 0
	}
	switch f.Kind {
	case KindFloat:
		nx, ny := f.IsNaN(x), f.IsNaN(y)
		if nx != ny {
			return ClassNaNNumber, ULPNaNNumber
		}
		d := absDiff(f.Ordered(x), f.Ordered(y))
		if nx {
			if d == ULPNaNNumber {
				d-- // f64 −NaN(all ones) vs +NaN(all ones): keep ULPNaNNumber for NaN against a number
			}
			return ClassNaNPayload, d
		}
		return ClassNumeric, d
	case KindSigned:
		a, b := f.signed(x), f.signed(y)
		if a > b {
			return ClassNumeric, uint64(a) - uint64(b)
		}
		return ClassNumeric, uint64(b) - uint64(a)
	default:
		return ClassNumeric, absDiff(x, y)
	}
}

// ULP is Compare's distance.
func (f *Format) ULP(x, y uint64) uint64 {
	_, d := f.Compare(x, y)
	return d
}

// Bucket is the log2 histogram bucket of a distance: 0 for 0, b for [2^(b−1), 2^b).
func Bucket(d uint64) uint8 { return uint8(bits.Len64(d)) }
