package fp

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func TestDTypeNames(t *testing.T) {
	sizes := map[DType]int{BF16: 2, F16: 2, F32: 4, F64: 8, I32: 4, I64: 8, U8: 1, Bool: 1, F8E4M3: 1, F8E5M2: 1}
	if len(DTypes()) != len(sizes) {
		t.Fatalf("DTypes() = %v", DTypes())
	}
	for _, d := range DTypes() {
		back, err := ParseDType(d.String())
		if err != nil || back != d || d.Size() != sizes[d] || !d.Valid() {
			t.Errorf("%v: parse %v %v, size %d", d, back, err, d.Size())
		}
		if d.IsFloat() != (FormatOf(d).Kind == KindFloat) || FormatOf(d).Name != d.String() || FormatOf(d).DType != d {
			t.Errorf("%v: layout disagrees", d)
		}
	}
	if InvalidDType.Valid() || InvalidDType.Size() != 0 || FormatOf(InvalidDType) != nil || DType(99).String() != "dtype(99)" {
		t.Error("invalid dtypes")
	}
	if _, err := ParseDType("F32"); err == nil || !strings.Contains(err.Error(), `unknown dtype "F32"`) {
		t.Errorf("ParseDType(F32): %v", err)
	}
	if _, err := ParseDType(strings.Repeat("x", 1000)); err == nil || len(err.Error()) > 80 {
		t.Errorf("long name: %v", err)
	}
	b, err := json.Marshal(struct{ D DType }{F8E5M2})
	if err != nil || string(b) != `{"D":"f8e5m2"}` {
		t.Fatalf("marshal: %s %v", b, err)
	}
	var v struct{ D DType }
	if err := json.Unmarshal(b, &v); err != nil || v.D != F8E5M2 {
		t.Fatalf("unmarshal: %v %v", v, err)
	}
	if _, err := json.Marshal(struct{ D DType }{}); err == nil {
		t.Error("marshalled the invalid dtype")
	}
}

func TestValueAndFormatting(t *testing.T) {
	cases := []struct {
		dt              DType
		x               uint64
		val             float64
		dec, short, hex string
	}{
		{BF16, 0x3f80, 1, "1", "1", "0x3f80"},
		{BF16, 0xc0a0, -5, "-5", "-5", "0xc0a0"},
		{BF16, 0x3c7b, 0.01531982421875, "0.015319824", "0.01532", "0x3c7b"},
		{BF16, 0x0001, math.Ldexp(1, -133), "9.1835e-41", "9.184e-41", "0x0001"},
		{F16, 0x7bff, 65504, "65504", "65504", "0x7bff"},
		{F16, 0x0001, math.Ldexp(1, -24), "5.9604645e-08", "5.9605e-08", "0x0001"},
		{F16, 0x8000, math.Copysign(0, -1), "-0", "-0", "0x8000"},
		{F16, 0xfc00, math.Inf(-1), "-Inf", "-Inf", "0xfc00"},
		{F8E4M3, 0x7e, 448, "448", "448", "0x7e"},
		{F8E4M3, 0x78, 256, "256", "256", "0x78"}, // exponent all ones is finite in e4m3fn
		{F8E4M3, 0x01, math.Ldexp(1, -9), "0.001953125", "0.00195", "0x01"},
		{F8E5M2, 0x7b, 57344, "57344", "5.73e+04", "0x7b"},
		{F8E5M2, 0x7c, math.Inf(1), "+Inf", "+Inf", "0x7c"},
		{F32, 0x3dcccccd, float64(float32(0.1)), "0.1", "0.100000001", "0x3dcccccd"},
		{F32, 0x3f800001, float64(math.Nextafter32(1, 2)), "1.0000001", "1.00000012", "0x3f800001"},
		{F64, 0x3fb999999999999a, 0.1, "0.1", "0.10000000000000001", "0x3fb999999999999a"},
		{I32, 0xfffffffe, -2, "-2", "-2", "0xfffffffe"},
		{I64, 0xfffffffffffffffe, -2, "-2", "-2", "0xfffffffffffffffe"},
		{U8, 0xff, 255, "255", "255", "0xff"},
		{Bool, 1, 1, "true", "true", "0x01"},
	}
	for _, c := range cases {
		f := FormatOf(c.dt)
		if v := f.Value(c.x); v != c.val || math.Signbit(v) != math.Signbit(c.val) {
			t.Errorf("%s %#x: value %v, want %v", c.dt, c.x, v, c.val)
		}
		if s := f.Decimal(c.x); s != c.dec {
			t.Errorf("%s %#x: Decimal %q, want %q", c.dt, c.x, s, c.dec)
		}
		if s := f.Short(c.x); s != c.short {
			t.Errorf("%s %#x: Short %q, want %q", c.dt, c.x, s, c.short)
		}
		if s := f.Hex(c.x); s != c.hex {
			t.Errorf("%s %#x: Hex %q, want %q", c.dt, c.x, s, c.hex)
		}
	}
	for _, c := range []struct {
		dt   DType
		x    uint64
		want string
	}{{F32, 0xffc00000, "-NaN"}, {F32, 0x7f800001, "NaN"}, {F8E4M3, 0x7f, "NaN"}, {F8E4M3, 0xff, "-NaN"}, {F8E5M2, 0x7d, "NaN"}} {
		f := FormatOf(c.dt)
		if s := f.Decimal(c.x); s != c.want || !f.IsNaN(c.x) || !math.IsNaN(f.Value(c.x)) || f.Short(c.x) != c.want {
			t.Errorf("%s %#x: %q, want %q", c.dt, c.x, s, c.want)
		}
	}
}

