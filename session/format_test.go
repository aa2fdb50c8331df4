package session

import (
	"encoding/binary"
	"math"
	"testing"

	"bitalign/capture"
	"bitalign/internal/fp"
)

func le(dt capture.DType, x uint64) []byte {
	b := make([]byte, 8)
	binary.LittleEndian.PutUint64(b, x)
	return b[:dt.Size()]
}

// The exported per-element comparison is internal/fp's rule on little-endian bytes (the rule's own table
// tests live there); the report's contract in a few cases: ±0 is 1 ULP, NaN against a number is a class.
func TestCompareElement(t *testing.T) {
	cases := []struct {
		dt    capture.DType
		a, b  uint64
		class Class
		ulp   uint64
	}{
		{capture.BF16, 0x0000, 0x8000, ClassNumeric, 1},
		{capture.BF16, 0x0001, 0x8001, ClassNumeric, 3},
		{capture.F32, 0x3f800000, 0x3f800000, ClassEqual, 0},
		{capture.F32, 0x7fc00000, 0x3f800000, ClassNaNNumber, ULPNaNNumber},
		{capture.F16, 0x7e00, 0x7e01, ClassNaNPayload, 1},
		{capture.F8E4M3, 0x7e, 0x7f, ClassNaNNumber, ULPNaNNumber},
		{capture.F8E5M2, 0x7b, 0x7c, ClassNumeric, 1},
		{capture.F64, math.MaxUint64, math.MaxUint64 >> 1, ClassNaNPayload, ULPNaNNumber - 1},
		{capture.I32, 0xffffffff, 1, ClassNumeric, 2},
		{capture.Bool, 0, 1, ClassNumeric, 1},
	}
	for _, c := range cases {
		cls, d := CompareElement(c.dt, le(c.dt, c.a), le(c.dt, c.b))
		if cls != c.class || d != c.ulp || ULP(c.dt, le(c.dt, c.a), le(c.dt, c.b)) != c.ulp {
			t.Errorf("%s %#x vs %#x: %v %d, want %v %d", c.dt, c.a, c.b, cls, d, c.class, c.ulp)
		}
		if fc, fd := fp.FormatOf(c.dt).Compare(c.a, c.b); fc != cls || fd != d {
			t.Errorf("%s %#x vs %#x: session %v %d, fp %v %d", c.dt, c.a, c.b, cls, d, fc, fd)
		}
	}
	if cls, d := CompareElement(capture.F32, []byte{1, 2}, []byte{1, 2, 3, 4}); cls != ClassNaNNumber || d != ULPNaNNumber {
		t.Errorf("short slice: %v %d", cls, d)
	}
	if _, err := formatOf(capture.InvalidDType); err == nil {
		t.Error("formatOf accepted the invalid dtype")
	}
}

// The SWAR pre-test flags a lane exactly when the element is NaN or Inf: every pattern of the 8- and 16-bit
// floats in every lane, and f32/f64 around their specials.
func TestSWARMasksFindSpecials(t *testing.T) {
	for _, dt := range capture.DTypes() {
		f := formats[dt]
		if f.kind != kindFloat {
			if f.swM != 0 || f.swL != 0 || f.swH != 0 {
				t.Errorf("%s: integer with SWAR masks", dt)
			}
			continue
		}
		var xs []uint64
		if f.size <= 2 {
			for x := uint64(0); x <= f.width; x++ {
				xs = append(xs, x)
			}
		} else {
			inf := (uint64(1)<<f.expBits - 1) << f.mantBits
			for _, c := range []uint64{0, 1, inf - 1, inf, inf + 1, f.width &^ f.sign} {
				xs = append(xs, c, c|f.sign)
			}
		}
		nb := uint(8 * f.size)
		for _, x := range xs {
			for lane := uint(0); lane < 64/nb; lane++ {
				w := x << (lane * nb)
				hit := ((w&f.swM)+f.swL)&f.swH != 0
				if want := f.isNaN(x) || f.isInf(x); hit != want {
					t.Fatalf("%s %#x in lane %d: flagged %v, want %v", dt, x, lane, hit, want)
				}
			}
		}
	}
}
