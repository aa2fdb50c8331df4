package cudakernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"unsafe"

	"bitalign/cuda"
	"bitalign/internal/fp"
	"bitalign/internal/testgpu"
	"bitalign/kernels"
)

// gpu is the shared device and kernels of the GPU tests (opened once per test binary).
type gpu struct {
	d *cuda.Device
	k *Kernels
}

var (
	gpuOnce sync.Once
	theGPU  *gpu
	gpuErr  error
)

func openGPU(t testing.TB) *gpu {
	t.Helper()
	gpuOnce.Do(func() {
		d, err := cuda.Open(0)
		if err != nil {
			gpuErr = err
			return
		}
		var k *Kernels
		if err := d.Do(func(c *cuda.Ctx) (err error) { k, err = Load(c); return err }); err != nil {
			gpuErr = err
			return
		}
		theGPU = &gpu{d: d, k: k}
	})
	if gpuErr != nil {
		testgpu.SkipOrFail(t, gpuErr, "no GPU here (%v): skipped, not passed", gpuErr)
	}
	return theGPU
}

// dev holds device copies of host slices for one test case; free releases them.
type dev struct {
	g    *gpu
	ptrs []cuda.Ptr
}

func (d *dev) f32(t testing.TB, host []float32) cuda.Ptr { return upload(t, d, host) }
func (d *dev) i32(t testing.TB, host []int32) cuda.Ptr   { return upload(t, d, host) }
func (d *dev) i64(t testing.TB, host []int64) cuda.Ptr   { return upload(t, d, host) }

// upload copies host into a new device buffer that d frees (at least one element, so empty inputs still get a
// valid pointer).
func upload[T cuda.Scalar](t testing.TB, d *dev, host []T) cuda.Ptr {
	t.Helper()
	var zero T
	p, err := d.g.d.Alloc(int64(max(len(host), 1)) * int64(unsafe.Sizeof(zero)))
	if err != nil {
		t.Fatal(err)
	}
	d.ptrs = append(d.ptrs, p)
	if err := cuda.UploadTo(d.g.d, p, host); err != nil {
		t.Fatal(err)
	}
	return p
}

// poisoned allocates n floats filled with NaN bits 0x7FBADBAD, so an unwritten element cannot pass.
func (d *dev) poisoned(t testing.TB, n int) cuda.Ptr {
	t.Helper()
	h := make([]float32, n)
	for i := range h {
		h[i] = math.Float32frombits(0x7FBADBAD)
	}
	return d.f32(t, h)
}

func (d *dev) get(t testing.TB, p cuda.Ptr, n int) []float32 {
	t.Helper()
	h := make([]float32, n)
	if err := d.g.d.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if err := cuda.DownloadFrom(d.g.d, h, p); err != nil {
		t.Fatal(err)
	}
	return h
}

func (d *dev) free() {
	for _, p := range d.ptrs {
		d.g.d.Free(p)
	}
	d.ptrs = nil
}

func (d *dev) run(t testing.TB, f func(c *cuda.Ctx, k *Kernels) error) {
	t.Helper()
	if err := d.g.d.Do(func(c *cuda.Ctx) error { return f(c, d.g.k) }); err != nil {
		t.Fatal(err)
	}
}

// same compares bitwise and reports the first differing index with its ULP distance.
func same(t testing.TB, what string, got, want []float32) bool {
	t.Helper()
	if i, ulp, bad := kernels.FirstDiff(got, want); bad {
		g, w := float32(math.NaN()), float32(math.NaN())
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		t.Errorf("%s: first difference at %d: gpu %v (%#08x) cpu %v (%#08x), %d ULP",
			what, i, g, math.Float32bits(g), w, math.Float32bits(w), ulp)
		return false
	}
	return true
}

// randn returns n values of mixed magnitude (normal × 2^[-6, 6]); bf16: rounded to bf16 like activations.
func randn(r *rand.Rand, n int, bf16 bool) []float32 {
	x := make([]float32, n)
	for i := range x {
		v := float32(r.NormFloat64() * math.Ldexp(1, r.IntN(13)-6))
		if bf16 {
			v = kernels.RoundBF16(v)
		}
		x[i] = v
	}
	return x
}

func newRand(t testing.TB) *rand.Rand {
	seed := rand.Uint64() // fresh inputs every run; the seed is logged to replay a failure
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, 0x6269746C))
}

