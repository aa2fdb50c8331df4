package logprobs

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestExpMatchesMath: expInto gives math.Exp's bits on random arguments of the full-vocabulary measures' range
// (log-probabilities and logits minus their maximum, ≤ 0), on positive ones, on every edge exp_amd64.s
// branches on, and the self-check did not turn the copy off (on amd64).
func TestExpMatchesMath(t *testing.T) {
	if !expOK {
		t.Fatal("expSelfCheck: the copy of math.Exp disagrees with it; exp falls back to math.Exp")
	}
	r := rand.New(rand.NewPCG(15, 1))
	var xs []float64
	check := func(x float64) { xs = append(xs, x) }
	for i := 0; i < 2_000_000; i++ {
		switch i % 4 {
		case 0:
			check(-r.Float64() * 40) // logits minus their maximum
		case 1:
			check(-r.ExpFloat64() * 8) // log-probabilities
		case 2:
			check((r.Float64()*2 - 1) * 800) // the whole range, past both limits
		default:
			check(float64(float32(r.NormFloat64()*3)) - float64(float32(r.NormFloat64()*3))) // float32 differences
		}
	}
	for _, x := range []float64{0, math.Copysign(0, -1), 1, -1, expLimit, -expLimit, math.Nextafter(expLimit, 1),
		math.Nextafter(-expLimit, -1), 709.78, 709.79, -745.1, -745.2, -708.4, -1e300, 1e300, math.Inf(1),
		math.Inf(-1), math.NaN(), 5e-324, -5e-324, 0.34657359027997264, -0.34657359027997264, 1e-17} {
		check(x)
	}
	inside := []float64{-1, -2, 3, 0.5, -700, 700, 1e-300, -0.0}
	for _, x := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), 700.0001, -745, 1e300} {
		if !expAVX2(make([]float64, 8), append(slices.Clone(inside[:7]), x)) {
			t.Errorf("expAVX2 does not report the argument %v as outside the copy's range", x)
		}
	}
	if expAVX2(make([]float64, 8), inside) {
		t.Errorf("expAVX2 reports an argument of %v as outside its range", inside)
	}
	got := make([]float64, len(xs))
	expInto(got, xs)
	for i, x := range xs {
		if g, w := got[i], math.Exp(x); math.Float64bits(g) != math.Float64bits(w) {
			t.Fatalf("expInto: exp(%v) = %v (%#x), math.Exp = %v (%#x)", x, g, math.Float64bits(g), w, math.Float64bits(w))
		}
	}
}

// BenchmarkExp: math.Exp one call at a time against expInto over a row of logits minus their maximum.
func BenchmarkExp(b *testing.B) {
	xs := make([]float64, 4096)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range xs {
		xs[i] = -r.Float64() * 30
	}
	ys := make([]float64, len(xs))
	b.Run("math", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			for j, x := range xs {
				ys[j] = math.Exp(x)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(xs)), "ns/exp")
	})
	b.Run("slice", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			expInto(ys, xs)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(xs)), "ns/exp")
	})
}
