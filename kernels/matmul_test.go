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
