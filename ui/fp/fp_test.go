package fp

import (
	"math"
	"testing"
)

func TestDecode(t *testing.T) {
	tests := []struct {
		format string
		bits   uint64
		want   float64
	}{
		{"bf16", 0x3F80, 1},
		{"bf16", 0xC000, -2},
		{"bf16", 0x0001, math.Ldexp(1, -133)}, // smallest subnormal
		{"f16", 0x3C00, 1},
		{"f16", 0x0001, math.Ldexp(1, -24)},
		{"f16", 0x7BFF, 65504},
		{"f32", 0x3F800001, float64(math.Nextafter32(1, 2))},
		{"f8e4m3", 0x38, 1},
		{"f8e4m3", 0x7E, 448}, // largest finite e4m3fn
		{"f8e4m3", 0x01, math.Ldexp(1, -9)},
		{"f8e5m2", 0x3C, 1},
		{"f8e5m2", 0x7B, 57344},
		{"i32", 0xFFFFFFFF, -1},
		{"i64", 0xFFFFFFFFFFFFFFFE, -2},
		{"u8", 0xFF, 255},
		{"f64", 0x3FF0000000000001, 1 + math.Ldexp(1, -52)},
	}
	for _, tt := range tests {
		f, err := Parse(tt.format)
		if err != nil {
			t.Fatal(err)
		}
		if got := f.Float(tt.bits); got != tt.want {
			t.Errorf("%s %#x = %v, want %v", tt.format, tt.bits, got, tt.want)
		}
	}
}

func TestSpecials(t *testing.T) {
	e4, _ := Parse("f8e4m3")
	if !e4.IsNaN(0x7F) || e4.IsNaN(0x7E) || math.IsInf(e4.Float(0x78), 0) {
		t.Error("f8e4m3 (FN): 0x7F is the only positive NaN and 0x78 is finite")
	}
	e5, _ := Parse("f8e5m2")
	if !math.IsInf(e5.Float(0x7C), 1) || !e5.IsNaN(0x7D) {
		t.Error("f8e5m2: 0x7C is +Inf, 0x7D NaN")
	}
	if _, err := Parse("f64x"); err == nil {
		t.Error("Parse accepted an unknown type")
	}
}

func TestULP(t *testing.T) {
	bf, _ := Parse("bf16")
	tests := []struct {
		a, b uint64
		want uint64
	}{
		{0x3F80, 0x3F80, 0},
		{0x3F80, 0x3F81, 1},
		{0x0000, 0x8000, 1}, // +0 and -0 are adjacent
		{0x0001, 0x8001, 3}, // across zero: -min, -0, +0, +min
		{0x7FC0, 0x3F80, ULPNaNNumber},
		{0x3F80, 0x3F90, 16}, // bucket 5
	}
	for _, tt := range tests {
		if got := bf.ULP(tt.a, tt.b); got != tt.want {
			t.Errorf("ULP(%#x, %#x) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
	if Bucket(0) != 0 || Bucket(1) != 1 || Bucket(16) != 5 || Bucket(15) != 4 {
		t.Error("Bucket: want 0→0, 1→1, 15→4, 16→5")
	}
}

func TestFieldsAndFormat(t *testing.T) {
	bf, _ := Parse("bf16")
	s, e, m := bf.Fields(0xBF80)
	if s != "1" || e != "01111111" || m != "0000000" {
		t.Errorf("Fields(0xBF80) = %s %s %s", s, e, m)
	}
	if bf.Hex(0x3F80) != "0x3F80" || bf.Decimal(0x3F80) != "1" {
		t.Errorf("Hex/Decimal: %s %s", bf.Hex(0x3F80), bf.Decimal(0x3F80))
	}
	if r := bf.RelErr(0x3F80, 0x4000); r != 0.5 {
		t.Errorf("RelErr(1, 2) = %v, want 0.5", r)
	}
	if b := bf.Bits([]byte{0x80, 0x3F, 0x00, 0x40}, 1); b != 0x4000 {
		t.Errorf("Bits = %#x", b)
	}
}

func TestIntegersAndF64(t *testing.T) {
	i32, _ := Parse("i32")
	if u := i32.ULP(0xFFFFFFFF, 1); u != 2 {
		t.Errorf("i32 ULP(-1, 1) = %d, want 2", u)
	}
	u8, _ := Parse("u8")
	if u := u8.ULP(3, 250); u != 247 {
		t.Errorf("u8 ULP(3, 250) = %d, want 247", u)
	}
	if s, e, m := u8.Fields(5); s != "" || e != "" || m != "00000101" {
		t.Errorf("u8 Fields(5) = %q %q %q", s, e, m)
	}
	f64, _ := Parse("f64")
	if u := f64.ULP(0x3FF0000000000000, 0x3FF0000000000003); u != 3 {
		t.Errorf("f64 ULP = %d, want 3", u)
	}
	if u := f64.ULP(0, 1<<63); u != 1 {
		t.Errorf("f64 ULP(+0, -0) = %d, want 1", u)
	}
}
