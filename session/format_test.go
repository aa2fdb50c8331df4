package session

import (
	"encoding/binary"
	"math"
	"testing"

	"bitalign/capture"
)

func le(dt capture.DType, x uint64) []byte {
	b := make([]byte, 8)
	binary.LittleEndian.PutUint64(b, x)
	return b[:dt.Size()]
}

func TestULPEdgeCases(t *testing.T) {
	type tc struct {
		name  string
		a, b  uint64
		class Class
		ulp   uint64
	}
	// per float dtype: (one, maxFinite, inf (0 = none), qnan, otherNaN)
	floats := []struct {
		dt                             capture.DType
		one, maxF, inf, nan, nan2, neg uint64 // neg: the sign bit
	}{
		{capture.BF16, 0x3f80, 0x7f7f, 0x7f80, 0x7fc0, 0x7fc1, 0x8000},
		{capture.F16, 0x3c00, 0x7bff, 0x7c00, 0x7e00, 0x7e01, 0x8000},
		{capture.F32, 0x3f800000, 0x7f7fffff, 0x7f800000, 0x7fc00000, 0x7fc00001, 0x80000000},
		{capture.F64, 0x3ff0000000000000, 0x7fefffffffffffff, 0x7ff0000000000000, 0x7ff8000000000000, 0x7ff8000000000001, 1 << 63},
		{capture.F8E4M3, 0x38, 0x7e, 0, 0x7f, 0xff, 0x80},
		{capture.F8E5M2, 0x3c, 0x7b, 0x7c, 0x7e, 0x7f, 0x80},
	}
	for _, fl := range floats {
		cases := []tc{
			{"equal", fl.one, fl.one, ClassEqual, 0},
			{"+0 vs -0", 0, fl.neg, ClassNumeric, 1},
			{"-0 vs +0", fl.neg, 0, ClassNumeric, 1},
			{"+0 vs min subnormal", 0, 1, ClassNumeric, 1},
			{"-min sub vs +min sub", fl.neg | 1, 1, ClassNumeric, 3},
			{"one vs next", fl.one, fl.one + 1, ClassNumeric, 1},
			{"one vs -one", fl.one, fl.neg | fl.one, ClassNumeric, 2*fl.one + 1},
			{"one vs one+16", fl.one + 16, fl.one, ClassNumeric, 16},
			{"nan vs same nan", fl.nan, fl.nan, ClassEqual, 0},
			{"nan vs other nan", fl.nan, fl.nan2, ClassNaNPayload, absDiff(formats[fl.dt].ordered(fl.nan), formats[fl.dt].ordered(fl.nan2))},
			{"nan vs one", fl.nan, fl.one, ClassNaNNumber, ULPNaNNumber},
			{"zero vs nan", 0, fl.nan, ClassNaNNumber, ULPNaNNumber},
		}
		if fl.inf != 0 {
			cases = append(cases,
				tc{"max vs inf", fl.maxF, fl.inf, ClassNumeric, 1},
				tc{"-inf vs +inf", fl.neg | fl.inf, fl.inf, ClassNumeric, 2*fl.inf + 1},
				tc{"inf vs nan", fl.inf, fl.nan, ClassNaNNumber, ULPNaNNumber},
			)
		} else {
			cases = append(cases, tc{"max vs nan (no inf)", fl.maxF, fl.nan, ClassNaNNumber, ULPNaNNumber})
		}
		for _, c := range cases {
			cls, d := CompareElement(fl.dt, le(fl.dt, c.a), le(fl.dt, c.b))
			if cls != c.class || d != c.ulp {
				t.Errorf("%s %s (%#x, %#x): got %v %d, want %v %d", fl.dt, c.name, c.a, c.b, cls, d, c.class, c.ulp)
			}
			if u := ULP(fl.dt, le(fl.dt, c.a), le(fl.dt, c.b)); u != c.ulp {
				t.Errorf("%s %s: ULP = %d, want %d", fl.dt, c.name, u, c.ulp)
			}
		}
	}
}

func TestULPNaNSignFlipF64(t *testing.T) {
	// the two NaNs farthest apart: the distance is capped below ULPNaNNumber
	cls, d := CompareElement(capture.F64, le(capture.F64, math.MaxUint64), le(capture.F64, math.MaxUint64>>1))
	if cls != ClassNaNPayload || d != math.MaxUint64-1 {
		t.Fatalf("got %v %d", cls, d)
	}
}