func TestSpecialsAndFields(t *testing.T) {
	e4, e5 := FormatOf(F8E4M3), FormatOf(F8E5M2)
	if !e4.IsNaN(0x7f) || e4.IsNaN(0x7e) || e4.IsInf(0x78) || e4.IsInf(0x7f) {
		t.Error("f8e4m3fn: 0x7f is the only positive NaN, no infinities")
	}
	if !e5.IsInf(0x7c) || !e5.IsInf(0xfc) || e5.IsNaN(0x7c) || !e5.IsNaN(0x7d) {
		t.Error("f8e5m2: 0x7c is +Inf, 0x7d NaN")
	}
	if FormatOf(I32).IsNaN(0xffffffff) || FormatOf(U8).IsInf(0xff) {
		t.Error("integers are never NaN or Inf")
	}
	bf, _ := Parse("bf16")
	if s, e, m := bf.Fields(0xbf80); s != "1" || e != "01111111" || m != "0000000" {
		t.Errorf("bf16 Fields(0xbf80) = %s %s %s", s, e, m)
	}
	i32, _ := Parse("i32")
	if s, e, m := i32.Fields(0x80000001); s != "1" || e != "" || m != "0000000000000000000000000000001" {
		t.Errorf("i32 Fields = %q %q %q", s, e, m)
	}
	u8, _ := Parse("u8")
	if s, e, m := u8.Fields(5); s != "" || e != "" || m != "00000101" {
		t.Errorf("u8 Fields(5) = %q %q %q", s, e, m)
	}
	if _, err := Parse("f64x"); err == nil {
		t.Error("Parse accepted an unknown type")
	}
	data := []byte{0x80, 0x3f, 0x00, 0x40, 1, 2, 3, 4, 5, 6, 7, 8}
	if b := bf.Bits(data, 1); b != 0x4000 {
		t.Errorf("bf16 Bits = %#x", b)
	}
	if b := FormatOf(F64).Bits(data[4:], 0); b != 0x0807060504030201 {
		t.Errorf("f64 Bits = %#x", b)
	}
	if b := FormatOf(U8).Bits(data, 3); b != 0x40 {
		t.Errorf("u8 Bits = %#x", b)
	}
}

func TestRelErr(t *testing.T) {
	bf := FormatOf(BF16)
	cases := []struct {
		a, b uint64
		want float64
	}{
		{0x3f80, 0x4000, 0.5},         // 1 vs 2
		{0x3f80, 0x3f80, 0},           // equal bits
		{0x0000, 0x8000, 0},           // +0 vs −0: equal values
		{0x3f80, 0x7f80, math.Inf(1)}, // 1 vs +Inf
		{0x7fc0, 0x7fc1, math.Inf(1)}, // NaNs
		{0xbf80, 0x3f80, 2},           // −1 vs 1
		{0x0000, 0x3f80, 1},           // 0 vs 1
	}
	for _, c := range cases {
		if r := bf.RelErr(c.a, c.b); r != c.want {
			t.Errorf("RelErr(%#x, %#x) = %v, want %v", c.a, c.b, r, c.want)
		}
	}
}
