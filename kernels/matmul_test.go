package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// matmulRef is the float64 reference: ref = x·wᵀ + bias, scale = Σ|x·w| + |bias|.
func matmulRef(x, w, bias []float32, M, K, N int) (ref, scale []float64) {
	ref = make([]float64, M*N)
	scale = make([]float64, M*N)
	for m := 0; m < M; m++ {
		for n := 0; n < N; n++ {
			s, a := 0.0, 0.0
			for k := 0; k < K; k++ {
				p := float64(x[m*K+k]) * float64(w[n*K+k])
				s += p
				a += math.Abs(p)
			}
			if bias != nil {
				s += float64(bias[n])
				a += math.Abs(float64(bias[n]))
			}
			ref[m*N+n], scale[m*N+n] = s, a
		}
	}
	return ref, scale
}

func TestMatmulAccuracy(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, sh := range [][3]int{{1, 1, 1}, {1, 7, 3}, {3, 5, 9}, {2, 8, 4}, {5, 100, 17}, {1, 1027, 13}, {33, 257, 31}, {64, 64, 64}} {
		M, K, N := sh[0], sh[1], sh[2]
		for _, p := range []Profile{Canonical, Standard} {
			x, w, b := randBF16(r, M*K, 1), randBF16(r, N*K, 0.05), randBF16(r, N, 0.1)
			out := make([]float32, M*N)
			MatmulForward(p, F32, out, x, w, b, M, K, N)
			ref, scale := matmulRef(x, w, b, M, K, N)
			// float32 accumulation: error below about (chain length + tree depth)·2^-24 of Σ|x·w|
			tol := float64(K/8+8) * 0x1p-24 * 1.5
			if p == Standard {
				tol = float64(K+8) * 0x1p-24 * 1.5
			}
			checkClose(t, fmt.Sprintf("%v M=%d K=%d N=%d", p, M, K, N), out, ref, scale, tol)
			outB := make([]float32, M*N)
			MatmulForward(p, BF16, outB, x, w, b, M, K, N)
			for i := range outB {
				if outB[i] != RoundBF16(out[i]) {
					t.Fatalf("bf16 output is not the rounded f32 output at %d", i)
				}
			}
		}
	}
}

// TestMatmulBatchInvariance: a row's bits do not depend on M or on its position in the batch (canonical),
// and do (standard).
func TestMatmulBatchInvariance(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, kn := range [][2]int{{1000, 37}, {129, 64}, {64, 5}} {
		K, N := kn[0], kn[1]
		const maxM = 64
		w := randBF16(r, N*K, 0.05)
		rows := randBF16(r, maxM*K, 1)
		single := make([]float32, maxM*N) // each row alone (M = 1)
		for m := 0; m < maxM; m++ {
			MatmulForward(Canonical, BF16, single[m*N:(m+1)*N], rows[m*K:(m+1)*K], w, nil, 1, K, N)
		}
		for M := 1; M <= maxM; M++ {
			// rows placed at a shifted position: batch slot j holds row (j+M/2) mod maxM
			x := make([]float32, M*K)
			for j := 0; j < M; j++ {
				src := (j + M/2) % maxM
				copy(x[j*K:(j+1)*K], rows[src*K:(src+1)*K])
			}
			out := make([]float32, M*N)
			MatmulForward(Canonical, BF16, out, x, w, nil, M, K, N)
			for j := 0; j < M; j++ {
				src := (j + M/2) % maxM
				assertSame(t, fmt.Sprintf("K=%d N=%d M=%d slot %d", K, N, M, j), out[j*N:(j+1)*N], single[src*N:(src+1)*N])
			}
		}
		// standard: the same row at M = 1 and M = 64 (float32 output to see every ulp)
		one := make([]float32, N)
		MatmulForward(Standard, F32, one, rows[:K], w, nil, 1, K, N)
		all := make([]float32, maxM*N)
		MatmulForward(Standard, F32, all, rows, w, nil, maxM, K, N)
		if K >= 64 {
			assertDiffers(t, fmt.Sprintf("standard matmul K=%d N=%d row 0, M=1 vs M=64", K, N), all[:N], one)
		}
	}
}

