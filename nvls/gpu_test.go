package nvls

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"
	"unsafe"

	"bitalign/cuda"
	"bitalign/internal/testgpu"
	"bitalign/internal/testrank"
	"bitalign/kernels"
)

// GPU tests need two GPUs with peer access; they skip with a message elsewhere (CI), and fail instead when
// BITALIGN_REQUIRE_GPU=1 (the GPU machine), so that a broken binding cannot hide behind a skip.
func openGPUGroupOrSkip(t testing.TB, n int, cfg GPUConfig, opts ...Option) *GPUGroup {
	t.Helper()
	have, err := cuda.DeviceCount()
	if err == nil && have < n {
		err = fmt.Errorf("this machine has %d GPU(s)", have)
	}
	if err != nil {
		testgpu.SkipOrFail(t, fmt.Errorf("%d GPUs are unavailable: %w", n, err), "needs %d GPUs (%v): skipped, not passed", n, err)
	}
	// a short default timeout: a kernel bug shows as an error in seconds, not a minute per call
	g, err := OpenGPUGroup(n, cfg, append([]Option{WithTimeout(5 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return g
}

// gpuRanks is the rank count of the GPU tests: every GPU of the machine, as a power of two, at least 2.
func gpuRanks() int {
	n, err := cuda.DeviceCount()
	if err != nil || n < 2 {
		return 2
	}
	r := 1
	for r*2 <= n && r*2 <= 8 {
		r *= 2
	}
	return r
}

// deviceBuffers allocates an input and an output buffer of size bytes on each of g's n ranks, writes the
// inputs with fill, and frees both (checking that they were freed) when the benchmark ends.
func deviceBuffers(b *testing.B, g *GPUGroup, n int, size int64, fill func(x *cuda.Ctx, r int, in cuda.Ptr) error) [][2]cuda.Ptr {
	b.Helper()
	bufs := make([][2]cuda.Ptr, n)
	b.Cleanup(func() {
		testrank.NoErrors(b, testrank.Each(n, func(r int) error {
			return g.Comm(r).Device().Do(func(x *cuda.Ctx) error {
				var errs []error
				for _, p := range bufs[r] {
					if p != 0 {
						errs = append(errs, x.Free(p))
					}
				}
				return errors.Join(errs...)
			})
		}))
	})
	testrank.NoErrors(b, testrank.Each(n, func(r int) error {
		return g.Comm(r).Device().Do(func(x *cuda.Ctx) error {
			var err error
			for i := range bufs[r] {
				if bufs[r][i], err = x.Alloc(size); err != nil {
					return err
				}
			}
			return fill(x, r, bufs[r][0])
		})
	}))
	return bufs
}

// reportBusBW reports a collective's time, the slowest rank's median (meds: each rank's, in µs), and its bus
// bandwidth: factor·bytes moved per rank in that time.
func reportBusBW(b *testing.B, meds []float64, factor float64, bytes int64) {
	med := 0.0
	for _, m := range meds {
		med = max(med, m)
	}
	b.ReportMetric(med, "median-µs")
	b.ReportMetric(factor*float64(bytes)/(med*1e-6)/1e9, "busbw-GB/s")
}

func noErrors(t *testing.T, what string, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("%s: rank %d: %v", what, r, err)
		}
	}
}

// randomInputs gives each rank n floats spread over 40 binades, both signs, so that sums round; a few
// special values (±0, subnormals, Inf, NaN) sit at fixed positions when n is large enough.
func randomInputs(ranks, n int, seed uint64, specials bool) [][]float32 {
	rng := rand.New(rand.NewPCG(seed, uint64(n)))
	in := make([][]float32, ranks)
	for r := range in {
		in[r] = make([]float32, n)
		for i := range in[r] {
			v := float32(math.Ldexp(rng.Float64()+0.5, rng.IntN(40)-20))
			if rng.IntN(2) == 0 {
				v = -v
			}
			in[r][i] = v
		}
	}
	if specials && n >= 8 {
		for r := range in {
			in[r][0] = float32(math.Copysign(0, -1))                // -0 ⊕ -0 = -0
			in[r][1] = math.Float32frombits(uint32(1 + r))          // subnormals stay (no flush to zero)
			in[r][2] = float32(math.Copysign(0, float64(r%2*2-1)))  // -0 ⊕ +0 = +0
			in[r][3] = float32(math.Inf(1))                         // Inf
			in[r][4] = math.Float32frombits(0x7FC00000 | uint32(r)) // NaN: stays NaN (payload not promised)
			in[r][5] = float32(math.Copysign(0, float64(1-r%2*2)))  // max: tree order decides the zero's sign
			in[r][6] = float32(math.Copysign(0, float64(r%2*2-1)))  //
			in[r][7] = math.Float32frombits(0x7F800000 - uint32(r)) // near the top, sums overflow to Inf
		}
	}
	return in
}

func clone2(in [][]float32) [][]float32 {
	out := make([][]float32, len(in))
	for r := range in {
		out[r] = append([]float32(nil), in[r]...)
	}
	return out
}

// sameBits reports the first index where got and want differ bitwise (NaN matches any NaN: docs/arithmetic.md
// promises no payload inside an op), with the ULP distance.
func sameBits(got, want []float32) error {
	if len(got) != len(want) {
		return fmt.Errorf("length %d, want %d", len(got), len(want))
	}
	for i := range got {
		a, b := math.Float32bits(got[i]), math.Float32bits(want[i])
		if a == b || (got[i] != got[i] && want[i] != want[i]) {
			continue
		}
		return fmt.Errorf("element %d: %v (%#08x), want %v (%#08x), %d ULP", i, got[i], a, want[i], b, ulp32(a, b))
	}
	return nil
}

func ulp32(a, b uint32) uint64 {
	ord := func(u uint32) int64 {
		if u&0x80000000 != 0 {
			return -int64(u & 0x7FFFFFFF)
		}
		return int64(u)
	}
	d := ord(a) - ord(b)
	if d < 0 {
		d = -d
	}
	return uint64(d)
}

// cpuReference runs op on the CPU transport: the bits every GPU rank must return.
func cpuReference(t *testing.T, n int, op func(c Comm, r int) error) {
	t.Helper()
	cs, err := NewCPUGroup(n, WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	noErrors(t, "CPU reference", testrank.Each(n, func(r int) error { return op(cs[r], r) }))
}

var gpuSizes = []int{1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 100, 1000, 1023, 1024, 4097, 65536 + 3, 1 << 20, 1<<20 + 5, 1 << 24}

func TestGPUAllReduceMatchesCPU(t *testing.T) {
	n := gpuRanks()
	groups := map[string]*GPUGroup{
		"oneshot":  openGPUGroupOrSkip(t, n, GPUConfig{Algo: AlgoOneShot}),
		"twophase": openGPUGroupOrSkip(t, n, GPUConfig{Algo: AlgoTwoPhase}),
		"push":     openGPUGroupOrSkip(t, n, GPUConfig{Algo: AlgoPush}),
		"auto":     openGPUGroupOrSkip(t, n, GPUConfig{}),
		"pieces":   openGPUGroupOrSkip(t, n, GPUConfig{Buffer: 64 << 10, OneShotMax: 16 << 10}), // many pieces, both kernels
	}
	for _, size := range gpuSizes {
		in := randomInputs(n, size, 1, true)
		want := clone2(in)
		cpuReference(t, n, func(c Comm, r int) error { return c.AllReduce(want[r]) })
		for _, name := range []string{"oneshot", "twophase", "push", "auto", "pieces"} {
			if size == 1<<24 && name == "pieces" {
				continue // 256 pieces of 16 Ki: slow and adds nothing over 1 Mi
			}
			got := clone2(in)
			g := groups[name]
			noErrors(t, fmt.Sprintf("%s AllReduce(%d)", name, size), testrank.Each(n, func(r int) error { return g.Comm(r).AllReduce(got[r]) }))
			for r := 0; r < n; r++ {
				if err := sameBits(got[r], want[r]); err != nil {
					t.Errorf("%s AllReduce of %d elements, rank %d vs the CPU transport: %v", name, size, r, err)
				}
			}
		}
	}
}

func TestGPUAllReduceMaxMatchesCPU(t *testing.T) {
	n := gpuRanks()
	g := openGPUGroupOrSkip(t, n, GPUConfig{})
	for _, size := range []int{1, 8, 17, 4097, 1<<20 + 1} {
		in := randomInputs(n, size, 2, true)
		want, got := clone2(in), clone2(in)
		cpuReference(t, n, func(c Comm, r int) error { return c.AllReduceMax(want[r]) })
		noErrors(t, "AllReduceMax", testrank.Each(n, func(r int) error { return g.Comm(r).AllReduceMax(got[r]) }))
		for r := 0; r < n; r++ {
			for i := range got[r] { // max moves values: even NaN payloads must match
				if math.Float32bits(got[r][i]) != math.Float32bits(want[r][i]) {
					t.Fatalf("AllReduceMax(%d) rank %d element %d: %#08x, want %#08x", size, r, i,
						math.Float32bits(got[r][i]), math.Float32bits(want[r][i]))
				}
			}
		}
	}
}

func TestGPUReduceScatterMatchesCPU(t *testing.T) {
	n := gpuRanks()
	groups := []*GPUGroup{openGPUGroupOrSkip(t, n, GPUConfig{}), openGPUGroupOrSkip(t, n, GPUConfig{Buffer: 64 << 10})}
	for _, c := range []int{1, 3, 4, 5, 1000, 4097, 1 << 20, (1 << 24) / n} {
		in := randomInputs(n, n*c, 3, true)
		want := make([][]float32, n)
		for r := range want {
			want[r] = make([]float32, c)
		}
		cpuReference(t, n, func(cm Comm, r int) error { return cm.ReduceScatter(want[r], in[r]) })
		// the same bits as the all-reduce's slice
		full := clone2(in)
		cpuReference(t, n, func(cm Comm, r int) error { return cm.AllReduce(full[r]) })
		for gi, g := range groups {
			got := make([][]float32, n)
			for r := range got {
				got[r] = make([]float32, c)
			}
			noErrors(t, "ReduceScatter", testrank.Each(n, func(r int) error { return g.Comm(r).ReduceScatter(got[r], in[r]) }))
			for r := 0; r < n; r++ {
				if err := sameBits(got[r], want[r]); err != nil {
					t.Errorf("group %d ReduceScatter %d×%d rank %d vs CPU: %v", gi, n, c, r, err)
				}
				if err := sameBits(got[r], full[0][r*c:(r+1)*c]); err != nil {
					t.Errorf("group %d ReduceScatter %d×%d rank %d vs the all-reduce's slice: %v", gi, n, c, r, err)
				}
			}
		}
	}
}

func TestGPUAllGather(t *testing.T) {
	n := gpuRanks()
	g := openGPUGroupOrSkip(t, n, GPUConfig{Buffer: 64 << 10})
	for _, c := range []int{1, 3, 4, 1000, 4097, 1 << 20} {
		in := randomInputs(n, c, 4, true)
		got := make([][]float32, n)
		for r := range got {
			got[r] = make([]float32, n*c)
			for i := range got[r] {
				got[r][i] = float32(math.NaN()) // poison: every element must be written
			}
		}
		noErrors(t, "AllGather", testrank.Each(n, func(r int) error { return g.Comm(r).AllGather(got[r], in[r]) }))
		for r := 0; r < n; r++ {
			for q := 0; q < n; q++ {
				for i := 0; i < c; i++ {
					if math.Float32bits(got[r][q*c+i]) != math.Float32bits(in[q][i]) {
						t.Fatalf("AllGather %d×%d: rank %d element %d of rank %d's part differs", n, c, r, i, q)
					}
				}
			}
		}
	}
}

// bf16: float32 tree of the widened inputs, rounded once (kernels.RoundBF16).
func TestGPUAllReduceBF16(t *testing.T) {
	n := gpuRanks()
	g := openGPUGroupOrSkip(t, n, GPUConfig{})
	for _, size := range []int{1, 7, 8, 9, 4097, 1<<20 + 3} {
		in := randomInputs(n, size, 5, true)
		bufs := make([][]uint16, n)
		for r := range bufs {
			bufs[r] = make([]uint16, size)
			for i, v := range in[r] {
				bufs[r][i] = kernels.ToBF16Bits(v)
			}
		}
		want := make([]uint16, size)
		vals := make([]float32, n)
		for i := range want {
			for r := range vals {
				vals[r] = kernels.FromBF16Bits(bufs[r][i])
			}
			want[i] = kernels.ToBF16Bits(treeRef(vals))
		}
		noErrors(t, "AllReduceBF16", testrank.Each(n, func(r int) error { return g.Comm(r).AllReduceBF16(bufs[r]) }))
		for r := 0; r < n; r++ {
			for i := range want {
				if bufs[r][i] != want[i] {
					t.Fatalf("AllReduceBF16(%d) rank %d element %d: %#04x, want %#04x", size, r, i, bufs[r][i], want[i])
				}
			}
		}
	}
}

// Device-resident calls: separate in and out, misaligned pointers (the element-wise kernels), several pieces,
// in place, and an input written straight into the scratch (NextInput).
func TestGPUAllReduceDevice(t *testing.T) {
	n := gpuRanks()
	for _, algo := range []Algo{AlgoAuto, AlgoOneShot, AlgoPush, AlgoTwoPhase} {
		testAllReduceDevice(t, openGPUGroupOrSkip(t, n, GPUConfig{Buffer: 64 << 10, Algo: algo}))
	}
}

func testAllReduceDevice(t *testing.T, g *GPUGroup) {
	n := g.Size()
	const size = 100_003
	for _, tc := range []struct {
		name       string
		offset     int64 // bytes: 4 makes the kernels access in and out element by element
		oddOnly    bool  // the offset on odd ranks only: the ranks' partitions must still agree
		inPlace    bool
		registered bool
		size       int
	}{
		{"aligned", 0, false, false, false, size},
		{"misaligned", 4, false, false, false, size},
		{"mixed alignment", 4, true, false, false, size},
		{"inplace", 0, false, true, false, size},
		{"registered", 0, false, false, true, 8_000 - 3}, // fits one 64 KiB piece, also as push slots
	} {
		in := randomInputs(n, tc.size, 6, true)
		want := clone2(in)
		cpuReference(t, n, func(c Comm, r int) error { return c.AllReduce(want[r]) })
		got := make([][]float32, n)
		noErrors(t, tc.name, testrank.Each(n, func(r int) error {
			c := g.Comm(r)
			got[r] = make([]float32, tc.size)
			return c.Device().Do(func(x *cuda.Ctx) error {
				bytes := int64(tc.size)*4 + 16
				din, err := x.Alloc(bytes)
				if err != nil {
					return err
				}
				defer x.Free(din)
				dout, err := x.Alloc(bytes)
				if err != nil {
					return err
				}
				defer x.Free(dout)
				off := tc.offset
				if tc.oddOnly && r%2 == 0 {
					off = 0
				}
				src, dst := din.Add(off), dout.Add(off)
				if tc.inPlace {
					dst = src
				}
				if tc.registered {
					if src = c.NextInput(int64(tc.size), ElemF32); src == 0 {
						return errors.New("NextInput gave no buffer")
					}
				}
				if err := cuda.Upload(x, src, in[r]); err != nil {
					return err
				}
				if err := x.Synchronize(); err != nil { // a pageable upload may still be in flight on return
					return err
				}
				if err := c.AllReduceDevice(x, c.Stream(), dst, src, int64(tc.size), ElemF32); err != nil {
					return err
				}
				if err := c.Wait(x, c.Stream()); err != nil {
					return err
				}
				return cuda.Download(x, got[r], dst)
			})
		}))
		for r := 0; r < n; r++ {
			if err := sameBits(got[r], want[r]); err != nil {
				t.Errorf("AllReduceDevice %s (algo %d) rank %d: %v", tc.name, g.cfg.Algo, r, err)
			}
		}
	}
}

// A rank that never arrives: the waiting kernel gives up, the call returns a *TimeoutError naming the
// missing rank, and the group refuses further calls instead of hanging.
func TestGPUTimeout(t *testing.T) {
	n := gpuRanks()
	g := openGPUGroupOrSkip(t, n, GPUConfig{}, WithTimeout(200*time.Millisecond))
	buf := []float32{1, 2, 3}
	start := time.Now()
	err := g.Comm(0).AllReduce(buf) // rank 1.. never call
	took := time.Since(start)
	var te *TimeoutError
	if !errors.As(err, &te) {
		t.Fatalf("AllReduce without peers: %v, want a *TimeoutError", err)
	}
	if te.Rank != 0 || len(te.Missing) != 1 || te.Missing[0] == 0 || te.After != 200*time.Millisecond {
		t.Errorf("timeout error %+v", te)
	}
	if took < 200*time.Millisecond || took > 10*time.Second {
		t.Errorf("gave up after %v, want about 200ms", took)
	}
	t.Logf("%v (after %v)", err, took)
	if err := g.Comm(1).AllReduce(buf); err == nil {
		t.Error("a broken group accepted another call")
	}
}

// Ranks that disagree on a call stop at once with an error instead of reading each other's data wrongly.
func TestGPUMismatchedCalls(t *testing.T) {
	n := gpuRanks()
	g := openGPUGroupOrSkip(t, n, GPUConfig{}, WithTimeout(5*time.Second))
	start := time.Now()
	errs := testrank.Each(n, func(r int) error { return g.Comm(r).AllReduce(make([]float32, 1000+r)) })
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("mismatched calls took %v: the ranks waited for the timeout", took)
	}
	for r, err := range errs {
		var te *TimeoutError
		if err == nil || errors.As(err, &te) {
			t.Errorf("rank %d: %v, want a mismatch error", r, err)
		} else {
			t.Logf("rank %d: %v", r, err)
		}
	}
}

// The use the engine makes of it: a row-parallel matmul split over the GPU ranks (kernels.MatmulPartial),
// all-reduced on the GPUs, finished by kernels.MatmulFinish, has the bits of the one-rank kernels.MatmulForward
// (the all-reduce finishes the same 8-segment tree, docs/arithmetic.md §3).
func TestGPUMatmulRowParallelMatchesTP1(t *testing.T) {
	tp := gpuRanks()
	g := openGPUGroupOrSkip(t, tp, GPUConfig{})
	const M, K, N = 7, 1024, 96
	rng := rand.New(rand.NewPCG(10, 11))
	bf := func() float32 { return kernels.RoundBF16(float32(rng.NormFloat64())) }
	x, w, bias := make([]float32, M*K), make([]float32, N*K), make([]float32, N)
	for _, s := range [][]float32{x, w, bias} {
		for i := range s {
			s[i] = bf()
		}
	}
	want := make([]float32, M*N)
	kernels.MatmulForward(kernels.Canonical, kernels.BF16, want, x, w, bias, M, K, N)
	kl := K / tp
	outs := make([][]float32, tp)
	noErrors(t, "row-parallel matmul", testrank.Each(tp, func(r int) error {
		xl, wl := make([]float32, M*kl), make([]float32, N*kl)
		for m := 0; m < M; m++ {
			copy(xl[m*kl:(m+1)*kl], x[m*K+r*kl:])
		}
		for n := 0; n < N; n++ {
			copy(wl[n*kl:(n+1)*kl], w[n*K+r*kl:])
		}
		outs[r] = make([]float32, M*N)
		if err := kernels.MatmulPartial(kernels.Canonical, outs[r], xl, wl, M, kl, N, r, tp); err != nil {
			return err
		}
		if err := g.Comm(r).AllReduce(outs[r]); err != nil {
			return err
		}
		kernels.MatmulFinish(kernels.BF16, outs[r], bias, M, N)
		return nil
	}))
	for r := range outs {
		if err := sameBits(outs[r], want); err != nil {
			t.Errorf("TP %d rank %d vs TP 1: %v", tp, r, err)
		}
	}
}

// 4 and 8 ranks on the GPUs there are (two ranks or more per GPU, each on its own device thread): the 4- and
// 8-rank kernels and their tree ((v0⊕v1)⊕(v2⊕v3))… give the CPU transport's bits, which two ranks alone cannot
// show (a 2-rank sum is the same in any order).
func TestGPUSharedRanksMatchCPU(t *testing.T) {
	have, err := cuda.DeviceCount()
	if err != nil || have < 2 {
		openGPUGroupOrSkip(t, 2, GPUConfig{}) // skips (or fails under BITALIGN_REQUIRE_GPU=1)
		return
	}
	for _, n := range []int{4, 8} {
		for _, algo := range []Algo{AlgoOneShot, AlgoPush, AlgoTwoPhase} {
			devs := make([]*cuda.Device, n)
			for r := range devs {
				d, err := cuda.Open(r % have)
				if err != nil {
					t.Fatal(err)
				}
				defer d.Close()
				devs[r] = d
			}
			g, err := NewGPUGroup(devs, GPUConfig{Algo: algo, MaxBlocks: 8, Buffer: 4 << 20, shareGPUs: true}, WithTimeout(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			for _, size := range []int{1, 17, 4097, 1<<20 + 5} {
				in := randomInputs(n, size, 12, true)
				want, got := clone2(in), clone2(in)
				cpuReference(t, n, func(c Comm, r int) error { return c.AllReduce(want[r]) })
				noErrors(t, fmt.Sprintf("%d ranks, algo %d, AllReduce(%d)", n, algo, size), testrank.Each(n, func(r int) error { return g.Comm(r).AllReduce(got[r]) }))
				for r := 0; r < n; r++ {
					if err := sameBits(got[r], want[r]); err != nil {
						t.Errorf("%d ranks, algo %d, AllReduce(%d) rank %d vs CPU: %v", n, algo, size, r, err)
					}
				}
			}
			c := 1000
			in := randomInputs(n, n*c, 13, true)
			want, got := make([][]float32, n), make([][]float32, n)
			for r := range want {
				want[r], got[r] = make([]float32, c), make([]float32, c)
			}
			cpuReference(t, n, func(cm Comm, r int) error { return cm.ReduceScatter(want[r], in[r]) })
			noErrors(t, "shared ReduceScatter", testrank.Each(n, func(r int) error { return g.Comm(r).ReduceScatter(got[r], in[r]) }))
			mx := clone2(in)
			mxWant := clone2(in)
			cpuReference(t, n, func(cm Comm, r int) error { return cm.AllReduceMax(mxWant[r]) })
			noErrors(t, "shared AllReduceMax", testrank.Each(n, func(r int) error { return g.Comm(r).AllReduceMax(mx[r]) }))
			for r := 0; r < n; r++ {
				if err := sameBits(got[r], want[r]); err != nil {
					t.Errorf("%d ranks ReduceScatter rank %d vs CPU: %v", n, r, err)
				}
				for i := range mx[r] {
					if math.Float32bits(mx[r][i]) != math.Float32bits(mxWant[r][i]) {
						t.Fatalf("%d ranks AllReduceMax rank %d element %d: %#08x, want %#08x", n, r, i, math.Float32bits(mx[r][i]), math.Float32bits(mxWant[r][i]))
					}
				}
			}
			if err := g.Close(); err != nil {
				t.Error(err)
			}
		}
	}
}

// A rank's Close breaks the group as on the CPU transport: the other ranks' calls fail with ErrClosed.
func TestGPUCommClose(t *testing.T) {
	n := gpuRanks()
	g := openGPUGroupOrSkip(t, n, GPUConfig{})
	bufs := randomInputs(n, 100, 8, false)
	noErrors(t, "before Close", testrank.Each(n, func(r int) error { return g.Comm(r).AllReduce(bufs[r]) }))
	if err := g.Comm(n - 1).Close(); err != nil {
		t.Fatal(err)
	}
	if err := g.Comm(0).AllReduce(bufs[0]); !errors.Is(err, ErrClosed) {
		t.Errorf("AllReduce after a rank closed: %v, want ErrClosed", err)
	}
}

// A rank that arrives late, but within the timeout, is waited for.
func TestGPULateRank(t *testing.T) {
	n := gpuRanks()
	g := openGPUGroupOrSkip(t, n, GPUConfig{}, WithTimeout(10*time.Second))
	in := randomInputs(n, 1000, 7, false)
	want := clone2(in)
	cpuReference(t, n, func(c Comm, r int) error { return c.AllReduce(want[r]) })
	noErrors(t, "late rank", testrank.Each(n, func(r int) error {
		if r == n-1 {
			time.Sleep(300 * time.Millisecond)
		}
		return g.Comm(r).AllReduce(in[r])
	}))
	for r := 0; r < n; r++ {
		if err := sameBits(in[r], want[r]); err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func TestGPUGroupRejectsRing(t *testing.T) {
	if _, err := NewGPUGroup(nil, GPUConfig{}, WithOrder(Ring)); err == nil {
		t.Error("a GPU group accepted the ring order")
	}
	if _, err := NewGPUGroup(make([]*cuda.Device, 3), GPUConfig{}); err == nil {
		t.Error("a GPU group of 3 ranks was accepted")
	}
}

func TestKernelArgsLayout(t *testing.T) {
	if s := unsafe.Sizeof(kernelArgs{}); s != 192 {
		t.Fatalf("kernelArgs is %d bytes, collectives.cu's Args is 192", s)
	}
	if o := unsafe.Offsetof(kernelArgs{}.rank); o != 176 {
		t.Fatalf("kernelArgs.rank at %d, want 176", o)
	}
}

// BenchmarkGPUAllReduce times device-resident all-reduces (separate in and out buffers, as a CUDA engine
// calls them) with CUDA events around each call, calls back to back on every rank, and reports the slowest
// rank's median per size: the same method as scripts/nccl_bench.py uses for NCCL. Run with -benchtime=100x.
func BenchmarkGPUAllReduce(b *testing.B) {
	n := gpuRanks()
	const maxBytes = 64 << 20
	for _, v := range []struct {
		name       string
		algo       Algo
		types      []ElemType
		registered bool // the input is written where the kernel reads it (NextInput): no copy into scratch
	}{
		{"auto", AlgoAuto, []ElemType{ElemF32, ElemBF16}, false},
		{"oneshot", AlgoOneShot, []ElemType{ElemF32}, false},
		{"twophase", AlgoTwoPhase, []ElemType{ElemF32}, false},
		{"push", AlgoPush, []ElemType{ElemF32, ElemBF16}, false},
		{"registered", AlgoAuto, []ElemType{ElemF32}, true},
	} {
		g := openGPUGroupOrSkip(b, n, GPUConfig{Algo: v.algo, Buffer: int64(n) * maxBytes}) // push: every slot fits
		bufs := deviceBuffers(b, g, n, maxBytes, func(x *cuda.Ctx, r int, in cuda.Ptr) error {
			host := randomInputs(1, maxBytes/4, uint64(r), false)[0] // finite, also as bf16 pairs
			if err := cuda.Upload(x, in, host); err != nil {
				return err
			}
			return x.Synchronize()
		})
		for _, t := range v.types {
			for bytes := int64(512); bytes <= maxBytes; bytes *= 2 {
				b.Run(fmt.Sprintf("%s/%v/%dB", v.name, t, bytes), func(b *testing.B) {
					meds := make([]float64, n)
					testrank.NoErrors(b, testrank.Each(n, func(r int) error {
						c := g.Comm(r)
						return c.Device().Do(func(x *cuda.Ctx) error {
							us, err := timeCalls(x, c, b.N, func() error {
								in := bufs[r][0]
								if v.registered {
									in = c.NextInput(bytes/t.Size(), t)
								}
								return c.AllReduceDevice(x, c.Stream(), bufs[r][1], in, bytes/t.Size(), t)
							})
							meds[r] = us
							return err
						})
					}))
					reportBusBW(b, meds, float64(2*(n-1))/float64(n), bytes)
				})
			}
		}
	}
}

// BenchmarkGPUReduceScatterAllGather times the device-resident reduce-scatter and all-gather (f32; bytes is
// the whole message, Size()·count·4) as BenchmarkGPUAllReduce times the all-reduce.
func BenchmarkGPUReduceScatterAllGather(b *testing.B) {
	n := gpuRanks()
	const maxBytes = 64 << 20
	g := openGPUGroupOrSkip(b, n, GPUConfig{})
	bufs := deviceBuffers(b, g, n, maxBytes, func(x *cuda.Ctx, r int, in cuda.Ptr) error {
		return x.Memset8(in, 0x3C, maxBytes) // finite values (0x3C3C3C3C ≈ 0.0115)
	})
	for _, op := range []string{"reducescatter", "allgather"} {
		for _, bytes := range []int64{4 << 10, 1 << 20, 8 << 20, 64 << 20} {
			b.Run(fmt.Sprintf("%s/f32/%dB", op, bytes), func(b *testing.B) {
				count := bytes / 4 / int64(n)
				meds := make([]float64, n)
				testrank.NoErrors(b, testrank.Each(n, func(r int) error {
					c := g.Comm(r)
					return c.Device().Do(func(x *cuda.Ctx) error {
						us, err := timeCalls(x, c, b.N, func() error {
							if op == "allgather" {
								return c.AllGatherDevice(x, c.Stream(), bufs[r][1], bufs[r][0], count, ElemF32)
							}
							return c.ReduceScatterDevice(x, c.Stream(), bufs[r][1], bufs[r][0], count, ElemF32)
						})
						meds[r] = us
						return err
					})
				}))
				reportBusBW(b, meds, float64(n-1)/float64(n), bytes)
			})
		}
	}
}

// BenchmarkGPULaunchFloor times an empty kernel (one block of 512 threads) the way the collectives are
// timed: the part of their latency that is launch and event overhead, not communication.
func BenchmarkGPULaunchFloor(b *testing.B) {
	const nopPTX = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry nop()\n{\n\tret;\n}\n"
	g := openGPUGroupOrSkip(b, 1, GPUConfig{})
	c := g.Comm(0)
	var us float64
	err := c.Device().Do(func(x *cuda.Ctx) error {
		m, err := x.LoadModule([]byte(nopPTX))
		if err != nil {
			return err
		}
		defer m.Unload(x)
		f, err := x.Function(m, "nop")
		if err != nil {
			return err
		}
		us, err = timeCalls(x, c, b.N, func() error {
			return x.LaunchRaw(f, cuda.Dim3{X: 1}, cuda.Dim3{X: gpuThreads}, 0, c.Stream(), nil)
		})
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(us, "median-µs")
}

// timeCalls runs 5 warm-up calls, then calls times with an event pair around each, and returns the median µs.
func timeCalls(x *cuda.Ctx, c *GPUComm, calls int, call func() error) (float64, error) {
	s := c.Stream()
	for i := 0; i < 5; i++ {
		if err := call(); err != nil {
			return 0, err
		}
	}
	evs := make([]*cuda.Event, 2*calls)
	for i := range evs {
		e, err := x.NewEvent()
		if err != nil {
			return 0, err
		}
		defer x.DestroyEvent(e)
		evs[i] = e
	}
	for i := 0; i < calls; i++ {
		if err := x.Record(evs[2*i], s); err != nil {
			return 0, err
		}
		if err := call(); err != nil {
			return 0, err
		}
		if err := x.Record(evs[2*i+1], s); err != nil {
			return 0, err
		}
	}
	if err := c.Wait(x, s); err != nil {
		return 0, err
	}
	us := make([]float64, calls)
	for i := range us {
		ms, err := x.Elapsed(evs[2*i], evs[2*i+1])
		if err != nil {
			return 0, err
		}
		us[i] = float64(ms) * 1e3
	}
	sort.Float64s(us)
	return us[calls/2], nil
}