type mnk struct{ M, K, N int }

// tileConfigs lists every forced shape of the tiled matmul (a G that does not divide a shape's segment count
// is ignored).
func tileConfigs() []tileConfig {
	var cs []tileConfig
	for _, bm := range []int{128, 64} {
		for _, g := range []int{1, 2, 4, 8} {
			cs = append(cs, tileConfig{bm: bm, g: g})
		}
	}
	return cs
}

func matmulShapes(short bool) []mnk {
	s := []mnk{
		{1, 1, 1}, {1, 7, 3}, {1, 8, 64}, {1, 13, 130}, {1, 100, 257}, {2, 255, 33}, {3, 1000, 65},
		{4, 64, 128}, {5, 4097, 17}, {8, 256, 256}, {13, 333, 99}, {16, 4096, 512}, {17, 129, 129},
		{33, 64, 300}, {64, 100, 130}, {100, 1000, 257}, {128, 256, 256}, {257, 13, 511}, {1000, 7, 64},
		{1, 4096, 4096}, {4, 4096, 4096}, {16, 4096, 4096},
		// the cp.async decode kernel (K a multiple of 32): column tails, every M up to 32
		{1, 32, 1}, {2, 64, 31}, {7, 96, 77}, {20, 96, 77}, {31, 256, 33}, {32, 4096, 100}, {32, 1024, 4096},
		{1, 800, 130}, {2, 1056, 65}, {3, 4096, 33}, {4, 2080, 257}, {9, 1568, 40}, {24, 2112, 96},
	}
	if !short {
		s = append(s, mnk{1024, 4096, 4096}, mnk{4096, 1000, 257}, mnk{2048, 4099, 130}, mnk{4096, 512, 4096})
	}
	return s
}

func TestMatmulBitwise(t *testing.T) {
	g := openGPU(t)
	r := newRand(t)
	for _, s := range matmulShapes(testing.Short()) {
		for _, p := range []kernels.Profile{kernels.Canonical, kernels.Standard} {
			if p == kernels.Standard && s.M*s.K*s.N > 1<<28 {
				continue
			}
			for _, withBias := range []bool{false, true} {
				name := fmt.Sprintf("%v M=%d K=%d N=%d bias=%v", p, s.M, s.K, s.N, withBias)
				x, w := randn(r, s.M*s.K, false), randn(r, s.N*s.K, false)
				var bias []float32
				dt := kernels.F32
				if withBias {
					bias, dt = randn(r, s.N, true), kernels.BF16
				}
				want := make([]float32, s.M*s.N)
				kernels.MatmulForward(p, dt, want, x, w, bias, s.M, s.K, s.N)
				d := &dev{g: g}
				out, dx, dw := d.poisoned(t, s.M*s.N), d.f32(t, x), d.f32(t, w)
				var db cuda.Ptr
				if withBias {
					db = d.f32(t, bias)
				}
				configs := []tileConfig{{}} // automatic, then (past the decode kernels) every tiled shape
				if s.M > rules.Matmul.SmallMaxM {
					configs = append(configs, tileConfigs()...)
				}
				for _, tc := range configs { // every launch shape against the same reference
					d.run(t, func(c *cuda.Ctx, k *Kernels) error {
						k.tile = tc
						defer func() { k.tile = tileConfig{} }()
						return k.MatmulForward(c, p, DTCode(dt), out, dx, dw, db, s.M, s.K, s.N)
					})
					same(t, fmt.Sprintf("%s tile=%+v", name, tc), d.get(t, out, s.M*s.N), want)
				}
				d.free()
			}
		}
	}
}

