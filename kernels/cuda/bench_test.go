package cudakernels

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"

	"bitalign/cuda"
	"bitalign/kernels"
)

// tileSweep adds every forced shape of the tiled matmul to BenchmarkMatmul (scripts/gpu.sh sets it when asked).
var tileSweep = flag.Bool("tilesweep", false, "BenchmarkMatmul: time every tiled-kernel shape too")

// hbmCeiling is the device-to-device copy rate (bytes read + written per second), measured by
// BenchmarkCopy in the same run; the matmul benchmarks report their bandwidth against it when set.
var hbmCeiling float64

// timeGPU runs f n times between two events and returns the mean milliseconds per run.
func timeGPU(b *testing.B, g *gpu, n int, f func(c *cuda.Ctx, i int) error) float64 {
	b.Helper()
	var ms float32
	err := g.d.Do(func(c *cuda.Ctx) error {
		for i := 0; i < 3; i++ { // warm-up
			if err := f(c, i); err != nil {
				return err
			}
		}
		e0, err := c.NewEvent()
		if err != nil {
			return err
		}
		e1, err := c.NewEvent()
		if err != nil {
			return err
		}
		defer c.DestroyEvent(e0)
		defer c.DestroyEvent(e1)
		if err := c.Record(e0, nil); err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			if err := f(c, i); err != nil {
				return err
			}
		}
		if err := c.Record(e1, nil); err != nil {
			return err
		}
		if err := c.EventSync(e1); err != nil {
			return err
		}
		ms, err = c.Elapsed(e0, e1)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return float64(ms) / float64(n)
}

func BenchmarkCopy(b *testing.B) {
	g := openGPU(b)
	const bytes = 2 << 30
	d := &dev{g: g}
	defer d.free()
	src, err := g.d.Alloc(bytes)
	if err != nil {
		b.Fatal(err)
	}
	dst, err := g.d.Alloc(bytes)
	if err != nil {
		b.Fatal(err)
	}
	d.ptrs = append(d.ptrs, src, dst)
	g.d.Memset8(src, 1, bytes)
	ms := timeGPU(b, g, max(b.N, 5), func(c *cuda.Ctx, _ int) error { return c.CopyDtoDAsync(dst, src, bytes, nil) })
	hbmCeiling = 2 * bytes / (ms * 1e-3)
	b.ReportMetric(ms*1e3, "gpu-us/op")
	b.ReportMetric(hbmCeiling/1e9, "GB/s")
}

// BenchmarkMatmul times the canonical matmul at K = N = 4096 for M = 1 … 4096 (4 weight copies rotated, so
// small M reads w from HBM, not L2). Bytes counted: x, w and out once each (the floor); FLOPs 2·M·N·K.
func BenchmarkMatmul(b *testing.B) {
	g := openGPU(b)
	const K, N, copies = 4096, 4096, 4
	r := rand.New(rand.NewPCG(1, 2))
	d := &dev{g: g}
	defer d.free()
	var ws [copies]cuda.Ptr
	for i := range ws {
		ws[i] = d.f32(b, randn(r, N*K, true))
	}
	const Mmax = 4096
	x := d.f32(b, randn(r, Mmax*K, true))
	out := d.poisoned(b, Mmax*N)
	type variant struct {
		name string
		tile tileConfig
	}
	for _, M := range []int{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096} {
		vs := []variant{{name: "default"}}
		if M > rules.Matmul.DecMaxM && *tileSweep {
			for _, tc := range tileConfigs() {
				vs = append(vs, variant{fmt.Sprintf("t%d-g%d", tc.bm, tc.g), tc})
			}
		}
		for _, v := range vs {
			p := kernels.Canonical
			b.Run(fmt.Sprintf("%v/M=%d/%s", p, M, v.name), func(b *testing.B) {
				ms := timeGPU(b, g, max(b.N, 10), func(c *cuda.Ctx, i int) error {
					g.k.tile = v.tile
					defer func() { g.k.tile = tileConfig{} }()
					return g.k.MatmulForward(c, p, DTCode(kernels.BF16), out, x, ws[i%copies], 0, M, K, N)
				})
				bytes := 4 * float64(M*K+N*K+M*N)
				b.ReportMetric(ms*1e3, "gpu-us/op")
				b.ReportMetric(2*float64(M)*K*N/(ms*1e-3)/1e12, "TFLOP/s")
				b.ReportMetric(bytes/(ms*1e-3)/1e9, "GB/s")
				if hbmCeiling > 0 {
					b.ReportMetric(100*bytes/(ms*1e-3)/hbmCeiling, "%copy-BW")
				}
			})
		}
	}
}

// BenchmarkMatmulWeights times the canonical matmul at one decode (M = 1) and one prefill (M = 1024) shape,
// K = N = 4096, with the weight stored as float32, bf16 and f16 (the WeightSuffix twins: the same plan, the
// weight read narrow and widened as it is loaded); 4 weight copies rotated, so M = 1 reads w from HBM. Bytes
// counted: x, w (at its stored size) and out once each.
func BenchmarkMatmulWeights(b *testing.B) {
	g := openGPU(b)
	const K, N, copies, Mmax = 4096, 4096, 4, 1024
	r := rand.New(rand.NewPCG(3, 4))
	d := &dev{g: g}
	defer d.free()
	x := d.f32(b, randn(r, Mmax*K, true))
	out := d.poisoned(b, Mmax*N)
	for _, wdt := range kernels.WeightDTypes {
		ok := true
		g.d.Do(func(c *cuda.Ctx) error { ok = g.k.HasWeights(wdt); return nil }) //nolint:errcheck
		if !ok {
			b.Fatalf("the loaded PTX has no %v-weight kernels", wdt)
		}
		wd := &dev{g: g} // this dtype's weight copies, freed before the next dtype's
		var ws [copies]cuda.Ptr
		for i := range ws {
			v := randn(r, N*K, false)
			if wdt == kernels.F32 {
				ws[i] = wd.f32(b, kernels.RoundWeights(kernels.BF16, v).Float32())
			} else {
				bits, _ := storedWeights(wdt, v)
				ws[i] = upload(b, wd, bits)
			}
		}
		for _, M := range []int{1, Mmax} {
			b.Run(fmt.Sprintf("w=%v/M=%d", wdt, M), func(b *testing.B) {
				ms := timeGPU(b, g, max(b.N, 10), func(c *cuda.Ctx, i int) error {
					return g.k.MatmulForwardW(c, kernels.Canonical, DTCode(kernels.BF16), out, x, ws[i%copies], wdt, 0, M, K, N)
				})
				bytes := 4*float64(M*K+M*N) + float64(wdt.Size())*float64(N*K)
				b.ReportMetric(ms*1e3, "gpu-us/op")
				b.ReportMetric(2*float64(M)*K*N/(ms*1e-3)/1e12, "TFLOP/s")
				b.ReportMetric(bytes/(ms*1e-3)/1e9, "GB/s")
				if hbmCeiling > 0 {
					b.ReportMetric(100*bytes/(ms*1e-3)/hbmCeiling, "%copy-BW")
				}
			})
		}
		wd.free()
	}
}

// BenchmarkOps times the other kernels at a Qwen-7B-like decode/prefill size.
func BenchmarkOps(b *testing.B) {
	g := openGPU(b)
	r := rand.New(rand.NewPCG(3, 4))
	d := &dev{g: g}
	defer d.free()
	const H, T, nh, nkv, hd, V = 3584, 512, 28, 4, 128, 152064
	x := d.f32(b, randn(r, T*H, true))
	w := d.f32(b, randn(r, H, true))
	out := d.poisoned(b, T*V)
	q := d.f32(b, randn(r, T*nh*hd, true))
	kc, vc := d.f32(b, randn(r, T*nkv*hd, true)), d.f32(b, randn(r, T*nkv*hd, true))
	pos := make([]int32, T)
	for i := range pos {
		pos[i] = int32(i)
	}
	dp := d.i32(b, pos)
	logits := d.f32(b, randn(r, 8*V, false))
	report := func(b *testing.B, ms, bytes float64) {
		b.ReportMetric(ms*1e3, "gpu-us/op")
		b.ReportMetric(bytes/(ms*1e-3)/1e9, "GB/s")
	}
	ops := []struct {
		name    string
		n       int
		bytes   float64
		general bool // also time the general kernel (k.general) that production runs where the fast one cannot
		f       func(c *cuda.Ctx) error
	}{
		{"rmsnorm/T=512", 10, 8 * T * H, true, func(c *cuda.Ctx) error {
			return g.k.RMSNormForward(c, kernels.Canonical, kernels.BF16, out, x, w, T, H, 1e-6)
		}},
		{"attention-prefill/T=512", 5, 4 * float64(2*T*nh*hd+2*T*nkv*hd), true, func(c *cuda.Ctx) error {
			return g.k.AttentionForward(c, kernels.Canonical, kernels.BF16, out, q, kc, vc, dp, T, T, nh, nkv, hd, 0.088)
		}},
		{"attention-decode/S=512", 10, 4 * float64(2*nh*hd+2*T*nkv*hd), true, func(c *cuda.Ctx) error {
			return g.k.AttentionForward(c, kernels.Canonical, kernels.BF16, out, q.Add(4*(T-1)*nh*hd), kc, vc, dp.Add(4*(T-1)), 1, T, nh, nkv, hd, 0.088)
		}},
		{"logsoftmax/T=8,V=152064", 10, 8 * 8 * V, false, func(c *cuda.Ctx) error {
			return g.k.LogSoftmaxForward(c, kernels.Canonical, out, logits, 8, V)
		}},
		{"logprobs/T=8,V=152064", 10, 4 * 8 * V, false, func(c *cuda.Ctx) error {
			return g.k.LogProbs(c, kernels.Canonical, out.Add(4*8*V), logits, dp, 8, V)
		}},
	}
	for _, op := range ops {
		for _, general := range []bool{false, true} {
			if general && !op.general {
				continue
			}
			name := op.name
			if general {
				name += "/general" // rmsnorm (a warp per row), attention (a warp per (query, head))
			}
			b.Run(name, func(b *testing.B) {
				ms := timeGPU(b, g, max(b.N, op.n), func(c *cuda.Ctx, _ int) error {
					g.k.general = general
					defer func() { g.k.general = false }()
					return op.f(c)
				})
				report(b, ms, op.bytes)
			})
		}
	}
}
