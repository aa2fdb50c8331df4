package cudakernels

import (
	"fmt"
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

// TestBF16WeightsBitwise: the _bf16w kernels (weights as bf16 bits, widened as they are loaded) give the bits of
// the CPU reference on the widened weights at every matmul shape and launch configuration (decode, small,
// tiled, reduce), for MatmulPartial at TP 2 and 4, and for the embedding.
func TestBF16WeightsBitwise(t *testing.T) {
	g := openGPU(t)
	ok := false
	g.d.Do(func(c *cuda.Ctx) error { ok = g.k.HasBF16Weights(); return nil }) //nolint:errcheck
	if !ok {
		testgpu.SkipOrFail(t, fmt.Errorf("no _bf16w kernels in the loaded PTX"), "the loaded PTX predates the bf16-weight kernels (make ptx)")
	}
	r := newRand(t)
	for _, s := range matmulShapes(testing.Short()) {
		for _, p := range []kernels.Profile{kernels.Canonical, kernels.Standard} {
			if p == kernels.Standard && s.M*s.K*s.N > 1<<28 {
				continue
			}
			x, w := randn(r, s.M*s.K, false), randn(r, s.N*s.K, true)
			bias := randn(r, s.N, true)
			want := make([]float32, s.M*s.N)
			kernels.MatmulForward(p, kernels.BF16, want, x, w, bias, s.M, s.K, s.N)
			d := &dev{g: g}
			out, dx, dw, db := d.poisoned(t, s.M*s.N), d.f32(t, x), upload(t, d, bf16Bits(w)), d.f32(t, bias)
			configs := []tileConfig{{}}
			if s.M > rules.Matmul.SmallMaxM {
				configs = append(configs, tileConfigs()...)
			}
			for _, tc := range configs {
				d.run(t, func(c *cuda.Ctx, k *Kernels) error {
					k.tile = tc
					defer func() { k.tile = tileConfig{} }()
					return k.MatmulForwardW(c, p, DTCode(kernels.BF16), out, dx, dw, true, db, s.M, s.K, s.N)
				})
				same(t, fmt.Sprintf("bf16 weights %v M=%d K=%d N=%d tile=%+v", p, s.M, s.K, s.N, tc), d.get(t, out, s.M*s.N), want)
			}
			for _, tp := range []int{2, 4} {
				kl := s.K / tp
				if kl*tp != s.K || kl == 0 {
					continue
				}
				xl, wl := randn(r, s.M*kl, false), randn(r, s.N*kl, true)
				wantP := make([]float32, s.M*s.N)
				if err := kernels.MatmulPartial(p, wantP, xl, wl, s.M, kl, s.N, 0, tp); err != nil {
					t.Fatal(err)
				}
				dxl, dwl := d.f32(t, xl), upload(t, d, bf16Bits(wl))
				d.run(t, func(c *cuda.Ctx, k *Kernels) error {
					return k.MatmulPartialW(c, p, out, dxl, dwl, true, s.M, kl, s.N, tp)
				})
				same(t, fmt.Sprintf("bf16 weights partial %v M=%d K=%d N=%d tp=%d", p, s.M, s.K, s.N, tp), d.get(t, out, s.M*s.N), wantP)
			}
			d.free()
		}
	}
	const V, C, T = 1000, 96, 37
	table := randn(r, V*C, true)
	toks := make([]int32, T)
	for i := range toks {
		toks[i] = int32(r.IntN(V))
	}
	want := make([]float32, T*C)
	if err := kernels.EmbeddingForward(kernels.BF16, want, table, toks, T, V, C); err != nil {
		t.Fatal(err)
	}
	d := &dev{g: g}
	out, dtab, dtok := d.poisoned(t, T*C), upload(t, d, bf16Bits(table)), d.i32(t, toks)
	d.run(t, func(c *cuda.Ctx, k *Kernels) error {
		return k.EmbeddingForwardW(c, kernels.BF16, out, dtab, true, dtok, T, V, C)
	})
	same(t, "embedding, bf16 table", d.get(t, out, T*C), want)
	d.free()
}
