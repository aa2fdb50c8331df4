package fp

import (
	"math"
	"testing"
)

// Per float dtype: one, the largest finite value, +Inf (0: none), a NaN and another NaN, the sign bit.
var floatCases = []struct {
	dt                             DType
	one, maxF, inf, nan, nan2, neg uint64
}{
	{BF16, 0x3f80, 0x7f7f, 0x7f80, 0x7fc0, 0x7fc1, 0x8000},
	{F16, 0x3c00, 0x7bff, 0x7c00, 0x7e00, 0x7e01, 0x8000},
	{F32, 0x3f800000, 0x7f7fffff, 0x7f800000, 0x7fc00000, 0x7fc00001, 0x80000000},
	{F64, 0x3ff0000000000000, 0x7fefffffffffffff, 0x7ff0000000000000, 0x7ff8000000000000, 0x7ff8000000000001, 1 << 63},
	{F8E4M3, 0x38, 0x7e, 0, 0x7f, 0xff, 0x80},
	{F8E5M2, 0x3c, 0x7b, 0x7c, 0x7e, 0x7f, 0x80},
}

func TestCompareFloats(t *testing.T) {
	type tc struct {
		name  string
		a, b  uint64
		class Class
		ulp   uint64
	}
	for _, fl := range floatCases {
		f := FormatOf(fl.dt)
		cases := []tc{
			{"equal", fl.one, fl.one, ClassEqual, 0},
			{"+0 vs -0", 0, fl.neg, ClassNumeric, 1},
			{"-0 vs +0", fl.neg, 0, ClassNumeric, 1},
			{"+0 vs min subnormal", 0, 1, ClassNumeric, 1},
			{"-0 vs -min subnormal", fl.neg, fl.neg | 1, ClassNumeric, 1},
			{"-min sub vs +min sub", fl.neg | 1, 1, ClassNumeric, 3},
			{"max subnormal vs min normal", 1<<f.MantBits - 1, 1 << f.MantBits, ClassNumeric, 1},
			{"one vs next", fl.one, fl.one + 1, ClassNumeric, 1},
			{"one vs -one", fl.one, fl.neg | fl.one, ClassNumeric, 2*fl.one + 1},
			{"one+16 vs one", fl.one + 16, fl.one, ClassNumeric, 16},
			{"nan vs same nan", fl.nan, fl.nan, ClassEqual, 0},
			{"nan vs other nan", fl.nan, fl.nan2, ClassNaNPayload, absDiff(f.Ordered(fl.nan), f.Ordered(fl.nan2))},
			{"nan vs one", fl.nan, fl.one, ClassNaNNumber, ULPNaNNumber},
			{"zero vs nan", 0, fl.nan, ClassNaNNumber, ULPNaNNumber},
			{"-0 vs -nan", fl.neg, fl.neg | fl.nan, ClassNaNNumber, ULPNaNNumber},
		}
		if fl.inf != 0 {
			cases = append(cases,
				tc{"max vs inf", fl.maxF, fl.inf, ClassNumeric, 1},
				tc{"-max vs -inf", fl.neg | fl.maxF, fl.neg | fl.inf, ClassNumeric, 1},
				tc{"-inf vs +inf", fl.neg | fl.inf, fl.inf, ClassNumeric, 2*fl.inf + 1},
				tc{"inf vs nan", fl.inf, fl.nan, ClassNaNNumber, ULPNaNNumber},
			)
		} else {
			cases = append(cases, tc{"max vs nan (no inf)", fl.maxF, fl.nan, ClassNaNNumber, ULPNaNNumber},
				tc{"-max vs +max", fl.neg | fl.maxF, fl.maxF, ClassNumeric, 2*fl.maxF + 1})
		}
		for _, c := range cases {
			cls, d := f.Compare(c.a, c.b)
			if cls != c.class || d != c.ulp {
				t.Errorf("%s %s (%#x, %#x): got %v %d, want %v %d", fl.dt, c.name, c.a, c.b, cls, d, c.class, c.ulp)
			}
			if u := f.ULP(c.b, c.a); u != c.ulp {
				t.Errorf("%s %s reversed: ULP %d, want %d", fl.dt, c.name, u, c.ulp)
			}
		}
	}
}

func TestCompareNaNCap(t *testing.T) {
	// the two f64 NaNs farthest apart: the distance stays below ULPNaNNumber
	cls, d := FormatOf(F64).Compare(math.MaxUint64, math.MaxUint64>>1)
	if cls != ClassNaNPayload || d != ULPNaNNumber-1 {
		t.Fatalf("got %v %d", cls, d)
	}
}