func TestMatmulPartialBitwise(t *testing.T) {
	g := openGPU(t)
	r := newRand(t)
	for _, s := range []mnk{{1, 64, 33}, {3, 1000, 65}, {16, 4096, 130}, {40, 512, 257}, {300, 800, 64}} {
		for _, tp := range []int{1, 2, 4, 8} {
			for _, p := range []kernels.Profile{kernels.Canonical, kernels.Standard} {
				kl := s.K / tp
				x, w := randn(r, s.M*kl, false), randn(r, s.N*kl, false)
				want := make([]float32, s.M*s.N)
				if err := kernels.MatmulPartial(p, want, x, w, s.M, kl, s.N, 0, tp); err != nil {
					t.Fatal(err)
				}
				d := &dev{g: g}
				out, dx, dw := d.poisoned(t, s.M*s.N), d.f32(t, x), d.f32(t, w)
				configs := []tileConfig{{}}
				if s.M > rules.Matmul.SmallMaxM {
					configs = append(configs, tileConfigs()...)
				}
				for _, tc := range configs {
					d.run(t, func(c *cuda.Ctx, k *Kernels) error {
						k.tile = tc
						defer func() { k.tile = tileConfig{} }()
						return k.MatmulPartial(c, p, out, dx, dw, s.M, kl, s.N, tp)
					})
					same(t, fmt.Sprintf("%v tp=%d M=%d kLocal=%d N=%d tile=%+v", p, tp, s.M, kl, s.N, tc),
						d.get(t, out, s.M*s.N), want)
				}
				d.free()
			}
		}
	}
}

// Canonical batch invariance on the GPU itself: row 0 computed with M = 1..2048 rows has the same bits.
func TestMatmulBatchInvariance(t *testing.T) {
	g := openGPU(t)
	r := newRand(t)
	const K, N, Mmax = 1536, 384, 2048
	x, w := randn(r, Mmax*K, true), randn(r, N*K, true)
	d := &dev{g: g}
	defer d.free()
	dx, dw, out := d.f32(t, x), d.f32(t, w), d.poisoned(t, Mmax*N)
	var ref []float32
	for _, M := range []int{1, 2, 7, 16, 17, 64, 129, 1000, 2048} {
		d.run(t, func(c *cuda.Ctx, k *Kernels) error {
			return k.MatmulForward(c, kernels.Canonical, DTCode(kernels.BF16), out, dx, dw, 0, M, K, N)
		})
		row := d.get(t, out, N)
		if ref == nil {
			ref = row
			continue
		}
		same(t, fmt.Sprintf("row 0 with M=%d vs M=1", M), row, ref)
	}
}

// TestRMSNormBitwise: both RMSNorm kernels, every output dtype, the weight as float32 and as bf16 or f16 bits
// (the twins), out-of-place and in place, bitwise the CPU's.
func TestRMSNormBitwise(t *testing.T) {
	g := openGPU(t)
	r := newRand(t)
	for _, s := range []struct{ rows, C int }{{1, 1}, {1, 7}, {3, 64}, {15, 100}, {16, 896}, {17, 4096}, {100, 333}, {512, 2048}, {7, 3584}, {3, 3583},
		{2, 70000}} { // the last does not fit in shared memory: the warp-per-row kernel either way
		for _, p := range []kernels.Profile{kernels.Canonical, kernels.Standard} {
			for _, dt := range []kernels.DType{kernels.BF16, kernels.F16, kernels.F32} {
				// the weight as float32 values and, through the _bf16w and _f16w twins, as its 16-bit bits
				for _, wdt := range kernels.WeightDTypes {
					x := randn(r, s.rows*s.C, true)
					d := &dev{g: g}
					var w []float32
					var dw cuda.Ptr
					if wdt == kernels.F32 {
						w = randn(r, s.C, true)
						dw = d.f32(t, w)
					} else {
						var bits []uint16
						bits, w = storedWeights(wdt, randn(r, s.C, false))
						dw = upload(t, d, bits)
					}
					want := make([]float32, len(x))
					kernels.RMSNormForward(p, dt, want, x, w, s.rows, s.C, 1e-6)
					out, dx := d.poisoned(t, len(x)), d.f32(t, x)
					for _, general := range []bool{false, true} { // rmsnorm_row, and the warp-per-row kernel rmsnorm
						name := fmt.Sprintf("%v %v w=%v rows=%d C=%d general=%v", p, dt, wdt, s.rows, s.C, general)
						d.run(t, func(c *cuda.Ctx, k *Kernels) error {
							k.general = general
							defer func() { k.general = false }()
							return k.RMSNormForwardW(c, p, dt, out, dx, dw, wdt, s.rows, s.C, 1e-6)
						})
						same(t, name, d.get(t, out, len(x)), want)
						// in place (out aliases x), as the engine may run it
						in := d.f32(t, x)
						d.run(t, func(c *cuda.Ctx, k *Kernels) error {
							k.general = general
							defer func() { k.general = false }()
							return k.RMSNormForwardW(c, p, dt, in, in, dw, wdt, s.rows, s.C, 1e-6)
						})
						same(t, name+" in place", d.get(t, in, len(x)), want)
					}
					d.free()
				}
			}
		}
	}
}

