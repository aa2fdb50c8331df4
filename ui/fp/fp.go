// Package fp decodes the element types bitalign captures (bf16, f16, f32, f64, f8e4m3, f8e5m2, i32, i64, u8,
// bool) from raw
// little-endian bits, splits them into sign, exponent and mantissa, and measures ULP distance the same way
// the session core does: as the distance between the two values' ordered-integer images.
package fp

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"strings"
)

// Format describes one element type's bit layout.
type Format struct {
	Name     string
	Size     int  // bytes per element
	ExpBits  int  // 0 for integers
	MantBits int  // explicit mantissa bits; for integers, Size*8-1
	Int      bool // integer (two's complement unless Unsigned)
	Unsigned bool // u8 and bool
	FN       bool // "finite, NaN only" f8e4m3: no infinities, only S.1111.111 is NaN
}

var formats = []Format{
	{Name: "bf16", Size: 2, ExpBits: 8, MantBits: 7},
	{Name: "f16", Size: 2, ExpBits: 5, MantBits: 10},
	{Name: "f32", Size: 4, ExpBits: 8, MantBits: 23},
	{Name: "f8e4m3", Size: 1, ExpBits: 4, MantBits: 3, FN: true},
	{Name: "f8e5m2", Size: 1, ExpBits: 5, MantBits: 2},
	{Name: "f64", Size: 8, ExpBits: 11, MantBits: 52},
	{Name: "i32", Size: 4, MantBits: 31, Int: true},
	{Name: "i64", Size: 8, MantBits: 63, Int: true},
	{Name: "u8", Size: 1, MantBits: 8, Int: true, Unsigned: true},
	{Name: "bool", Size: 1, MantBits: 8, Int: true, Unsigned: true},
}

// Parse returns the format named s (as capture.DType.String() spells it).
func Parse(s string) (Format, error) {
	for _, f := range formats {
		if f.Name == strings.ToLower(s) {
			return f, nil
		}
	}
	return Format{}, fmt.Errorf("fp: unsupported element type %q", s)
}

// Bits returns element i of data (little-endian) as an unsigned integer of the format's width.
func (f Format) Bits(data []byte, i int) uint64 {
	switch f.Size {
	case 1:
		return uint64(data[i])
	case 2:
		return uint64(binary.LittleEndian.Uint16(data[2*i:]))
	case 4:
		return uint64(binary.LittleEndian.Uint32(data[4*i:]))
	}
	return binary.LittleEndian.Uint64(data[8*i:])
}

// Len is the number of elements data holds.
func (f Format) Len(data []byte) int { return len(data) / f.Size }

func (f Format) width() int { return f.Size * 8 }

func (f Format) signMask() uint64 {
	if f.Unsigned {
		return 0
	}
	return 1 << (f.width() - 1)
}

// signed sign-extends an integer element.
func (f Format) signed(b uint64) int64 {
	s := 64 - uint(f.width())
	return int64(b<<s) >> s
}

// IsNaN reports whether b is a NaN of this format.
func (f Format) IsNaN(b uint64) bool {
	if f.Int {
		return false
	}
	mag := b &^ f.signMask()
	expAll := uint64(1)<<f.ExpBits - 1
	e := mag >> f.MantBits
	m := mag & (1<<f.MantBits - 1)
	if f.FN {
		return e == expAll && m == 1<<f.MantBits-1
	}
	return e == expAll && m != 0
}

// Float decodes b to a float64 (exactly: every format here fits).
func (f Format) Float(b uint64) float64 {
	if f.Int {
		if f.Unsigned {
			return float64(b)
		}
		return float64(f.signed(b))
	}
	switch f.Name {
	case "f64":
		return math.Float64frombits(b)
	case "f32":
		return float64(math.Float32frombits(uint32(b)))
	case "bf16":
		return float64(math.Float32frombits(uint32(b) << 16))
	}
	sign := 1.0
	if b&f.signMask() != 0 {
		sign = -1
	}
	mag := b &^ f.signMask()
	expAll := uint64(1)<<f.ExpBits - 1
	e := mag >> f.MantBits
	m := mag & (1<<f.MantBits - 1)
	bias := int(1)<<(f.ExpBits-1) - 1
	switch {
	case f.IsNaN(b):
		return math.NaN()
	case e == expAll && !f.FN:
		return sign * math.Inf(1)
	case e == 0:
		return sign * math.Ldexp(float64(m), 1-bias-f.MantBits)
	}
	return sign * math.Ldexp(float64(m|1<<f.MantBits), int(e)-bias-f.MantBits)
}

// ordered maps b to an unsigned integer that sorts like the values (the session core's rule): negative
// patterns are flipped below the positive ones, so −0 and +0 are adjacent, one ULP apart.
func (f Format) ordered(b uint64) uint64 {
	mask := ^uint64(0) >> (64 - f.width())
	if b&f.signMask() != 0 {
		return ^b & mask
	}
	return b | f.signMask()
}

// ULPNaNNumber is the distance between a NaN and a number (as in the session core).
const ULPNaNNumber = math.MaxUint64

// ULP is the distance between a and b: for floats the number of representable steps between them (0 only
// when the bits are equal), for integers |a−b|. A NaN against a number is ULPNaNNumber.
func (f Format) ULP(a, b uint64) uint64 {
	if a == b {
		return 0
	}
	if f.Int && f.Unsigned {
		return max(a, b) - min(a, b)
	}
	if f.Int {
		x, y := f.signed(a), f.signed(b)
		if x > y {
			return uint64(x) - uint64(y)
		}
		return uint64(y) - uint64(x)
	}
	if f.IsNaN(a) != f.IsNaN(b) {
		return ULPNaNNumber
	}
	x, y := f.ordered(a), f.ordered(b)
	if x > y {
		return x - y
	}
	return y - x
}

// Bucket is the log2 bucket of a ULP distance: 0 for equal, b for ULP in [2^(b-1), 2^b).
func Bucket(ulp uint64) uint8 { return uint8(bits.Len64(ulp)) }

// Fields splits b into sign, exponent and mantissa bit strings (most significant first).
// Integers return their sign bit and the 31 value bits as "mantissa".
func (f Format) Fields(b uint64) (sign, exp, mant string) {
	s := fmt.Sprintf("%0*b", f.width(), b)
	if f.Unsigned {
		return "", "", s
	}
	return s[:1], s[1 : 1+f.ExpBits], s[1+f.ExpBits:]
}

// Hex formats b as 0x with the format's width.
func (f Format) Hex(b uint64) string { return fmt.Sprintf("0x%0*X", f.Size*2, b) }

// Decimal formats the value of b with enough digits to tell neighbouring values apart.
func (f Format) Decimal(b uint64) string {
	if f.Int && f.Unsigned {
		return fmt.Sprintf("%d", b)
	}
	if f.Int {
		return fmt.Sprintf("%d", f.signed(b))
	}
	v := f.Float(b)
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	digits := map[string]int{"f64": 17, "f32": 9, "bf16": 4, "f16": 5, "f8e4m3": 3, "f8e5m2": 3}[f.Name]
	return fmt.Sprintf("%.*g", digits, v)
}

// RelErr is |a-b| / max(|a|, |b|), 0 when both are zero, +Inf when either is not finite and they differ.
func (f Format) RelErr(a, b uint64) float64 {
	x, y := f.Float(a), f.Float(b)
	if a == b || x == y {
		return 0
	}
	if math.IsNaN(x) || math.IsNaN(y) || math.IsInf(x, 0) || math.IsInf(y, 0) {
		return math.Inf(1)
	}
	return math.Abs(x-y) / math.Max(math.Abs(x), math.Abs(y))
}