// canonRef is docs/arithmetic.md §4 written as plainly as possible, one output at a time.
func canonRef(dt DType, x, w, bias []float32, M, K, N int) []float32 {
	out := make([]float32, M*N)
	for m := 0; m < M; m++ {
		for n := 0; n < N; n++ {
			var p [8]float32
			for s := 0; s < 8; s++ {
				for k := s * K / 8; k < (s+1)*K/8; k++ {
					p[s] = FMA32(x[m*K+k], w[n*K+k], p[s])
				}
			}
			y := float32(float32(float32(p[0]+p[1])+float32(p[2]+p[3])) + float32(float32(p[4]+p[5])+float32(p[6]+p[7])))
			if bias != nil {
				y = float32(y + bias[n])
			}
			out[m*N+n] = dt.Round(y)
		}
	}
	return out
}

// TestMatmulMatchesSpec: the blocked, unrolled, parallel matmul (with its float32 multiply-add fast path and
// its fallbacks) gives the bits of the plain specification for every input class.
func TestMatmulMatchesSpec(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	full := func(n int, sd float64) []float32 { // full float32 values: products not exact, FMA32 path
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64() * sd)
		}
		return v
	}
	t.Logf("AVX2+FMA panels available: %v", haveFMAPanels)
	for _, sh := range [][3]int{{1, 300, 130}, {7, 129, 70}, {64, 64, 9}, {3, 8, 4}, {2, 1, 5}, {9, 1003, 35}, {4, 7, 16}} {
		M, K, N := sh[0], sh[1], sh[2]
		classes := map[string][2][]float32{
			"bf16":            {randBF16(r, M*K, 1), randBF16(r, N*K, 0.05)},
			"f32":             {full(M*K, 1), full(N*K, 0.05)},
			"bf16 x, f32 w":   {randBF16(r, M*K, 1), full(N*K, 0.05)},
			"tiny weight":     {randBF16(r, M*K, 1), randBF16(r, N*K, 0.05)},
			"subnormal x":     {randBF16(r, M*K, 1e-39), randBF16(r, N*K, 1e-3)},
			"zeros and large": {randBF16(r, M*K, 1), randBF16(r, N*K, 0.05)},
		}
		tw := classes["tiny weight"][1]
		tw[len(tw)*2/3] = 0x1p-100 // a product that underflows float32: block falls back to FMA32
		zl := classes["zeros and large"]
		zl[0][0], zl[1][1] = 0, 0
		zl[1][len(zl[1])-1] = 0x1p70
		for name, c := range classes {
			for _, dt := range []DType{F32, BF16} {
				want := canonRef(dt, c[0], c[1], nil, M, K, N)
				for _, simd := range []bool{haveFMAPanels, false} { // the AVX2 panels and the pure-Go tiles
					got := make([]float32, M*N)
					withPanels(simd, func() { MatmulForward(Canonical, dt, got, c[0], c[1], nil, M, K, N) })
					assertSame(t, fmt.Sprintf("%s %v M=%d K=%d N=%d panels=%v", name, dt, M, K, N, simd), got, want)
				}
			}
		}
	}
}

// TestExactProductsGate: the fast path's gate accepts bf16 values in range and rejects everything for which
// a float32 multiply-add would differ from FMA32 (shown on full float32 data).
func TestExactProductsGate(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	if !exactProducts(randBF16(r, 1000, 1)) || !exactProducts([]float32{0, float32(math.Copysign(0, -1)), 0x1p-60, -0x1p60}) {
		t.Fatal("bf16 values in range rejected")
	}
	for _, v := range []float32{0x1p-61, 0x1p61, float32(math.Inf(1)), float32(math.NaN()), 1 + 0x1p-20, 1e-40} {
		if exactProducts([]float32{1, v}) {
			t.Fatalf("%g accepted", v)
		}
	}
	// on full float32 data, the multiply-add chain is not the FMA chain: the gate matters
	differs := false
	for i := 0; i < 100 && !differs; i++ {
		a, b := float32(r.NormFloat64()), float32(r.NormFloat64())
		c := float32(r.NormFloat64())
		differs = FMA32(a, b, c) != float32(c+float32(a*b))
	}
	if !differs {
		t.Fatal("multiply-add equals FMA on full float32 data: the gate would be untested")
	}
}

// withPanels runs f with the AVX2 panel kernels enabled or not (tests only; not concurrent with other tests).
func withPanels(on bool, f func()) {
	defer func(v bool) { haveFMAPanels = v }(haveFMAPanels)
	haveFMAPanels = haveFMAPanels && on
	f()
}

// withF16C runs f with f16 panels packed as bits (VCVTPH2PS) or widened while packed (tests only, as withPanels).
func withF16C(on bool, f func()) {
	defer func(v bool) { haveF16C = v }(haveF16C)
	haveF16C = haveF16C && on
	f()
}
