package kernels_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"bitalign/internal/testrank"
	"bitalign/kernels"
	"bitalign/nvls"
)

// rowParallel runs MatmulPartial on tp ranks (goroutines) + nvls AllReduce + MatmulFinish; it returns rank
// 0's output and checks that every rank got the same bits.
func rowParallel(t *testing.T, p kernels.Profile, ord nvls.Order, x, w, bias []float32, M, K, N, tp int) []float32 {
	t.Helper()
	partial := func(out, x, w []float32, M, kl, N, r, tp int) error {
		return kernels.MatmulPartial(p, out, x, w, M, kl, N, r, tp)
	}
	return rowParallelWith(t, partial, ord, kernels.F32, x, w, bias, M, K, N, tp)
}

// TestMatmulTPInvariance: MatmulPartial over tp = 1, 2, 4, 8 + the nvls tree all-reduce == MatmulForward.
func TestMatmulTPInvariance(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for _, sh := range [][3]int{{3, 1024, 17}, {1, 8, 5}, {5, 200, 9}, {2, 16, 3}, {4, 808, 11}} {
		M, K, N := sh[0], sh[1], sh[2]
		x, w, b := kernels.RandBF16(r, M*K, 1), kernels.RandBF16(r, N*K, 0.05), kernels.RandBF16(r, N, 0.1)
		full := make([]float32, M*N)
		kernels.MatmulForward(kernels.Canonical, kernels.F32, full, x, w, b, M, K, N)
		for _, tp := range []int{1, 2, 4, 8} {
			if K%tp != 0 {
				continue
			}
			got := rowParallel(t, kernels.Canonical, nvls.Tree, x, w, b, M, K, N, tp)
			if i, u, ok := kernels.FirstDiff(got, full); ok {
				t.Fatalf("M=%d K=%d N=%d tp=%d: differs from tp=1 at %d by %d ulp", M, K, N, tp, i, u)
			}
		}
		if K < 64 {
			continue
		}
		// standard profile + ring: TP changes the bits
		std := make([]float32, M*N)
		kernels.MatmulForward(kernels.Standard, kernels.F32, std, x, w, b, M, K, N)
		got := rowParallel(t, kernels.Standard, nvls.Ring, x, w, b, M, K, N, 4)
		i, u, ok := kernels.FirstDiff(got, std)
		if !ok {
			t.Fatalf("M=%d K=%d N=%d: standard tp=4 ring equals standard tp=1; the control must diverge", M, K, N)
		}
		t.Logf("standard M=%d K=%d N=%d: tp=4 ring vs tp=1 first differs at %d by %d ulp", M, K, N, i, u)
	}
	if err := kernels.MatmulPartial(kernels.Canonical, make([]float32, 1), make([]float32, 3), make([]float32, 3), 1, 3, 1, 0, 3); err == nil {
		t.Fatal("tp = 3 accepted")
	}
}