func TestRoPEBitwise(t *testing.T) {
	g := openGPU(t)
	r := newRand(t)
	for _, s := range []struct{ T, heads, hd, maxPos int }{{1, 1, 2, 4}, {5, 3, 64, 40}, {33, 14, 128, 200}, {7, 2, 6, 9}} {
		for _, dt := range []kernels.DType{kernels.BF16, kernels.F32} {
			cos, sin := kernels.RoPETables(1e6, s.hd, s.maxPos, dt)
			x := randn(r, s.T*s.heads*s.hd, true)
			pos := make([]int32, s.T)
			for i := range pos {
				pos[i] = int32(r.IntN(s.maxPos))
			}
			want := make([]float32, len(x))
			kernels.RoPEForward(dt, want, x, pos, s.T, s.heads, s.hd, cos, sin)
			d := &dev{g: g}
			out, dx, dp, dc, ds := d.poisoned(t, len(x)), d.f32(t, x), d.i32(t, pos), d.f32(t, cos), d.f32(t, sin)
			d.run(t, func(c *cuda.Ctx, k *Kernels) error {
				return k.RoPEForward(c, dt, out, dx, dp, s.T, s.heads, s.hd, dc, ds)
			})
			same(t, fmt.Sprintf("%v T=%d heads=%d hd=%d", dt, s.T, s.heads, s.hd), d.get(t, out, len(x)), want)
			d.run(t, func(c *cuda.Ctx, k *Kernels) error {
				return k.RoPEForward(c, dt, dx, dx, dp, s.T, s.heads, s.hd, dc, ds)
			})
			same(t, fmt.Sprintf("%v T=%d in place", dt, s.T), d.get(t, dx, len(x)), want)
			d.free()
		}
	}
}

func TestAttentionBitwise(t *testing.T) {
	g := openGPU(t)
	r := newRand(t)
	type shape struct{ T, S, nh, nkv, hd int }
	for _, s := range []shape{{1, 1, 1, 1, 4}, {5, 5, 2, 1, 6}, {1, 70, 4, 2, 64}, {64, 64, 4, 4, 64}, {65, 65, 8, 2, 128},
		{130, 130, 14, 2, 64}, {1, 300, 14, 2, 64}, {3, 600, 4, 1, 128}, {1, 1030, 2, 2, 256}, {200, 200, 3, 3, 36},
		{512, 512, 28, 4, 128}, {1, 700, 28, 4, 128}, {40, 40, 64, 1, 16}, {9, 9, 40, 1, 8}} {
		for _, c := range []struct {
			p       kernels.Profile
			special bool
		}{{kernels.Canonical, false}, {kernels.Standard, false}, {kernels.Canonical, true}} {
			p, special := c.p, c.special
			q := randn(r, s.T*s.nh*s.hd, true)
			kc, vc := randn(r, s.S*s.nkv*s.hd, true), randn(r, s.S*s.nkv*s.hd, true)
			if special {
				attentionSpecials(r, q, kc, vc, s.T, s.S, s.nh, s.nkv, s.hd)
			}
			pos := make([]int32, s.T) // the last T positions of the cache (prefill of a chunk, or decode)
			for i := range pos {
				pos[i] = int32(s.S - s.T + i)
			}
			scale := kernels.AttentionScale(s.hd)
			want := make([]float32, len(q))
			if err := kernels.AttentionForward(p, kernels.BF16, want, q, kc, vc, pos, s.T, s.S, s.nh, s.nkv, s.hd, scale); err != nil {
				t.Fatal(err)
			}
			d := &dev{g: g}
			out, dq, dk, dv, dp := d.poisoned(t, len(q)), d.f32(t, q), d.f32(t, kc), d.f32(t, vc), d.i32(t, pos)
			for _, general := range []bool{false, true} { // attention_blk, and the warp-per-task kernel attention
				d.run(t, func(c *cuda.Ctx, k *Kernels) error {
					k.general = general
					defer func() { k.general = false }()
					return k.AttentionForward(c, p, kernels.BF16, out, dq, dk, dv, dp, s.T, s.S, s.nh, s.nkv, s.hd, scale)
				})
				same(t, fmt.Sprintf("%v T=%d S=%d nh=%d nkv=%d hd=%d special=%v general=%v", p, s.T, s.S, s.nh, s.nkv,
					s.hd, special, general), d.get(t, out, len(q)), want)
			}
			d.free()
		}
	}
}

