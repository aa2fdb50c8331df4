package kernels

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
)

// cpuSeconds is this process's user + system CPU time.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// BenchmarkMatmul reports GFLOP/s (2·M·N·K per call) of the canonical and standard matmul.
func BenchmarkMatmul(b *testing.B) { benchMatmul(b, []int{1, 4, 8, 16, 256}) }

// BenchmarkMatmulScalar is BenchmarkMatmul with the AVX2 panels switched off (the pure-Go path).
func BenchmarkMatmulScalar(b *testing.B) {
	withPanels(false, func() { benchMatmul(b, []int{1, 4, 8, 16, 256}) })
}

func benchMatmul(b *testing.B, Ms []int) {
	r := rand.New(rand.NewPCG(1, 1))
	const K, N = 1024, 1024
	w := randBF16(r, N*K, 0.05)
	for _, p := range []Profile{Canonical, Standard} {
		for _, M := range Ms {
			x := randBF16(r, M*K, 1)
			out := make([]float32, M*N)
			b.Run(fmt.Sprintf("%v/M=%d/K=%d/N=%d", p, M, K, N), func(b *testing.B) {
				cpu0 := cpuSeconds()
				for b.Loop() {
					MatmulForward(p, BF16, out, x, w, nil, M, K, N)
				}
				flops := 2 * float64(M) * N * K * float64(b.N)
				b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				// per core of CPU time actually received: robust when other processes share the cores
				b.ReportMetric(flops/(cpuSeconds()-cpu0)/1e9, "GFLOP/s/cpu-s")
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

// BenchmarkExactProducts is the per-call weight check of the fast matmul path (1M elements).
func BenchmarkExactProducts(b *testing.B) {
	w := randBF16(rand.New(rand.NewPCG(3, 3)), 1<<20, 0.05)
	for b.Loop() {
		if !exactProducts(w) {
			b.Fatal("bf16 weights rejected")
		}
	}
	b.ReportMetric(float64(len(w))*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gelem/s")
}

// BenchmarkMatmulWeights is the canonical matmul with the same bf16-valued weight stored as float32 (the anchor:
// how every weight was held before weights kept their checkpoint dtype), as bf16 bits and as f16 bits (kept as
// bits in the panels and widened in the AVX2 registers), side by side in one run, at a Qwen2-1.5B-like K and a weight larger than the caches.
func BenchmarkMatmulWeights(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 3))
	const K, N = 1536, 4096
	wv := randBF16(r, N*K, 0.05)
	for _, M := range []int{1, 16, 256} {
		x := randBF16(r, M*K, 1)
		out := make([]float32, M*N)
		for _, w := range []Weights{WeightsF32(wv), RoundWeights(BF16, wv), RoundWeights(F16, wv)} {
			b.Run(fmt.Sprintf("M=%d/K=%d/N=%d/w=%v", M, K, N, w.DType()), func(b *testing.B) {
				cpu0 := cpuSeconds()
				for b.Loop() {
					MatmulForwardW(Canonical, BF16, out, x, w, nil, M, K, N)
				}
				flops := 2 * float64(M) * N * K * float64(b.N)
				b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				b.ReportMetric(flops/(cpuSeconds()-cpu0)/1e9, "GFLOP/s/cpu-s")
			})
		}
	}
}

// BenchmarkCanonicalNaNs is the scan a checkpoint's mapped tensors get before they are used as views
// (WeightsView): bytes per second of bf16 data without NaNs.
func BenchmarkCanonicalNaNs(b *testing.B) {
	raw := RoundWeights(BF16, randBF16(rand.New(rand.NewPCG(4, 4)), 64<<10, 1)).Raw()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if !CanonicalNaNs(BF16, raw) {
			b.Fatal("NaN found")
		}
	}
}
