package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// randBF16 returns n bf16-representable values, normal with standard deviation sd.
func randBF16(r *rand.Rand, n int, sd float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = RoundBF16(float32(r.NormFloat64() * sd))
	}
	return x
}

// columns returns columns [c0, c1) of the (rows, cols) matrix a: one rank's K slice of a row-parallel matmul.
func columns(a []float32, rows, cols, c0, c1 int) []float32 {
	out := make([]float32, 0, rows*(c1-c0))
	for i := 0; i < rows; i++ {
		out = append(out, a[i*cols+c0:i*cols+c1]...)
	}
	return out
}

// assertSame fails with the first differing index and its ULP distance.
func assertSame(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if i, u, ok := FirstDiff(got, want); ok {
		t.Fatalf("%s: first difference at %d: %g (%#x) vs %g (%#x), %d ulp", what, i, at(got, i), bitsAt(got, i), at(want, i), bitsAt(want, i), u)
	}
}

// assertDiffers fails when got and want are bitwise identical (a control, e.g. the standard profile, that must
// diverge).
func assertDiffers(t *testing.T, what string, got, want []float32) {
	t.Helper()
	i, u, ok := FirstDiff(got, want)
	if !ok {
		t.Fatalf("%s: identical bits, but this control must diverge", what)
	}
	t.Logf("%s: differs (as it must) first at %d by %d ulp", what, i, u)
}

func at(x []float32, i int) float32 {
	if i < len(x) {
		return x[i]
	}
	return float32(math.NaN())
}

func bitsAt(x []float32, i int) uint32 { return math.Float32bits(at(x, i)) }

// relErr checks |got - ref| <= tol·scale elementwise, where scale is a per-element magnitude (for dot
// products Σ|x·w|, the quantity float32 rounding error is proportional to).
func checkClose(t *testing.T, what string, got []float32, ref, scale []float64, tol float64) {
	t.Helper()
	worst, wi := 0.0, -1
	for i := range got {
		e := math.Abs(float64(got[i])-ref[i]) / math.Max(scale[i], 1e-30)
		if e > worst || e != e {
			worst, wi = e, i
		}
	}
	if worst > tol || worst != worst {
		t.Fatalf("%s: error %.3g (relative to scale) at %d: got %g, reference %g; tolerance %.3g", what, worst, wi, got[wi], ref[wi], tol)
	}
}

func TestFirstDiff(t *testing.T) {
	a := []float32{1, 2, 3}
	if _, _, ok := FirstDiff(a, []float32{1, 2, 3}); ok {
		t.Fatal("identical slices reported different")
	}
	i, u, ok := FirstDiff(a, []float32{1, math.Nextafter32(2, 3), 3})
	if !ok || i != 1 || u != 1 {
		t.Fatalf("got (%d, %d, %v), want (1, 1, true)", i, u, ok)
	}
	if i, u, ok := FirstDiff([]float32{0}, []float32{float32(math.Copysign(0, -1))}); !ok || i != 0 || u != 1 {
		t.Fatalf("+0 vs -0: got (%d, %d, %v)", i, u, ok)
	}
	if i, _, ok := FirstDiff(a, a[:2]); !ok || i != 2 {
		t.Fatal("length difference not reported")
	}
	if u := ULP(-1e-45, 1e-45); u != 3 { // −min, −0, +0, +min: ±0 are one step apart (internal/fp)
		t.Fatalf("ULP across zero = %d, want 3", u)
	}
}

func TestRoundBF16(t *testing.T) {
	cases := []struct{ in, want uint32 }{
		{0x3F808000, 0x3F800000}, // tie, even stays
		{0x3F818000, 0x3F820000}, // tie, odd rounds up
		{0x3F808001, 0x3F810000},
		{0x7F7FFFFF, 0x7F800000}, // max float rounds to +Inf
		{0xFF7FFFFF, 0xFF800000},
		{0x00008000, 0x00000000}, // subnormal tie to even
		{0x00018000, 0x00020000},
		{0x7F800000, 0x7F800000},
		{0x7F800001, CanonicalNaN}, // signalling NaN becomes the canonical quiet NaN
		{0xFFC12345, CanonicalNaN},
		{0x80000000, 0x80000000},
	}
	for _, c := range cases {
		if got := math.Float32bits(RoundBF16(math.Float32frombits(c.in))); got != c.want {
			t.Errorf("RoundBF16(%#x) = %#x, want %#x", c.in, got, c.want)
		}
	}
	r := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 100000; i++ {
		x := randF32(r)
		y := RoundBF16(x)
		// reference: the nearer of the two bf16 neighbours, ties to the even one
		lo := math.Float32frombits(math.Float32bits(x) & 0xFFFF0000)
		hi := math.Float32frombits(math.Float32bits(lo) + 0x10000)
		hv := float64(hi)
		if math.IsInf(hv, 0) { // IEEE: beyond the largest finite value, the next step is ±2^128
			hv = math.Copysign(0x1p128, hv)
		}
		dl, dh := math.Abs(float64(x)-float64(lo)), math.Abs(float64(x)-hv)
		want := lo
		if dh < dl || (dh == dl && math.Float32bits(lo)&0x10000 != 0) {
			want = hi
		}
		if math.Float32bits(y) != math.Float32bits(want) {
			t.Fatalf("RoundBF16(%g = %#x) = %#x, want %#x", x, math.Float32bits(x), math.Float32bits(y), math.Float32bits(want))
		}
		if FromBF16Bits(ToBF16Bits(y)) != y {
			t.Fatalf("bf16 bits round trip of %g", y)
		}
	}
}

func TestRoundF16(t *testing.T) {
	// every finite half value, and the midpoints between neighbours, against round-to-nearest-even
	var vals []float64
	for b := 0; b < 0x7C00; b++ {
		vals = append(vals, float64(FromF16Bits(uint16(b))))
	}
	for i, v := range vals {
		if g := RoundF16(float32(v)); float64(g) != v {
			t.Fatalf("RoundF16(%g) = %g, not exact", v, g)
		}
		if ToF16Bits(float32(v)) != uint16(i) {
			t.Fatalf("ToF16Bits(%g) = %#x, want %#x", v, ToF16Bits(float32(v)), i)
		}
		if i+1 < len(vals) {
			mid := float32((v + vals[i+1]) / 2) // exact in float32
			want := v
			if i%2 == 1 {
				want = vals[i+1]
			}
			if g := RoundF16(mid); float64(g) != want {
				t.Fatalf("RoundF16(midpoint %g) = %g, want %g", mid, g, want)
			}
			if g := RoundF16(math.Nextafter32(mid, 1e9)); float64(g) != vals[i+1] {
				t.Fatalf("RoundF16(just above %g) = %g", mid, g)
			}
		}
	}
	if !math.IsInf(float64(RoundF16(65520)), 1) || RoundF16(65519) != 65504 || RoundF16(-65520) > -65504 {
		t.Fatal("f16 overflow threshold")
	}
}