// attentionSpecials plants the values that test a block maximum's tie and NaN rules: keys equal to the one
// before them (equal scores: the first one counts), a query head of zeros (all scores ±0), NaN in the first key of
// a 64-key block and in a later key, and an infinite value.
func attentionSpecials(r *rand.Rand, q, kc, vc []float32, T, S, nh, nkv, hd int) {
	row := func(j, g int) []float32 { return kc[(j*nkv+g)*hd : (j*nkv+g+1)*hd] }
	for j := 1; j < S; j += 3 {
		for g := 0; g < nkv; g++ {
			copy(row(j, g), row(j-1, g))
		}
	}
	for t := 0; t < T; t += 2 {
		h := r.IntN(nh)
		clear(q[(t*nh+h)*hd : (t*nh+h+1)*hd])
	}
	nan := float32(math.NaN())
	if S > 64 {
		row(64, 0)[0] = nan
	}
	if S > 5 {
		row(5, nkv-1)[hd-1] = nan
	}
	vc[r.IntN(len(vc))] = float32(math.Inf(1))
}

// Canonical prefill/decode invariance on the GPU: the last query's row from a full prefill equals a one-row
// decode over the same cache.
func TestAttentionPrefillDecodeInvariance(t *testing.T) {
	g := openGPU(t)
	r := newRand(t)
	const S, nh, nkv, hd = 333, 8, 2, 64
	q := randn(r, S*nh*hd, true)
	kc, vc := randn(r, S*nkv*hd, true), randn(r, S*nkv*hd, true)
	pos := make([]int32, S)
	for i := range pos {
		pos[i] = int32(i)
	}
	d := &dev{g: g}
	defer d.free()
	out, dq, dk, dv, dp := d.poisoned(t, len(q)), d.f32(t, q), d.f32(t, kc), d.f32(t, vc), d.i32(t, pos)
	scale := kernels.AttentionScale(hd)
	d.run(t, func(c *cuda.Ctx, k *Kernels) error {
		return k.AttentionForward(c, kernels.Canonical, kernels.BF16, out, dq, dk, dv, dp, S, S, nh, nkv, hd, scale)
	})
	full := d.get(t, out, len(q))
	for _, tq := range []int{0, 63, 64, 200, S - 1} {
		one := d.poisoned(t, nh*hd)
		d.run(t, func(c *cuda.Ctx, k *Kernels) error {
			return k.AttentionForward(c, kernels.Canonical, kernels.BF16, one, dq.Add(int64(tq*nh*hd*4)), dk, dv,
				dp.Add(int64(tq*4)), 1, S, nh, nkv, hd, scale)
		})
		same(t, fmt.Sprintf("decode of position %d vs prefill", tq), d.get(t, one, nh*hd), full[tq*nh*hd:(tq+1)*nh*hd])
	}
}