func TestULPIntegers(t *testing.T) {
	cases := []struct {
		dt   capture.DType
		a, b uint64
		ulp  uint64
	}{
		{capture.I32, 1, 1, 0},
		{capture.I32, 0xffffffff, 1, 2}, // −1 vs 1
		{capture.I32, 0x80000000, 0x7fffffff, math.MaxUint32},
		{capture.I64, 1 << 63, 1<<63 - 1, math.MaxUint64},
		{capture.I64, math.MaxUint64, 0, 1},
		{capture.U8, 0, 255, 255},
		{capture.Bool, 0, 1, 1},
	}
	for _, c := range cases {
		if d := ULP(c.dt, le(c.dt, c.a), le(c.dt, c.b)); d != c.ulp {
			t.Errorf("%s %#x vs %#x: %d, want %d", c.dt, c.a, c.b, d, c.ulp)
		}
	}
}

func TestDecodeAndFormat(t *testing.T) {
	cases := []struct {
		dt       capture.DType
		x        uint64
		val      float64
		dec, hex string
	}{
		{capture.BF16, 0x3f80, 1, "1", "0x3f80"},
		{capture.BF16, 0xc0a0, -5, "-5", "0xc0a0"},
		{capture.F16, 0x7bff, 65504, "65504", "0x7bff"},
		{capture.F16, 0x0001, math.Ldexp(1, -24), "5.9604645e-08", "0x0001"},
		{capture.F16, 0x8000, 0, "-0", "0x8000"},
		{capture.F8E4M3, 0x7e, 448, "448", "0x7e"},
		{capture.F8E4M3, 0x01, math.Ldexp(1, -9), "0.001953125", "0x01"},
		{capture.F8E5M2, 0x7b, 57344, "57344", "0x7b"},
		{capture.F8E5M2, 0xfc, math.Inf(-1), "-Inf", "0xfc"},
		{capture.F32, 0x3dcccccd, float64(float32(0.1)), "0.1", "0x3dcccccd"},
		{capture.F64, 0x3fb999999999999a, 0.1, "0.1", "0x3fb999999999999a"},
		{capture.I32, 0xfffffffe, -2, "-2", "0xfffffffe"},
		{capture.Bool, 1, 1, "true", "0x01"},
	}
	for _, c := range cases {
		f := formats[c.dt]
		if v := f.value(c.x); v != c.val {
			t.Errorf("%s %#x: value %v, want %v", c.dt, c.x, v, c.val)
		}
		if s := f.decimal(c.x); s != c.dec {
			t.Errorf("%s %#x: decimal %q, want %q", c.dt, c.x, s, c.dec)
		}
		if s := f.hex(c.x); s != c.hex {
			t.Errorf("%s %#x: hex %q, want %q", c.dt, c.x, s, c.hex)
		}
	}
	if s := formats[capture.F32].decimal(0xffc00000); s != "-NaN" {
		t.Errorf("f32 -NaN: %q", s)
	}
	if s := formats[capture.F8E4M3].decimal(0x7f); s != "NaN" {
		t.Errorf("e4m3 NaN: %q", s)
	}
}

// Every f16 and bf16 value decodes as float32 conversion would (bf16: shift; f16 checked against the
// bf16-free path: round trip through the decoded float32's bits).
func TestDecodeF16Exhaustive(t *testing.T) {
	f := formats[capture.F16]
	for x := uint64(0); x < 1<<16; x++ {
		v := f.value(x)
		if f.isNaN(x) {
			if !math.IsNaN(v) {
				t.Fatalf("%#x: want NaN", x)
			}
			continue
		}
		// re-encode: f16 values are exact in float32; check the exponent/mantissa reconstruction
		b := math.Float32bits(float32(v))
		sign := uint64(b>>31) << 15
		if x&^0x8000 == 0 {
			if b&^(1<<31) != 0 || uint64(b>>31)<<15 != x&0x8000 {
				t.Fatalf("%#x: zero decoded as %v", x, v)
			}
			continue
		}
		if sign != x&0x8000 {
			t.Fatalf("%#x: sign of %v", x, v)
		}
	}
	// monotonic: ordered bits sort like values for all non-NaN patterns
	prev := math.Inf(-1)
	for o := uint64(0); o < 1<<16; o++ {
		var x uint64
		if o&0x8000 != 0 {
			x = o &^ 0x8000
		} else {
			x = ^o & 0xffff
		}
		if f.ordered(x) != o {
			t.Fatalf("ordered(%#x) = %#x, want %#x", x, f.ordered(x), o)
		}
		if f.isNaN(x) {
			continue
		}
		v := f.value(x)
		if v < prev {
			t.Fatalf("order broken at %#x: %v < %v", x, v, prev)
		}
		prev = v
	}
}