// TestLogSoftmaxSharded: vocabulary split over tp ranks gives the bits of one rank.
func TestLogSoftmaxSharded(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	T, V := 3, 1000
	logits := make([]float32, T*V)
	for i := range logits {
		logits[i] = float32(r.NormFloat64() * 4)
	}
	targets := []int32{0, 517, 999}
	wantLP := make([]float32, T)
	if err := kernels.LogProbs(kernels.Canonical, wantLP, logits, targets, T, V, nil); err != nil {
		t.Fatal(err)
	}
	wantLS := make([]float32, T*V)
	if err := kernels.LogSoftmaxForward(kernels.Canonical, wantLS, logits, T, V, nil); err != nil {
		t.Fatal(err)
	}
	for _, tp := range []int{2, 4, 8} {
		for _, p := range []kernels.Profile{kernels.Canonical, kernels.Standard} {
			ord := nvls.Tree
			if p == kernels.Standard {
				ord = nvls.Ring
			}
			cs, _ := nvls.NewCPUGroup(tp, nvls.WithOrder(ord))
			vl := V / tp
			lps := make([][]float32, tp)
			lss := make([][]float32, tp)
			testrank.NoErrors(t, testrank.Each(tp, func(rk int) error {
				shard := kernels.Columns(logits, T, V, rk*vl, (rk+1)*vl)
				lps[rk] = make([]float32, T)
				if err := kernels.LogProbs(p, lps[rk], shard, targets, T, vl, cs[rk]); err != nil {
					return err
				}
				lss[rk] = make([]float32, T*vl)
				return kernels.LogSoftmaxForward(p, lss[rk], shard, T, vl, cs[rk])
			}))
			ls := make([]float32, T*V)
			for rk := 0; rk < tp; rk++ {
				for i := 0; i < T; i++ {
					copy(ls[i*V+rk*vl:i*V+(rk+1)*vl], lss[rk][i*vl:(i+1)*vl])
				}
			}
			if p == kernels.Canonical {
				for rk := 0; rk < tp; rk++ {
					if i, u, ok := kernels.FirstDiff(lps[rk], wantLP); ok {
						t.Fatalf("tp=%d rank %d: logprobs differ at %d by %d ulp", tp, rk, i, u)
					}
				}
				if i, u, ok := kernels.FirstDiff(ls, wantLS); ok {
					t.Fatalf("tp=%d: log-softmax differs at %d by %d ulp", tp, i, u)
				}
			} else if tp == 8 {
				std := make([]float32, T*V)
				if err := kernels.LogSoftmaxForward(kernels.Standard, std, logits, T, V, nil); err != nil {
					t.Fatal(err)
				}
				i, u, ok := kernels.FirstDiff(ls, std)
				if !ok {
					t.Fatalf("standard log-softmax: tp=8 (ring) equals tp=1; the control must diverge")
				}
				t.Logf("standard log-softmax tp=8 ring vs tp=1: differs (as it must) first at %d by %d ulp", i, u)
			}
		}
	}
	if err := kernels.LogProbs(kernels.Canonical, make([]float32, 1), logits[:V], []int32{int32(V)}, 1, V, nil); err == nil {
		t.Fatal("target outside the vocabulary accepted")
	}
}

func TestLogSoftmaxAccuracy(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 26))
	for _, V := range []int{1, 5, 1001, 32000} {
		x := make([]float32, V)
		for i := range x {
			x[i] = float32(r.NormFloat64() * 6)
		}
		out := make([]float32, V)
		if err := kernels.LogSoftmaxForward(kernels.Canonical, out, x, 1, V, nil); err != nil {
			t.Fatal(err)
		}
		m := math.Inf(-1)
		for _, v := range x {
			m = math.Max(m, float64(v))
		}
		s := 0.0
		for _, v := range x {
			s += math.Exp(float64(v) - m)
		}
		lse := m + math.Log(s)
		for i, v := range x {
			want := float64(v) - lse
			// |x| and lse are both O(10): absolute error about a few ulp of those
			if e := math.Abs(float64(out[i]) - want); e > 1e-5*(math.Abs(float64(v))+math.Abs(lse)+1) {
				t.Fatalf("V=%d: log-softmax[%d] = %g, want %g", V, i, out[i], want)
			}
		}
	}
}

// rowParallelTC is rowParallel for the tc profile: partial (kernels.MatmulTCPartial, or the control's) on tp
// ranks, the nvls all-reduce in order ord, MatmulFinish to dt.
func rowParallelTC(t *testing.T, partial func(out, x, w []float32, M, kl, N, tp int) error, ord nvls.Order, dt kernels.DType,
	x, w, bias []float32, M, K, N, tp int) []float32 {
	t.Helper()
	ranked := func(out, x, w []float32, M, kl, N, _, tp int) error { return partial(out, x, w, M, kl, N, tp) }
	return rowParallelWith(t, ranked, ord, dt, x, w, bias, M, K, N, tp)
}