func TestCompareIntegers(t *testing.T) {
	cases := []struct {
		dt   DType
		a, b uint64
		ulp  uint64
	}{
		{I32, 1, 1, 0},
		{I32, 0xffffffff, 1, 2}, // −1 vs 1
		{I32, 0x80000000, 0x7fffffff, math.MaxUint32},
		{I64, 1 << 63, 1<<63 - 1, math.MaxUint64},
		{I64, math.MaxUint64, 0, 1},
		{U8, 0, 255, 255},
		{U8, 3, 250, 247},
		{Bool, 0, 1, 1},
	}
	for _, c := range cases {
		cls, d := FormatOf(c.dt).Compare(c.a, c.b)
		if d != c.ulp || (cls == ClassEqual) != (c.a == c.b) || cls == ClassNaNNumber || cls == ClassNaNPayload {
			t.Errorf("%s %#x vs %#x: %v %d, want %d", c.dt, c.a, c.b, cls, d, c.ulp)
		}
	}
}

// The ordered map sorts every non-NaN pattern like its value and is a bijection onto consecutive integers:
// exhaustive for the 8- and 16-bit floats, around the interesting places for f32 and f64.
func TestOrderedMonotonic(t *testing.T) {
	for _, fl := range floatCases {
		f := FormatOf(fl.dt)
		var patterns []uint64
		if f.Size <= 2 {
			for x := uint64(0); x <= f.Mask; x++ {
				patterns = append(patterns, x)
			}
		} else {
			for _, c := range []uint64{0, 1, 1 << f.MantBits, fl.one, fl.maxF, fl.inf, fl.nan} {
				for d := uint64(0); d < 64; d++ {
					patterns = append(patterns, (c+d)&f.Mask, (c-d)&f.Mask, (c+d)&f.Mask|fl.neg, (c-d)&f.Mask|fl.neg)
				}
			}
		}
		seen := map[uint64]uint64{}
		for _, x := range patterns {
			o := f.Ordered(x)
			if o > f.Mask {
				t.Fatalf("%s: Ordered(%#x) = %#x beyond the width", fl.dt, x, o)
			}
			if y, dup := seen[o]; dup && y != x {
				t.Fatalf("%s: Ordered(%#x) = Ordered(%#x)", fl.dt, x, y)
			}
			seen[o] = x
		}
		for _, x := range patterns {
			for _, y := range patterns[:min(len(patterns), 300)] {
				if f.IsNaN(x) || f.IsNaN(y) {
					continue
				}
				vx, vy := f.Value(x), f.Value(y)
				if vx < vy && f.Ordered(x) >= f.Ordered(y) || vx > vy && f.Ordered(x) <= f.Ordered(y) {
					t.Fatalf("%s: %#x (%v) and %#x (%v) ordered %#x, %#x", fl.dt, x, vx, y, vy, f.Ordered(x), f.Ordered(y))
				}
			}
		}
		if f.Size <= 2 { // consecutive values are 1 apart, across ±0 too
			prev, started := 0.0, false
			for o := uint64(0); o <= f.Mask; o++ {
				x := o &^ f.Sign // invert Ordered
				if o&f.Sign == 0 {
					x = ^o & f.Mask
				}
				if f.Ordered(x) != o {
					t.Fatalf("%s: Ordered(%#x) = %#x, want %#x", fl.dt, x, f.Ordered(x), o)
				}
				if f.IsNaN(x) {
					continue
				}
				v := f.Value(x)
				if started && (v < prev || v == prev && x != 0) { // only −0 → +0 keeps the value
					t.Fatalf("%s: order broken at %#x: %v after %v", fl.dt, x, v, prev)
				}
				prev, started = v, true
			}
		}
	}
}

func TestBucket(t *testing.T) {
	for d, want := range map[uint64]uint8{0: 0, 1: 1, 2: 2, 3: 2, 15: 4, 16: 5, ULPNaNNumber: 64} {
		if b := Bucket(d); b != want {
			t.Errorf("Bucket(%d) = %d, want %d", d, b, want)
		}
	}
}

func TestClassString(t *testing.T) {
	for c, want := range map[Class]string{ClassEqual: "equal", ClassNumeric: "numeric", ClassNaNPayload: "nan_payload",
		ClassNaNNumber: "nan_vs_number", 9: "class(9)"} {
		if c.String() != want {
			t.Errorf("%d: %q, want %q", c, c.String(), want)
		}
	}
}