func TestElementwiseBitwise(t *testing.T) {
	g := openGPU(t)
	r := newRand(t)
	for _, n := range []int{1, 7, 1000, 100003} {
		for _, dt := range []kernels.DType{kernels.BF16, kernels.F16, kernels.F32} {
			a, b := randn(r, n, true), randn(r, n, true)
			d := &dev{g: g}
			da, db, out := d.f32(t, a), d.f32(t, b), d.poisoned(t, n)

			want := make([]float32, n)
			kernels.ResidualForward(dt, want, a, b, n)
			d.run(t, func(c *cuda.Ctx, k *Kernels) error { return k.ResidualForward(c, DTCode(dt), out, da, db, n) })
			same(t, fmt.Sprintf("residual %v n=%d", dt, n), d.get(t, out, n), want)

			kernels.SwiGLUForward(dt, want, a, b, n)
			d.run(t, func(c *cuda.Ctx, k *Kernels) error { return k.SwiGLUForward(c, dt, out, da, db, n) })
			same(t, fmt.Sprintf("swiglu %v n=%d", dt, n), d.get(t, out, n), want)

			raw := randn(r, n, false)
			dr := d.f32(t, raw)
			copy(want, raw)
			dt.RoundSlice(want)
			d.run(t, func(c *cuda.Ctx, k *Kernels) error { return k.Round(c, dt, dr, n) })
			same(t, fmt.Sprintf("round %v n=%d", dt, n), d.get(t, dr, n), want)
			d.free()
		}
	}
	// special values through round and SiLU: ±0, ±Inf, NaN, subnormals, huge
	sp := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		1e-40, -1e-45, 65519, 65520, 3e38, -88.8, 88.7, -104.5, 1e-8, 0x1p-14, 0x1p-15 * 3}
	d := &dev{g: g}
	defer d.free()
	ds, out := d.f32(t, sp), d.poisoned(t, len(sp))
	ones := make([]float32, len(sp))
	for i := range ones {
		ones[i] = 1
	}
	do := d.f32(t, ones)
	for _, dt := range []kernels.DType{kernels.BF16, kernels.F16, kernels.F32} {
		want := make([]float32, len(sp))
		kernels.SwiGLUForward(dt, want, sp, ones, len(sp))
		d.run(t, func(c *cuda.Ctx, k *Kernels) error { return k.SwiGLUForward(c, dt, out, ds, do, len(sp)) })
		same(t, fmt.Sprintf("swiglu specials %v", dt), d.get(t, out, len(sp)), want)
	}
}

// TestNarrowBF16Bitwise: narrow_bf16 gives fp.F32ToBF16's bits for random floats (most not bf16 values: every
// rounding case), bf16 values, and the special values (±0, ±Inf, NaNs of either sign and any payload, the
// largest finite values that round to Inf, subnormals).
func TestNarrowBF16Bitwise(t *testing.T) {
	g := openGPU(t)
	r := newRand(t)
	sp := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		math.Float32frombits(0xFFC00001), math.Float32frombits(0x7F800001), math.Float32frombits(0xFF812345),
		math.MaxFloat32, -math.MaxFloat32, 1e-40, -1e-45, 0x1p-126, 1 + 0x1p-8, 1 + 0x1p-8 + 0x1p-23, 1 + 3*0x1p-8}
	for _, n := range []int{1, 7, 1000, 100003} {
		d := &dev{g: g}
		x := append(randn(r, n, false), randn(r, n, true)...)
		if n > len(sp) {
			copy(x, sp)
		}
		dx := d.f32(t, x)
		var out cuda.Ptr
		d.run(t, func(c *cuda.Ctx, k *Kernels) error {
			if !k.HasNarrowBF16() {
				return fmt.Errorf("the loaded PTX has no narrow_bf16 (stale PTX: make ptx)")
			}
			var err error
			if out, err = c.Alloc(int64(2 * len(x))); err != nil {
				return err
			}
			return k.NarrowBF16(c, out, dx, len(x))
		})
		got := make([]uint16, len(x))
		d.run(t, func(c *cuda.Ctx, k *Kernels) error {
			defer c.Free(out) //nolint:errcheck
			return cuda.Download(c, got, out)
		})
		for i, v := range x {
			if want := fp.F32ToBF16(v); got[i] != want {
				t.Fatalf("narrow_bf16 n=%d: element %d (%#08x) gives %#04x, fp.F32ToBF16 %#04x", len(x), i, math.Float32bits(v), got[i], want)
			}
		}
		d.free()
	}
}

func TestEmbeddingBitwise(t *testing.T) {
	g := openGPU(t)
	r := newRand(t)
	const V, C, T = 1000, 96, 37
	table := randn(r, V*C, false)
	toks := make([]int32, T)
	for i := range toks {
		toks[i] = int32(r.IntN(V))
	}
	for _, dt := range []kernels.DType{kernels.BF16, kernels.F32} {
		want := make([]float32, T*C)
		if err := kernels.EmbeddingForward(dt, want, table, toks, T, V, C); err != nil {
			t.Fatal(err)
		}
		d := &dev{g: g}
		out, dtab, dtok := d.poisoned(t, T*C), d.f32(t, table), d.i32(t, toks)
		d.run(t, func(c *cuda.Ctx, k *Kernels) error { return k.EmbeddingForward(c, dt, out, dtab, dtok, T, V, C) })
		same(t, fmt.Sprintf("embedding %v", dt), d.get(t, out, T*C), want)
		d.free()
	}
}

