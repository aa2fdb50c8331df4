package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkMatmul reports GFLOP/s (2·M·N·K per call) of the canonical and standard matmul.
func BenchmarkMatmul(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	const K, N = 1024, 1024
	w := randBF16(r, N*K, 0.05)
	for _, p := range []Profile{Canonical, Standard} {
		for _, M := range []int{1, 16, 256} {
			x := randBF16(r, M*K, 1)
			out := make([]float32, M*N)
			b.Run(fmt.Sprintf("%v/M=%d/K=%d/N=%d", p, M, K, N), func(b *testing.B) {
				for b.Loop() {
					MatmulForward(p, BF16, out, x, w, nil, M, K, N)
				}
				b.ReportMetric(2*float64(M)*N*K*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkFMA32 is the scalar cost of one exact float32 FMA (a dependent chain).
func BenchmarkFMA32(b *testing.B) {
	acc := float32(0)
	x, y := float32(1.0001), float32(0.9999)
	for b.Loop() {
		acc = FMA32(x, y, acc)
	}
	sink = acc
}

var sink float32

func BenchmarkExp(b *testing.B) {
	x := float32(0.3)
	for b.Loop() {
		sink = Exp(x)
	}
}

func BenchmarkLog(b *testing.B) {
	x := float32(3.7)
	for b.Loop() {
		sink = Log(x)
	}
}

// BenchmarkAttentionDecode is one decode query over a 1024-token cache (nh = 16, nkv = 4, hd = 64).
func BenchmarkAttentionDecode(b *testing.B) {
	r := rand.New(rand.NewPCG(2, 2))
	S, nh, nkv, hd := 1024, 16, 4, 64
	q := randBF16(r, nh*hd, 1)
	k, v := randBF16(r, S*nkv*hd, 1), randBF16(r, S*nkv*hd, 1)
	out := make([]float32, nh*hd)
	pos := []int32{int32(S - 1)}
	for b.Loop() {
		if err := AttentionForward(Canonical, BF16, out, q, k, v, pos, 1, S, nh, nkv, hd, AttentionScale(hd)); err != nil {
			b.Fatal(err)
		}
	}
}