// rowParallelWith runs partial on tp ranks (goroutines, rank r given its K slice) + the nvls all-reduce in
// order ord + MatmulFinish to dt; it returns rank 0's output and checks that every rank got the same bits.
func rowParallelWith(t *testing.T, partial func(out, x, w []float32, M, kl, N, r, tp int) error, ord nvls.Order,
	dt kernels.DType, x, w, bias []float32, M, K, N, tp int) []float32 {
	t.Helper()
	cs, err := nvls.NewCPUGroup(tp, nvls.WithOrder(ord))
	if err != nil {
		t.Fatal(err)
	}
	kl := K / tp
	outs := make([][]float32, tp)
	testrank.NoErrors(t, testrank.Each(tp, func(r int) error {
		out := make([]float32, M*N)
		if err := partial(out, kernels.Columns(x, M, K, r*kl, (r+1)*kl), kernels.Columns(w, N, K, r*kl, (r+1)*kl), M, kl, N, r, tp); err != nil {
			return err
		}
		if err := cs[r].AllReduce(out); err != nil {
			return err
		}
		kernels.MatmulFinish(dt, out, bias, M, N)
		outs[r] = out
		return nil
	}))
	for r := range outs {
		if i, u, ok := kernels.FirstDiff(outs[r], outs[0]); ok {
			t.Fatalf("rank %d differs from rank 0 at %d by %d ulp", r, i, u)
		}
	}
	return outs[0]
}

// TestMatmulTCTPInvariance: the tc row-parallel matmul over tp = 1, 2, 4, 8 (MatmulTCPartial, the nvls tree,
// MatmulFinish) gives MatmulTC(RowParallel)'s bits, K a multiple of 128 or not (segments starting inside a
// 16-wide step); the control (one chain per rank, ring all-reduce) fails the same test.
func TestMatmulTCTPInvariance(t *testing.T) {
	r := rand.New(rand.NewPCG(152, 153))
	for _, sh := range [][3]int{{3, 1024, 17}, {1, 8, 5}, {5, 200, 9}, {2, 16, 3}, {4, 808, 11}, {6, 1096, 7}} {
		M, K, N := sh[0], sh[1], sh[2]
		x, w, b := kernels.RandBF16(r, M*K, 1), kernels.RandBF16(r, N*K, 0.05), kernels.RandBF16(r, N, 0.1)
		full := make([]float32, M*N)
		if err := kernels.MatmulTC(kernels.RowParallel, kernels.F32, full, x, w, b, M, K, N); err != nil {
			t.Fatal(err)
		}
		for _, tp := range []int{1, 2, 4, 8} {
			if K%tp != 0 {
				continue
			}
			got := rowParallelTC(t, func(out, x, w []float32, M, kl, N, tp int) error {
				return kernels.MatmulTCPartial(out, x, w, M, kl, N, tp)
			}, nvls.Tree, kernels.F32, x, w, b, M, K, N, tp)
			if i, u, ok := kernels.FirstDiff(got, full); ok {
				t.Fatalf("tc M=%d K=%d N=%d tp=%d: differs from MatmulTC at %d by %d ulp", M, K, N, tp, i, u)
			}
		}
		if K < 64 {
			continue
		}
		ctl := func(out, x, w []float32, M, kl, N, tp int) error {
			return kernels.TCOneChainPartial(out, x, w, M, kl, N)
		}
		one := rowParallelTC(t, ctl, nvls.Ring, kernels.F32, x, w, b, M, K, N, 1)
		four := rowParallelTC(t, ctl, nvls.Ring, kernels.F32, x, w, b, M, K, N, 4)
		i, u, ok := kernels.FirstDiff(four, one)
		if !ok {
			t.Fatalf("M=%d K=%d N=%d: the one-chain-per-rank ring control at tp=4 equals its tp=1; it must diverge", M, K, N)
		}
		t.Logf("tc control M=%d K=%d N=%d: one chain per rank, ring, tp=4 vs tp=1 first differs at %d by %d ulp", M, K, N, i, u)
	}
}