func TestLogSoftmaxBitwise(t *testing.T) {
	g := openGPU(t)
	r := newRand(t)
	for _, s := range []struct{ T, V int }{{1, 1}, {1, 7}, {3, 1000}, {17, 32000}, {5, 151936}, {2, 152064}, {1, 4097}, {3, 8191}} {
		for _, p := range []kernels.Profile{kernels.Canonical, kernels.Standard} {
			x := randn(r, s.T*s.V, false)
			for i := range x {
				x[i] *= 4
			}
			if s.T >= 3 { // a row of signed zeros (a zero max becomes +0) and a row with a NaN
				for i := s.V; i < 2*s.V; i++ {
					x[i] = float32(math.Copysign(0, float64(r.IntN(2)*2-1)))
				}
				x[2*s.V+r.IntN(s.V)] = float32(math.NaN())
			}
			want := make([]float32, len(x))
			if err := kernels.LogSoftmaxForward(p, want, x, s.T, s.V, nil); err != nil {
				t.Fatal(err)
			}
			tg := make([]int32, s.T)
			for i := range tg {
				tg[i] = int32(r.IntN(s.V))
			}
			wantLP := make([]float32, s.T)
			if err := kernels.LogProbs(p, wantLP, x, tg, s.T, s.V, nil); err != nil {
				t.Fatal(err)
			}
			d := &dev{g: g}
			out, dx, dtg, lp := d.poisoned(t, len(x)), d.f32(t, x), d.i32(t, tg), d.poisoned(t, s.T)
			d.run(t, func(c *cuda.Ctx, k *Kernels) error { return k.LogSoftmaxForward(c, p, out, dx, s.T, s.V) })
			same(t, fmt.Sprintf("logsoftmax %v T=%d V=%d", p, s.T, s.V), d.get(t, out, len(x)), want)
			d.run(t, func(c *cuda.Ctx, k *Kernels) error { return k.LogProbs(c, p, lp, dx, dtg, s.T, s.V) })
			same(t, fmt.Sprintf("logprobs %v T=%d V=%d", p, s.T, s.V), d.get(t, lp, s.T), wantLP)
			d.free()
		}
	}
}

func TestSampleBitwise(t *testing.T) {
	g := openGPU(t)
	r := newRand(t)
	const T, V = 9, 50000
	x := randn(r, T*V, false)
	x[3] = float32(math.NaN())
	x[V+17] = x[V+5] // a tie
	seqs, poss := make([]int64, T), make([]int64, T)
	for i := range seqs {
		seqs[i], poss[i] = int64(r.Uint64()>>1), int64(r.IntN(1<<20))
	}
	d := &dev{g: g}
	defer d.free()
	dx, ds, dp := d.f32(t, x), d.i64(t, seqs), d.i64(t, poss)
	out := d.i32(t, make([]int32, T))
	for _, sp := range []kernels.SampleParams{{Temperature: 0}, {Temperature: 1, Seed: r.Uint64()}, {Temperature: 0.7, Seed: 42}} {
		d.run(t, func(c *cuda.Ctx, k *Kernels) error { return k.Sample(c, out, dx, T, V, sp, ds, dp) })
		got := make([]int32, T)
		if err := g.d.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if err := cuda.DownloadFrom(g.d, got, out); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < T; i++ {
			if want := kernels.Sample(x[i*V:(i+1)*V], sp, seqs[i], poss[i]); got[i] != want {
				t.Errorf("sample %+v row %d: gpu %d, cpu %d", sp, i, got[i], want)
			}
		}
	}
}

// A kernel asked for more scratch than the device has gives a Go error (out of memory), not a crash.
func TestOutOfMemoryIsError(t *testing.T) {
	g := openGPU(t)
	err := g.d.Do(func(c *cuda.Ctx) error {
		// 8 segments × M × N floats of partials: 8 × 2^20 × 2^20 × 4 bytes = 32 TiB
		return g.k.MatmulForward(c, kernels.Canonical, 0, 0, 0, 0, 0, 1<<20, 64, 1<<20)
	})
	if !cuda.IsOutOfMemory(err) {
		t.Fatalf("huge matmul: %v, want out of memory", err)
	}
	t.Logf("%v", err)
}
