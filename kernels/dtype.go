package kernels

import (
	"fmt"
	"math"
	"strings"
)

// Profile selects the arithmetic: Canonical is the invariant contract of docs/arithmetic.md; Standard mimics
// vendor libraries (split-K from M, blocking from the batch, prefill/decode-specific attention) and is
// expected to differ by a few ULP between batch sizes, TP degrees and prefill/decode.
type Profile int

const (
	Canonical Profile = iota // docs/arithmetic.md §1–12
	Standard                 // docs/arithmetic.md §13
)

func (p Profile) String() string {
	switch p {
	case Canonical:
		return "canonical"
	case Standard:
		return "standard"
	}
	return fmt.Sprintf("Profile(%d)", int(p))
}

// ParseProfile parses "canonical" or "standard".
func ParseProfile(s string) (Profile, error) {
	switch strings.ToLower(s) {
	case "canonical":
		return Canonical, nil
	case "standard":
		return Standard, nil
	}
	return 0, fmt.Errorf("kernels: unknown kernel profile %q (want canonical or standard)", s)
}

// DType is the dtype an op rounds its output to (docs/arithmetic.md §1).
type DType uint8

const (
	F32  DType = iota // no rounding (NaN canonicalised): float32 checkpoints, logits, log-probabilities
	BF16              // round to nearest even to bfloat16
	F16               // round to nearest even to IEEE half
)

func (d DType) String() string {
	switch d {
	case F32:
		return "f32"
	case BF16:
		return "bf16"
	case F16:
		return "f16"
	}
	return fmt.Sprintf("DType(%d)", int(d))
}

// ParseDType parses "f32", "bf16" or "f16".
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(s) {
	case "f32", "float32":
		return F32, nil
	case "bf16", "bfloat16":
		return BF16, nil
	case "f16", "float16":
		return F16, nil
	}
	return 0, fmt.Errorf("kernels: unknown dtype %q (want f32, bf16 or f16)", s)
}

// CanonicalNaN is the one NaN every op outputs (quiet, positive): op outputs compare bitwise.
const CanonicalNaN = 0x7FC00000

// Round rounds x to d (docs/arithmetic.md §1).
func (d DType) Round(x float32) float32 {
	switch d {
	case BF16:
		return RoundBF16(x)
	case F16:
		return RoundF16(x)
	}
	if x != x {
		return math.Float32frombits(CanonicalNaN)
	}
	return x
}

// RoundSlice rounds every element of x to d in place.
func (d DType) RoundSlice(x []float32) {
	for i, v := range x {
		x[i] = d.Round(v)
	}
}

// RoundBF16 rounds x to the nearest bfloat16 (ties to even), returned as float32; NaN becomes CanonicalNaN.
func RoundBF16(x float32) float32 {
	u := math.Float32bits(x)
	if u&0x7FFFFFFF > 0x7F800000 {
		return math.Float32frombits(CanonicalNaN)
	}
	u += 0x7FFF + (u>>16)&1
	return math.Float32frombits(u & 0xFFFF0000)
}

// ToBF16Bits returns the bfloat16 bits of x after RoundBF16 (exact when x is already bf16).
func ToBF16Bits(x float32) uint16 { return uint16(math.Float32bits(RoundBF16(x)) >> 16) }

// FromBF16Bits widens bfloat16 bits to float32 (exact).
func FromBF16Bits(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// RoundF16 rounds x to the nearest IEEE half (ties to even, subnormals kept), returned as float32.
func RoundF16(x float32) float32 {
	if x != x {
		return math.Float32frombits(CanonicalNaN)
	}
	u := math.Float32bits(x)
	sign := u & 0x80000000
	a := math.Float32frombits(u &^ 0x80000000)
	var r float32
	switch {
	case a >= 65520:
		r = float32(math.Inf(1))
	case a < 0x1p-14:
		// half subnormals are multiples of 2^-24: both products are exact
		r = float32(math.RoundToEven(float64(float32(a*0x1p24)))) * 0x1p-24
	default:
		v := math.Float32bits(a)
		v = (v + 0x0FFF + (v>>13)&1) & 0xFFFFE000
		r = math.Float32frombits(v)
	}
	return math.Float32frombits(math.Float32bits(r) | sign)
}

// ToF16Bits returns the IEEE half bits of x after RoundF16.
func ToF16Bits(x float32) uint16 {
	r := RoundF16(x)
	u := math.Float32bits(r)
	sign := uint16(u>>16) & 0x8000
	a := math.Float32frombits(u &^ 0x80000000)
	switch {
	case a != a:
		return 0x7E00
	case math.IsInf(float64(a), 0):
		return sign | 0x7C00
	case a < 0x1p-14:
		return sign | uint16(a*0x1p24)
	}
	v := math.Float32bits(a)
	return sign | uint16(((v>>23)-127+15)<<10) | uint16((v>>13)&0x3FF)
}

// FromF16Bits widens IEEE half bits to float32 (exact).
func FromF16Bits(b uint16) float32 {
	sign := uint32(b&0x8000) << 16
	e := int(b>>10) & 0x1F
	m := uint32(b & 0x3FF)
	switch {
	case e == 0x1F:
		if m != 0 {
			return math.Float32frombits(sign | 0x7FC00000 | m<<13)
		}
		return math.Float32frombits(sign | 0x7F800000)
	case e == 0:
		v := float32(m) * 0x1p-24
		return math.Float32frombits(math.Float32bits(v) | sign)
	}
	return math.Float32frombits(sign | uint32(e-15+127)<<23 | m<<13)
}

// ULP is the distance between a and b in units in the last place of float32: the difference of their
// positions on the ordered integer line (+0 and -0 are 0 apart; any NaN against a non-NaN is MaxUint64,
// two NaNs are 0 apart).
func ULP(a, b float32) uint64 {
	an, bn := a != a, b != b
	if an || bn {
		if an && bn {
			return 0
		}
		return math.MaxUint64
	}
	oa, ob := ordered(a), ordered(b)
	if oa > ob {
		return uint64(oa - ob)
	}
	return uint64(ob - oa)
}

func ordered(x float32) int64 {
	u := math.Float32bits(x)
	if u&0x80000000 != 0 {
		return -int64(u & 0x7FFFFFFF)
	}
	return int64(u)
}

// FirstDiff compares a and b bitwise. It returns the first index whose bits differ and their ULP distance,
// ok = false when the slices are bitwise identical. A length difference is reported at index
// min(len(a), len(b)) with ulp = MaxUint64.
func FirstDiff(a, b []float32) (idx int, ulp uint64, ok bool) {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			u := ULP(a[i], b[i])
			if u == 0 { // +0 against -0, or two different NaNs: bits differ, report 1
				u = 1
			}
			return i, u, true
		}
	}
	if len(a) != len(b) {
		return n, math.MaxUint64, true
	}
	return 0, 0, false
}
