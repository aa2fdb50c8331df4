package cudakernels

import (
	"fmt"
	"math"
	"testing"

	"bitalign/cuda"
	"bitalign/internal/testgpu"
	"bitalign/kernels"
)

// bf16Bits is w (bf16 values) as its bits, the way the engine uploads a mapped bf16 weight.
func bf16Bits(w []float32) []uint16 {
	b := make([]uint16, len(w))
	for i, v := range w {
		b[i] = kernels.ToBF16Bits(v)
	}
	return b
}

// storedWeights rounds v to dt (BF16 or F16), with a few zeros, −0s and values that are subnormal in f16 mixed in
// (f16 widening must keep them), and returns the weight's bits, the way the engine uploads a mapped weight, and
// their exactly widened values, the CPU reference's float32 weights.
func storedWeights(dt kernels.DType, v []float32) ([]uint16, []float32) {
	for i := 0; i < len(v); i += 101 {
		v[i] = [...]float32{0, float32(math.Copysign(0, -1)), 0x1p-20, -0x1.8p-17, 0x1p-24}[(i/101)%5]
	}
	w := kernels.RoundWeights(dt, v)
	bits := make([]uint16, w.Len())
	for i := range bits {
		if dt == kernels.BF16 {
			bits[i] = kernels.ToBF16Bits(w.At(i))
		} else {
			bits[i] = kernels.ToF16Bits(w.At(i))
		}
	}
	return bits, w.Float32()
}

// TestWeightsBitwise: the twins that read 16-bit weights (_bf16w, _f16w: the bits, widened as they are loaded)
// give the bits of the CPU reference on the widened weights at every matmul shape and launch configuration
// (decode, small, tiled, reduce), for MatmulPartial at TP 2 and 4, and for the embedding.
func TestWeightsBitwise(t *testing.T) {
	for _, wdt := range []kernels.DType{kernels.BF16, kernels.F16} {
		t.Run(wdt.String(), func(t *testing.T) { testWeightsBitwise(t, wdt) })
	}
}

func testWeightsBitwise(t *testing.T, wdt kernels.DType) {
	g := openGPU(t)
	ok := false
	g.d.Do(func(c *cuda.Ctx) error { ok = g.k.HasWeights(wdt); return nil }) //nolint:errcheck
	if !ok {
		testgpu.SkipOrFail(t, fmt.Errorf("no %s kernels in the loaded PTX", WeightSuffix(wdt)), "the loaded PTX predates the %v-weight kernels (make ptx)", wdt)
	}
	r := newRand(t)
	for _, s := range matmulShapes(testing.Short()) {
		for _, p := range []kernels.Profile{kernels.Canonical, kernels.Standard} {
			if p == kernels.Standard && s.M*s.K*s.N > 1<<28 {
				continue
			}
			x := randn(r, s.M*s.K, false)
			wb, w := storedWeights(wdt, randn(r, s.N*s.K, false))
			bias := randn(r, s.N, true)
			want := make([]float32, s.M*s.N)
			kernels.MatmulForward(p, kernels.BF16, want, x, w, bias, s.M, s.K, s.N)
			d := &dev{g: g}
			out, dx, dw, db := d.poisoned(t, s.M*s.N), d.f32(t, x), upload(t, d, wb), d.f32(t, bias)
			configs := []tileConfig{{}}
			if s.M > rules.Matmul.SmallMaxM {
				configs = append(configs, tileConfigs()...)
			}
			for _, tc := range configs {
				d.run(t, func(c *cuda.Ctx, k *Kernels) error {
					k.tile = tc
					defer func() { k.tile = tileConfig{} }()
					return k.MatmulForwardW(c, p, DTCode(kernels.BF16), out, dx, dw, wdt, db, s.M, s.K, s.N)
				})
				same(t, fmt.Sprintf("%v weights %v M=%d K=%d N=%d tile=%+v", wdt, p, s.M, s.K, s.N, tc), d.get(t, out, s.M*s.N), want)
			}
			for _, tp := range []int{2, 4} {
				kl := s.K / tp
				if kl*tp != s.K || kl == 0 {
					continue
				}
				xl := randn(r, s.M*kl, false)
				wlb, wl := storedWeights(wdt, randn(r, s.N*kl, false))
				wantP := make([]float32, s.M*s.N)
				if err := kernels.MatmulPartial(p, wantP, xl, wl, s.M, kl, s.N, 0, tp); err != nil {
					t.Fatal(err)
				}
				dxl, dwl := d.f32(t, xl), upload(t, d, wlb)
				d.run(t, func(c *cuda.Ctx, k *Kernels) error {
					return k.MatmulPartialW(c, p, out, dxl, dwl, wdt, s.M, kl, s.N, tp)
				})
				same(t, fmt.Sprintf("%v weights partial %v M=%d K=%d N=%d tp=%d", wdt, p, s.M, s.K, s.N, tp), d.get(t, out, s.M*s.N), wantP)
			}
			d.free()
		}
	}
	const V, C, T = 1000, 96, 37
	tb, table := storedWeights(wdt, randn(r, V*C, false))
	toks := make([]int32, T)
	for i := range toks {
		toks[i] = int32(r.IntN(V))
	}
	d := &dev{g: g}
	dtab, dtok := upload(t, d, tb), d.i32(t, toks)
	for _, dt := range []kernels.DType{kernels.BF16, kernels.F16, kernels.F32} {
		want := make([]float32, T*C)
		if err := kernels.EmbeddingForward(dt, want, table, toks, T, V, C); err != nil {
			t.Fatal(err)
		}
		out := d.poisoned(t, T*C)
		d.run(t, func(c *cuda.Ctx, k *Kernels) error {
			return k.EmbeddingForwardW(c, dt, out, dtab, wdt, dtok, T, V, C)
		})
		same(t, fmt.Sprintf("embedding, %v table, %v out", wdt, dt), d.get(t, out, T*C), want)
	}
	d.free()
}

// TestWeightKernelNames: every kernel that reads a weight matrix has a twin per 16-bit weight dtype in the
// committed PTX (HasWeights' rule, checked without a GPU), and the twins are the only entries with a suffix.
func TestWeightKernelNames(t *testing.T) {
	fns := map[string]bool{}
	for _, mod := range []string{"matmul", "elementwise", "rmsnorm"} {
		src, err := PTX(mod)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range entryNames(src) {
			fns[n] = true
		}
	}
	base := 0
	for n := range fns {
		if !weightKernel(n) {
			continue
		}
		base++
		for _, dt := range []kernels.DType{kernels.BF16, kernels.F16} {
			if !fns[n+WeightSuffix(dt)] {
				t.Errorf("%s has no %s twin in the PTX", n, WeightSuffix(dt))
			}
		}
	}
	if base < 18 { // 6 matmul_dec, 5 matmul_small, 4 matmul_t, the embedding, rmsnorm and rmsnorm_row
		t.Fatalf("only %d weight kernels found in matmul.ptx, elementwise.ptx and rmsnorm.ptx", base)
	}
	if !weightKernel("matmul_dec1") || weightKernel("matmul_dec1_f16w") || weightKernel("matmul_t64_vec_bf16w") || weightKernel("matmul_reduce") || !weightKernel("embedding") || !weightKernel("rmsnorm_row") || weightKernel("rmsnorm_row_f16w") {
		t.Fatal("weightKernel classifies the names wrongly")
	}
}
