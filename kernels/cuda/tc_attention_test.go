package cudakernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"bitalign/cuda"
	"bitalign/kernels"
)

// tcAttCase is one attention of the tc sweeps: T queries at positions p0 … p0+T−1 over a cache of S ≥ p0+T
// positions (positions past the last query hold values no query may read), nh query heads over nkv kv heads;
// special plants NaN/Inf/±0 (tcAttSpecials).
type tcAttCase struct {
	T, S, p0, nh, nkv, hd int
	special               bool
}

func (c tcAttCase) String() string {
	return fmt.Sprintf("T=%d S=%d pos=%d… nh=%d nkv=%d hd=%d special=%v", c.T, c.S, c.p0, c.nh, c.nkv, c.hd, c.special)
}

// data returns the case's q, k and v caches (bf16 values) and positions.
func (c tcAttCase) data(r *rand.Rand) (q, kc, vc []float32, pos []int32) {
	q = tcData(r, c.T*c.nh*c.hd, 1, false)
	kc, vc = tcData(r, c.S*c.nkv*c.hd, 1, false), tcData(r, c.S*c.nkv*c.hd, 1, false)
	pos = make([]int32, c.T)
	for i := range pos {
		pos[i] = int32(c.p0 + i)
	}
	if c.special {
		tcAttSpecials(r, q, kc, vc, c)
	}
	return q, kc, vc, pos
}

// tcAttSpecials plants: keys equal to the one before them (equal scores: the first one counts), zero query
// heads (all scores ±0), NaN in kv head 0's keys (when there are several kv heads): at the first key of a
// 64-key block and at a later key; NaN and ±Inf in the last kv head's v rows that the later queries of the
// case read and the earlier ones must not (a key past a query's position is +0 in both p and v for it, tc.3);
// NaN in the last kv head's v at the first key of the last 64-key block (the rows of a warp before it take no
// part in that block: their acc must stay as it was); NaN and Inf in every kv head's k and v rows past the last
// query's position (no query reads them); and −0 in v.
func tcAttSpecials(r *rand.Rand, q, kc, vc []float32, c tcAttCase) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	vrow := func(j, g int) []float32 { return vc[(j*c.nkv+g)*c.hd : (j*c.nkv+g+1)*c.hd] }
	krow := func(j, g int) []float32 { return kc[(j*c.nkv+g)*c.hd : (j*c.nkv+g+1)*c.hd] }
	last := c.p0 + c.T - 1
	for j := 1; j <= last; j += 3 {
		for g := 0; g < c.nkv; g++ {
			copy(krow(j, g), krow(j-1, g))
		}
	}
	for t := 0; t < c.T; t += 2 {
		h := r.IntN(c.nh)
		clear(q[(t*c.nh+h)*c.hd : (t*c.nh+h+1)*c.hd])
	}
	if c.nkv > 1 {
		if last >= 64 {
			krow(64, 0)[0] = nan
		}
		if last >= 5 {
			krow(5, 0)[c.hd-1] = nan
		}
	}
	if c.T > 2 { // read by the later queries only
		j := c.p0 + c.T/2
		vrow(j, c.nkv-1)[r.IntN(c.hd)] = nan
		vrow(j+1, c.nkv-1)[r.IntN(c.hd)] = -inf
		vrow(last, c.nkv-1)[0] = inf
	}
	if b := last / 64 * 64; b > c.p0 && b > 0 { // the first key of the last block: the rows of a warp before it take no part in it
		vrow(b, c.nkv-1)[1] = nan
	}
	for j := last + 1; j < c.S; j++ { // read by no query
		for g := 0; g < c.nkv; g++ {
			vrow(j, g)[r.IntN(c.hd)] = []float32{nan, inf, -inf}[r.IntN(3)]
			krow(j, g)[r.IntN(c.hd)] = nan
		}
	}
	for i := 0; i < 1+len(vc)/500; i++ {
		vc[r.IntN(len(vc))] = float32(math.Copysign(0, -1))
	}
}

// tcAttWant is kernels.AttentionTC's output for the case.
func tcAttWant(t testing.TB, dt kernels.DType, c tcAttCase, q, kc, vc []float32, pos []int32) []float32 {
	t.Helper()
	want := make([]float32, len(q))
	if err := kernels.AttentionTC(dt, want, q, kc, vc, pos, c.T, c.S, c.nh, c.nkv, c.hd, kernels.AttentionScale(c.hd)); err != nil {
		t.Fatal(err)
	}
	return want
}

// TestTCAttentionMatchesSource: tc_attention.go's copies of tc_attention.cu's constants and entries are the
// source's.
func TestTCAttentionMatchesSource(t *testing.T) {
	src, err := os.ReadFile("tc/tc_attention.cu")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{"TC_ATT_WARPS": tcAttWarps, "TC_ATT_ELD": tcAttELD, "TC_ATT_KB": kernels.AttentionBlock,
		"TC_ATT_CH": kernels.AttentionTCChunk} {
		m := regexp.MustCompile(`(?m)^#define ` + name + ` (\d+)`).FindSubmatch(src)
		if m == nil {
			t.Errorf("tc_attention.cu defines no %s", name)
			continue
		}
		if got, _ := strconv.Atoi(string(m[1])); got != want {
			t.Errorf("tc_attention.cu: %s is %d, tc_attention.go says %d", name, got, want)
		}
	}
	for macro, want := range map[string][]int{"TC_ATT_ENTRY": tcAttHeadDims, "TC_ATT_DEC_ENTRY": tcAttDecHeadDims} {
		var dims []int
		for _, m := range regexp.MustCompile(`(?m)^`+macro+`\((\d+)\)$`).FindAllSubmatch(src, -1) {
			d, _ := strconv.Atoi(string(m[1]))
			dims = append(dims, d)
		}
		if fmt.Sprint(dims) != fmt.Sprint(want) {
			t.Errorf("tc_attention.cu's %s instantiates head dims %v, tc_attention.go says %v", macro, dims, want)
		}
	}
	if m := regexp.MustCompile(`__launch_bounds__\((\d+)\) tc_attn_merge\(`).FindSubmatch(src); m == nil || string(m[1]) != strconv.Itoa(tcAttMergeThreads) {
		t.Errorf("tc_attention.cu's tc_attn_merge is not launched with tcAttMergeThreads = %d threads", tcAttMergeThreads)
	}
	for _, hd := range tcAttHeadDims {
		if b := tcAttSmem(hd); b > 232448-1024 {
			t.Errorf("tc_attn_hd%d needs %d bytes of shared memory, over the 227 KB limit", hd, b)
		}
	}
}

// TestTCAttentionSimulated runs tc/tc_attention.cu on the CPU (tc/sim, as TestTCSimulated: the source unchanged
// but for its PTX wrappers, every thread a std::thread, ldmatrix, mma.sync and the shuffles exchanged across
// the lanes, the k-step as tc.1's model) through planTCAttention's launches and compares every output bitwise
// with kernels.AttentionTC: prefill, a chunk at positions not starting at 0, decode, GQA ratios 1, 2, 7, hd 64
// and 128, partial last blocks, NaN/Inf in v rows that some queries must not read. BITALIGN_TC_SIM=full adds
// larger cases.
func TestTCAttentionSimulated(t *testing.T) {
	sim := buildTCSim(t)
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(170, 171))
	// Every simulated thread is an OS thread (256 a block): by default (CI) the cases that reach every path
	// (both head dims, GQA packing, the chunk, decode past the last query, the per-row masked step, rows of a
	// warp on both sides of a block); BITALIGN_TC_SIM=full adds more.
	cases := []tcAttCase{
		{T: 5, S: 5, nh: 4, nkv: 2, hd: 64},
		{T: 20, S: 150, p0: 130, nh: 8, nkv: 2, hd: 128},
		{T: 1, S: 200, p0: 150, nh: 28, nkv: 4, hd: 128, special: true},
		{T: 30, S: 201, p0: 171, nh: 16, nkv: 2, hd: 64, special: true}, // warps with rows on both sides of key 192
		{T: 3, S: 200, p0: 190, nh: 8, nkv: 2, hd: 64, special: true},   // 12 rows (decode kernel), ends on both sides of 192
		{T: 2, S: 130, p0: 127, nh: 16, nkv: 2, hd: 128, special: true}, // 16 rows, positions 127 and 128
		{T: 9, S: 80, p0: 60, nh: 4, nkv: 2, hd: 16, special: true},     // the engine's test models' head dims
		{T: 7, S: 70, p0: 60, nh: 6, nkv: 3, hd: 32, special: true},
		{T: 2, S: 600, p0: 598, nh: 8, nkv: 2, hd: 64, special: true},   // decode over three chunks: tc_attn_merge
		{T: 20, S: 290, p0: 250, nh: 4, nkv: 1, hd: 128, special: true}, // a warp's rows on both sides of chunk 1's start
	}
	if os.Getenv("BITALIGN_TC_SIM") == "full" {
		cases = append(cases, tcAttCase{T: 70, S: 70, nh: 7, nkv: 1, hd: 64, special: true},
			tcAttCase{T: 70, S: 201, p0: 131, nh: 16, nkv: 2, hd: 128, special: true},
			tcAttCase{T: 33, S: 40, nh: 2, nkv: 2, hd: 64, special: true},
			tcAttCase{T: 130, S: 260, p0: 100, nh: 4, nkv: 1, hd: 128, special: true},
			tcAttCase{T: 3, S: 700, p0: 640, nh: 32, nkv: 8, hd: 64, special: true})
	}
	write := func(name string, v any) string { return simFile(t, dir, name, v) }
	runs, merges := 0, 0
	for i, c := range cases {
		dt := kernels.BF16
		if i%2 == 1 {
			dt = kernels.F32
		}
		q, kc, vc, pos := c.data(r)
		want := tcAttWant(t, dt, c, q, kc, vc, pos)
		poison := make([]float32, len(q))
		for i := range poison {
			poison[i] = math.Float32frombits(0x7FBADBAD)
		}
		// decode: tc_attn_dec_hd<hd> (and its merge), and tc_attn_hd<hd> on the same rows; each also over a bf16
		// cache (kv16, on alternate cases: every simulated launch costs seconds)
		var plans []tcAttPlan
		for _, kv16 := range []bool{false, true} {
			if kv16 && i%2 == 0 && c.S <= 512 {
				continue
			}
			plans = append(plans, planTCAttention(c.T, c.S, c.nh, c.nkv, c.hd, false, kv16))
			if p := planTCAttention(c.T, c.S, c.nh, c.nkv, c.hd, true, kv16); p.Kernel != plans[len(plans)-1].Kernel {
				plans = append(plans, p)
			}
		}
		qf, kf, vf, pf := write("q.bin", q), write("k.bin", kc), write("v.bin", vc), write("pos.bin", pos)
		kf16, vf16 := write("k16.bin", bf16Bits(kc)), write("v16.bin", bf16Bits(vc))
		for _, l := range plans {
			of := write("out.bin", poison)
			kfl, vfl := kf, vf
			if strings.Contains(l.Kernel, "_kv16_") {
				kfl, vfl = kf16, vf16
			}
			args := []string{l.Kernel, itoa(l.Grid.X), itoa(l.Grid.Y), itoa(l.Block.X), itoa(l.Smem),
				itoa(c.T), itoa(c.S), itoa(c.nh), itoa(c.nkv), strconv.FormatUint(uint64(math.Float32bits(kernels.AttentionScale(c.hd))), 10),
				itoa(DTCode(dt)), qf, kfl, vfl, pf, of}
			if l.Merge.Kernel != "" {
				args = append(args, itoa(l.Merge.Grid.X), itoa(l.Merge.Block.X))
				merges++
			}
			simRun(t, sim, args)
			raw, err := os.ReadFile(of)
			if err != nil || len(raw) != 4*len(q) {
				t.Fatalf("%v: out.bin: %v (%d bytes)", c, err, len(raw))
			}
			got := make([]float32, len(q))
			for i := range got {
				got[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			}
			if !same(t, fmt.Sprintf("%v dt=%v (%s, grid %v)", c, dt, l.Kernel, l.Grid), got, want) {
				t.FailNow()
			}
			runs++
		}
		if c.special && c.T > 2 {
			if n, of := c.lastGroupNaN(want); n == 0 || n == of {
				t.Errorf("%v: %d of the last kv head's %d outputs NaN: the case does not test what it says", c, n, of)
			}
		}
	}
	if merges == 0 {
		t.Error("no case split its keys over chunks (tc_attn_merge never ran)")
	}
	t.Logf("%d simulated launches (%d attentions, %d with tc_attn_merge) bitwise equal to kernels.AttentionTC", runs, len(cases), merges)
}

// TestTCAttentionBatchSimulated runs tc_attention.cu's batched entries on the CPU (tc/sim) through
// planTCAttentionBatch's launches: one launch over sequences of different lengths, positions and caches (a
// prefill, a chunk at later positions, a decode step, one that needs more blocks than the others: those leave)
// gives every sequence's kernels.AttentionTC bits, bitwise; decode batches (every sequence's rows ≤ 16) take
// tc_attn_dec_batch_hd<hd>, and the same batch forced to the main kernel gives the same bits.
func TestTCAttentionBatchSimulated(t *testing.T) {
	sim := buildTCSim(t)
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(172, 173))
	merges := 0
	batches := [][]tcAttCase{
		{{T: 5, S: 5, nh: 8, nkv: 2, hd: 64}, {T: 20, S: 150, p0: 130, nh: 8, nkv: 2, hd: 64, special: true},
			{T: 1, S: 70, p0: 69, nh: 8, nkv: 2, hd: 64}, {T: 40, S: 40, nh: 8, nkv: 2, hd: 64}},
		{{T: 1, S: 130, p0: 129, nh: 16, nkv: 2, hd: 128, special: true}, {T: 2, S: 200, p0: 198, nh: 16, nkv: 2, hd: 128},
			{T: 1, S: 64, p0: 63, nh: 16, nkv: 2, hd: 128}, {T: 1, S: 530, p0: 529, nh: 16, nkv: 2, hd: 128, special: true}},
		{{T: 9, S: 80, p0: 71, nh: 4, nkv: 2, hd: 16, special: true}, {T: 3, S: 3, nh: 4, nkv: 2, hd: 16}},
	}
	runs := 0
	for bi, b := range batches {
		dt := kernels.BF16
		if bi%2 == 1 {
			dt = kernels.F32
		}
		c0 := b[0]
		var args, args16, outs []string
		var wants [][]float32
		var Ts, Ss []int
		for i, c := range b {
			q, kc, vc, pos := c.data(r)
			wants = append(wants, tcAttWant(t, dt, c, q, kc, vc, pos))
			poison := make([]float32, len(q))
			for j := range poison {
				poison[j] = math.Float32frombits(0x7FBADBAD)
			}
			f := func(name string, v any) string { return simFile(t, dir, fmt.Sprintf("%d-%d-%s", bi, i, name), v) }
			of := f("out.bin", poison)
			outs = append(outs, of)
			args = append(args, itoa(c.T), itoa(c.S), f("q.bin", q), f("k.bin", kc), f("v.bin", vc), f("pos.bin", pos), of)
			args16 = append(args16, itoa(c.T), itoa(c.S), f("q.bin", q), f("k16.bin", bf16Bits(kc)), f("v16.bin", bf16Bits(vc)), f("pos.bin", pos), of)
			Ts, Ss = append(Ts, c.T), append(Ss, c.S)
		}
		plans := []tcAttPlan{planTCAttentionBatch(Ts, Ss, c0.nh, c0.nkv, c0.hd, false, false)}
		if p := planTCAttentionBatch(Ts, Ss, c0.nh, c0.nkv, c0.hd, true, false); p.Kernel != plans[0].Kernel {
			plans = append(plans, p)
		}
		plans = append(plans, planTCAttentionBatch(Ts, Ss, c0.nh, c0.nkv, c0.hd, false, true)) // over bf16 caches
		if bi == 1 && !strings.HasPrefix(plans[0].Kernel, "tc_attn_dec_batch_hd") {
			t.Fatalf("a decode batch planned as %v", plans[0])
		}
		for _, l := range plans {
			if l.Grid.Z != len(b) {
				t.Fatalf("%v: grid z %d for %d sequences", l, l.Grid.Z, len(b))
			}
			// fresh poisoned outputs for each plan: one that writes nothing fails
			for i, of := range outs {
				poison := make([]float32, len(wants[i]))
				for j := range poison {
					poison[j] = math.Float32frombits(0x7FBADBAD)
				}
				simFile(t, dir, filepath.Base(of), poison)
			}
			sargs := append([]string{l.Kernel, itoa(l.Grid.X), itoa(l.Grid.Y), itoa(l.Grid.Z), itoa(l.Block.X), itoa(l.Smem),
				itoa(c0.nh), itoa(c0.nkv), strconv.FormatUint(uint64(math.Float32bits(kernels.AttentionScale(c0.hd))), 10),
				itoa(DTCode(dt))}, args...)
			if strings.Contains(l.Kernel, "_kv16_") {
				sargs = append(sargs[:10], args16...)
			}
			if l.Merge.Kernel != "" {
				sargs = append(sargs, itoa(l.Merge.Grid.X), itoa(l.Merge.Block.X))
				merges++
			}
			simRun(t, sim, sargs)
			for i, of := range outs {
				raw, err := os.ReadFile(of)
				if err != nil || len(raw) != 4*len(wants[i]) {
					t.Fatalf("%v: %s: %v (%d bytes)", b[i], of, err, len(raw))
				}
				got := make([]float32, len(wants[i]))
				for j := range got {
					got[j] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*j:]))
				}
				if !same(t, fmt.Sprintf("batch %d sequence %d %v dt=%v (%s, grid %v)", bi, i, b[i], dt, l.Kernel, l.Grid), got, wants[i]) {
					t.FailNow()
				}
			}
			runs++
		}
	}
	if merges == 0 {
		t.Error("no decode batch split its keys over chunks (tc_attn_merge_batch never ran)")
	}
	t.Logf("%d simulated batched launches (%d with tc_attn_merge_batch) bitwise equal to kernels.AttentionTC per sequence", runs, merges)
}

// TestTCAttSeqWords: the descriptor table's layout is tc_attention.cu's TcAttSeq (five pointers, then T and S as
// int32: 48 bytes), which TestTCAttentionBatchSimulated's launcher builds from the same struct in C++.
func TestTCAttSeqWords(t *testing.T) {
	w := TCAttSeqWords([]TCAttSeq{{Out: 1, Q: 2, K: 3, V: 4, Pos: 5, T: 6, S: 7}, {Out: 8, T: 1, S: 1 << 20}})
	want := []uint64{1, 2, 3, 4, 5, 6 | 7<<32, 8, 0, 0, 0, 0, 1 | (1<<20)<<32}
	if !slices.Equal(w, want) {
		t.Fatalf("TCAttSeqWords = %x, want %x", w, want)
	}
	src, err := os.ReadFile("tc/tc_attention.cu")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), "struct TcAttSeq {\n    float* out;\n    const float* q;\n    const float* k;\n    const float* v;\n    const int* pos;\n    int T, S;\n};") {
		t.Fatal("tc/tc_attention.cu's TcAttSeq is not the layout TCAttSeqWords writes (five pointers, then int T, S)")
	}
}

// lastGroupNaN counts the NaN outputs of the heads that read the last kv head (where tcAttSpecials plants v's
// NaNs), of how many.
func (c tcAttCase) lastGroupNaN(out []float32) (n, of int) {
	grp := c.nh / c.nkv
	for t := 0; t < c.T; t++ {
		for h := (c.nkv - 1) * grp; h < c.nh; h++ {
			for _, x := range out[(t*c.nh+h)*c.hd : (t*c.nh+h+1)*c.hd] {
				if x != x {
					n++
				}
				of++
			}
		}
	}
	return n, of
}

// tcAttGPU opens the GPU and skips (fails with BITALIGN_REQUIRE_TC=1) without tc_attention's PTX.
func tcAttGPU(t testing.TB) *gpu {
	g := openGPU(t)
	if err := g.k.HasTCAttention(); err != nil {
		if os.Getenv(requireTCEnv) == "1" {
			t.Fatalf("%s=1 but: %v", requireTCEnv, err)
		}
		t.Skipf("tc attention not loaded (%s=1 makes this a failure): %v; skipped, not passed", requireTCEnv, err)
	}
	return g
}

// tcAttSweep is the GPU sweep: prefill, chunks at positions not starting at 0, decode from a longer cache, GQA
// ratios 1, 7 and 8, hd 64 and 128, partial last blocks, with and without planted specials.
func tcAttSweep() []tcAttCase {
	var cs []tcAttCase
	for _, h := range [][2]int{{28, 4}, {32, 8}, {4, 4}, {7, 1}} {
		for _, hd := range []int{64, 128} {
			for _, tp := range [][3]int{{1, 1, 0}, {5, 5, 0}, {64, 64, 0}, {65, 65, 0}, {333, 333, 0}, {17, 300, 200},
				{64, 1000, 900}, {1, 777, 700}, {1, 2049, 2048}, {130, 200, 63}} {
				for _, sp := range []bool{false, true} {
					cs = append(cs, tcAttCase{T: tp[0], S: tp[1], p0: tp[2], nh: h[0], nkv: h[1], hd: hd, special: sp})
				}
			}
		}
	}
	for _, hd := range []int{16, 32, 80, 96} { // the other instantiated head dims, fewer shapes
		for _, tp := range [][3]int{{1, 1, 0}, {65, 65, 0}, {17, 300, 200}, {1, 777, 700}} {
			cs = append(cs, tcAttCase{T: tp[0], S: tp[1], p0: tp[2], nh: 12, nkv: 4, hd: hd, special: tp[0] > 2})
		}
	}
	return cs
}

// TestAttentionTCBitwise: tc attention on the GPU against kernels.AttentionTC over the sweep, bitwise, bf16 and
// f32 outputs.
func TestAttentionTCBitwise(t *testing.T) {
	g := tcAttGPU(t)
	r := newRand(t)
	type job struct {
		c               tcAttCase
		dt              kernels.DType
		q, kc, vc, want []float32
		pos             []int32
	}
	cases := tcAttSweep()
	jobs := make([]job, len(cases))
	for i, c := range cases {
		dt := kernels.BF16
		if i%3 == 2 {
			dt = kernels.F32
		}
		q, kc, vc, pos := c.data(r)
		jobs[i] = job{c: c, dt: dt, q: q, kc: kc, vc: vc, pos: pos}
	}
	// the CPU references on every core (kernels.AttentionTC runs one goroutine), then the GPU in order
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < runtime.GOMAXPROCS(0); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				j := &jobs[i]
				j.want = make([]float32, len(j.q))
				if err := kernels.AttentionTC(j.dt, j.want, j.q, j.kc, j.vc, j.pos, j.c.T, j.c.S, j.c.nh, j.c.nkv, j.c.hd,
					kernels.AttentionScale(j.c.hd)); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, j := range jobs {
		c := j.c
		d := &dev{g: g}
		dq, dk, dv, dp := d.f32(t, j.q), d.f32(t, j.kc), d.f32(t, j.vc), d.i32(t, j.pos)
		dk16, dv16 := upload(t, d, bf16Bits(j.kc)), upload(t, d, bf16Bits(j.vc))
		for _, kv16 := range []bool{false, true} {
			for _, main := range []bool{false, true} {
				l := planTCAttention(c.T, c.S, c.nh, c.nkv, c.hd, main, kv16)
				if main && l.Kernel == planTCAttention(c.T, c.S, c.nh, c.nkv, c.hd, false, kv16).Kernel {
					continue
				}
				out := d.poisoned(t, len(j.q))
				d.run(t, func(cx *cuda.Ctx, k *Kernels) error {
					k.tcAttMain = main
					defer func() { k.tcAttMain = false }()
					if kv16 {
						return k.AttentionTCKV16(cx, j.dt, out, dq, dk16, dv16, dp, c.T, c.S, c.nh, c.nkv, c.hd, kernels.AttentionScale(c.hd))
					}
					return k.AttentionForward(cx, kernels.TC, j.dt, out, dq, dk, dv, dp, c.T, c.S, c.nh, c.nkv, c.hd, kernels.AttentionScale(c.hd))
				})
				same(t, fmt.Sprintf("%v dt=%v (%s)", c, j.dt, l.Kernel), d.get(t, out, len(j.q)), j.want)
			}
		}
		d.free()
	}
	t.Logf("%d attentions compared with kernels.AttentionTC", len(jobs))
}

// TestAttentionTCBatch: on the GPU, AttentionTCBatch over sequences of different lengths, positions and caches
// (prefill of the engine's 4 × 256 shape, chunks, decode batches of 8 and 64 with caches of different lengths,
// hd 64 and 128, planted specials) gives every sequence kernels.AttentionTC's bits, through the batched main
// kernel and (decode batches) the batched decode kernel and the main one forced.
func TestAttentionTCBatch(t *testing.T) {
	g := tcAttGPU(t)
	if err := g.k.HasTCAttentionBatch(128); err != nil {
		t.Fatal(err) // the committed PTX has the batched entries
	}
	r := newRand(t)
	var batches [][]tcAttCase
	pre := []tcAttCase{}
	for i := 0; i < 4; i++ {
		pre = append(pre, tcAttCase{T: 256, S: 256, nh: 12, nkv: 2, hd: 128, special: i == 3})
	}
	batches = append(batches, pre, []tcAttCase{{T: 300, S: 300, nh: 8, nkv: 2, hd: 64}, {T: 17, S: 217, p0: 200, nh: 8, nkv: 2, hd: 64, special: true},
		{T: 1, S: 90, p0: 89, nh: 8, nkv: 2, hd: 64}})
	for _, B := range []int{8, 64} {
		var dec []tcAttCase
		for i := 0; i < B; i++ {
			S := 64 + 37*i
			dec = append(dec, tcAttCase{T: 1, S: S, p0: S - 1, nh: 28, nkv: 4, hd: 128, special: i%5 == 1})
		}
		batches = append(batches, dec)
	}
	for bi, b := range batches {
		dt := kernels.BF16
		if bi%2 == 1 {
			dt = kernels.F32
		}
		c0 := b[0]
		d := &dev{g: g}
		var seqs, seqs16 []TCAttSeq
		var wants [][]float32
		var Ts, Ss []int
		for _, c := range b {
			q, kc, vc, pos := c.data(r)
			want := make([]float32, len(q))
			if err := kernels.AttentionTC(dt, want, q, kc, vc, pos, c.T, c.S, c.nh, c.nkv, c.hd, kernels.AttentionScale(c.hd)); err != nil {
				t.Fatal(err)
			}
			wants = append(wants, want)
			seqs = append(seqs, TCAttSeq{Q: d.f32(t, q), K: d.f32(t, kc), V: d.f32(t, vc), Pos: d.i32(t, pos), T: c.T, S: c.S})
			s16 := seqs[len(seqs)-1]
			s16.K, s16.V = upload(t, d, bf16Bits(kc)), upload(t, d, bf16Bits(vc))
			seqs16 = append(seqs16, s16)
			Ts, Ss = append(Ts, c.T), append(Ss, c.S)
		}
		for _, run := range []struct{ main, kv16 bool }{{false, false}, {true, false}, {false, true}} {
			main := run.main
			l := planTCAttentionBatch(Ts, Ss, c0.nh, c0.nkv, c0.hd, main, run.kv16)
			if main && l.Kernel == planTCAttentionBatch(Ts, Ss, c0.nh, c0.nkv, c0.hd, false, false).Kernel {
				continue
			}
			seqs := seqs
			if run.kv16 {
				seqs = seqs16
			}
			for i := range seqs { // fresh poisoned outputs for each kernel: one that writes nothing fails
				seqs[i].Out = d.poisoned(t, len(wants[i]))
			}
			desc := upload(t, d, TCAttSeqWords(seqs))
			d.run(t, func(cx *cuda.Ctx, k *Kernels) error {
				k.tcAttMain = main
				defer func() { k.tcAttMain = false }()
				if run.kv16 {
					return k.AttentionTCBatchKV16(cx, dt, desc, seqs, c0.nh, c0.nkv, c0.hd, kernels.AttentionScale(c0.hd))
				}
				return k.AttentionTCBatch(cx, dt, desc, seqs, c0.nh, c0.nkv, c0.hd, kernels.AttentionScale(c0.hd))
			})
			for i, sq := range seqs {
				if !same(t, fmt.Sprintf("batch %d of %d, sequence %d %v dt=%v (%s)", bi, len(b), i, b[i], dt, l.Kernel), d.get(t, sq.Out, len(wants[i])), wants[i]) {
					break
				}
			}
		}
		d.free()
	}
}

// TestAttentionTCInvariance: on the GPU, a query's row is the same whether it is computed in a full prefill, in
// a chunk of any size at any offset (chunked prefill; the chunk's tile mates differ), or alone (decode): the
// batch's composition never changes a bit. The standard profile runs the same comparison as the control and
// must differ somewhere (else this test could not fail).
func TestAttentionTCInvariance(t *testing.T) {
	g := tcAttGPU(t)
	r := newRand(t)
	for _, c := range []tcAttCase{{T: 600, S: 600, nh: 28, nkv: 4, hd: 128}, {T: 333, S: 333, nh: 32, nkv: 8, hd: 64},
		{T: 200, S: 200, nh: 7, nkv: 1, hd: 128, special: true}} {
		q, kc, vc, pos := c.data(r)
		d := &dev{g: g}
		dq, dk, dv, dp := d.f32(t, q), d.f32(t, kc), d.f32(t, vc), d.i32(t, pos)
		row := c.nh * c.hd
		run := func(p kernels.Profile, t0, n int) []float32 {
			out := d.poisoned(t, n*row)
			d.run(t, func(cx *cuda.Ctx, k *Kernels) error {
				return k.AttentionForward(cx, p, kernels.BF16, out, dq.Add(int64(4*t0*row)), dk, dv, dp.Add(int64(4*t0)), n, c.S,
					c.nh, c.nkv, c.hd, kernels.AttentionScale(c.hd))
			})
			return d.get(t, out, n*row)
		}
		for _, p := range []kernels.Profile{kernels.TC, kernels.Standard} {
			full := run(p, 0, c.T)
			differs := false
			for _, ch := range [][2]int{{0, 1}, {1, 5}, {63, 2}, {64, 64}, {100, 37}, {c.T - 1, 1}, {c.T - 9, 9}, {7, c.T - 7}} {
				got := run(p, ch[0], ch[1])
				what := fmt.Sprintf("%v %v: queries %d…%d alone vs in the full prefill", p, c, ch[0], ch[0]+ch[1]-1)
				if p == kernels.TC {
					same(t, what, got, full[ch[0]*row:(ch[0]+ch[1])*row])
				} else if _, _, bad := kernels.FirstDiff(got, full[ch[0]*row:(ch[0]+ch[1])*row]); bad {
					differs = true
				}
			}
			if p == kernels.Standard && !differs {
				t.Logf("%v: the standard profile gave the same bits for every chunk here (the control did not fire)", c)
			}
		}
		d.free()
	}
}

// TestAttentionTCAccuracy: tc attention against a float64 reference (exact scores and probabilities from the
// same bf16 q, k, v): every output within 2^-6 relative to the row's largest |out| (the bf16 probabilities'
// rounding, the k-steps' truncation and the bf16 output), and the median error a fraction of that.
func TestAttentionTCAccuracy(t *testing.T) {
	g := tcAttGPU(t)
	r := newRand(t)
	c := tcAttCase{T: 300, S: 1300, p0: 1000, nh: 28, nkv: 4, hd: 128}
	q, kc, vc, pos := c.data(r)
	d := &dev{g: g}
	defer d.free()
	out, dq, dk, dv, dp := d.poisoned(t, len(q)), d.f32(t, q), d.f32(t, kc), d.f32(t, vc), d.i32(t, pos)
	scale := kernels.AttentionScale(c.hd)
	d.run(t, func(cx *cuda.Ctx, k *Kernels) error {
		return k.AttentionForward(cx, kernels.TC, kernels.F32, out, dq, dk, dv, dp, c.T, c.S, c.nh, c.nkv, c.hd, scale)
	})
	got := d.get(t, out, len(q))
	worst := 0.0
	grp := c.nh / c.nkv
	for ti := 0; ti < c.T; ti++ {
		P := int(pos[ti])
		for h := 0; h < c.nh; h++ {
			gi := h / grp
			qv := q[(ti*c.nh+h)*c.hd : (ti*c.nh+h+1)*c.hd]
			s := make([]float64, P+1)
			mx := math.Inf(-1)
			for j := 0; j <= P; j++ {
				kv := kc[(j*c.nkv+gi)*c.hd:]
				for i := 0; i < c.hd; i++ {
					s[j] += float64(qv[i]) * float64(kv[i])
				}
				s[j] *= float64(scale)
				mx = math.Max(mx, s[j])
			}
			sum := 0.0
			ref := make([]float64, c.hd)
			for j := 0; j <= P; j++ {
				e := math.Exp(s[j] - mx)
				sum += e
				vv := vc[(j*c.nkv+gi)*c.hd:]
				for i := range ref {
					ref[i] += e * float64(vv[i])
				}
			}
			big := 0.0
			for i := range ref {
				ref[i] /= sum
				big = math.Max(big, math.Abs(ref[i]))
			}
			for i := range ref {
				e := math.Abs(float64(got[(ti*c.nh+h)*c.hd+i])-ref[i]) / big
				if e > worst {
					worst = e
				}
			}
		}
	}
	t.Logf("tc attention vs float64: worst error %.3g of the row's largest |out|", worst)
	if worst > 1.0/64 || worst != worst {
		t.Errorf("tc attention vs float64: worst error %.3g of the row's largest |out|, bound 2^-6", worst)
	}
}

// tcAttBench is one BenchmarkAttentionTC case: B sequences of T queries at the last T positions of an S-key
// cache each (prefill: T = S, B = 1; decode: T = 1, one launch per sequence, as the engine runs a batch).
type tcAttBench struct {
	kind                 string
	nh, nkv, hd, T, S, B int
}

func tcAttBenches() []tcAttBench {
	var bs []tcAttBench
	for _, h := range [][2]int{{28, 4}, {32, 8}} {
		for _, hd := range []int{128, 64} {
			for _, T := range []int{512, 1024, 2048, 4096, 8192} {
				bs = append(bs, tcAttBench{"prefill", h[0], h[1], hd, T, T, 1})
			}
		}
	}
	for _, h := range [][2]int{{28, 4}, {32, 8}} {
		for _, S := range []int{512, 4096, 32768} {
			for _, B := range []int{1, 8, 64} {
				bs = append(bs, tcAttBench{"decode", h[0], h[1], 128, 1, S, B})
			}
		}
	}
	return bs
}

// BenchmarkAttentionTC times tc attention (median of CUDA-event-timed runs after warm-up) at the prefill
// (T = 512…8192, GQA 28/4 and 32/8, hd 128 and 64) and decode shapes (S = 512…32768, batch 1…64: the batch in
// one launch, AttentionTCBatch as the engine runs it, or one launch a sequence with PTX that lacks it), reporting µs, TFLOP/s (causal: 2·2·nh·hd·T·(T+1)/2 per sequence) and the cache bytes read per µs
// (k and v once), over float32 caches and (kind prefill16, decode16) bf16 ones. scripts/tc_bench.py prints it
// beside torch's scaled_dot_product_attention with the flash backend at the same shapes.
func BenchmarkAttentionTC(b *testing.B) {
	g := tcAttGPU(b)
	r := rand.New(rand.NewPCG(7, 8))
	for _, s := range tcAttBenches() {
		d := &dev{g: g}
		q := upload(b, d, tcData(r, s.B*s.T*s.nh*s.hd, 1, false))
		kv := s.S * s.nkv * s.hd
		kc, vc := tcAttCache(b, d, r, s.B*kv), tcAttCache(b, d, r, s.B*kv)
		pos := make([]int32, s.T)
		for i := range pos {
			pos[i] = int32(s.S - s.T + i)
		}
		dp := d.i32(b, pos)
		out := d.poisoned(b, s.B*s.T*s.nh*s.hd)
		scale := kernels.AttentionScale(s.hd)
		row := int64(s.T * s.nh * s.hd * 4)
		var seqs []TCAttSeq // B > 1: the sequences in one launch (the engine's AttentionBatch), when the PTX has it
		if s.B > 1 && g.k.HasTCAttentionBatch(s.hd) == nil {
			for i := 0; i < s.B; i++ {
				seqs = append(seqs, TCAttSeq{Out: out.Add(int64(i) * row), Q: q.Add(int64(i) * row), K: kc.Add(int64(i * kv * 4)),
					V: vc.Add(int64(i * kv * 4)), Pos: dp, T: s.T, S: s.S})
			}
		}
		desc := upload(b, d, TCAttSeqWords(seqs))
		// the same over bf16 caches (AttentionTCKV16: the same bits, half the bytes): kind "prefill16", "decode16"
		kc16, vc16 := tcAttCache(b, d, r, s.B*kv/2), tcAttCache(b, d, r, s.B*kv/2)
		var seqs16 []TCAttSeq
		for i, sq := range seqs {
			sq.K, sq.V = kc16.Add(int64(i*kv*2)), vc16.Add(int64(i*kv*2))
			seqs16 = append(seqs16, sq)
		}
		desc16 := upload(b, d, TCAttSeqWords(seqs16))
		for _, kv16 := range []bool{false, true} {
			kind, esz := s.kind, 4
			if kv16 {
				kind, esz = s.kind+"16", 2
			}
			b.Run(fmt.Sprintf("%s/nh=%d/nkv=%d/hd=%d/T=%d/S=%d/B=%d", kind, s.nh, s.nkv, s.hd, s.T, s.S, s.B), func(b *testing.B) {
				ms := timeGPUMedian(b, g, max(b.N, 10), func(c *cuda.Ctx, _ int) error {
					switch {
					case seqs != nil && kv16:
						return g.k.AttentionTCBatchKV16(c, kernels.BF16, desc16, seqs16, s.nh, s.nkv, s.hd, scale)
					case seqs != nil:
						return g.k.AttentionTCBatch(c, kernels.BF16, desc, seqs, s.nh, s.nkv, s.hd, scale)
					}
					for i := 0; i < s.B; i++ {
						var err error
						if kv16 {
							err = g.k.AttentionTCKV16(c, kernels.BF16, out.Add(int64(i)*row), q.Add(int64(i)*row),
								kc16.Add(int64(i*kv*2)), vc16.Add(int64(i*kv*2)), dp, s.T, s.S, s.nh, s.nkv, s.hd, scale)
						} else {
							err = g.k.AttentionForward(c, kernels.TC, kernels.BF16, out.Add(int64(i)*row), q.Add(int64(i)*row),
								kc.Add(int64(i*kv*4)), vc.Add(int64(i*kv*4)), dp, s.T, s.S, s.nh, s.nkv, s.hd, scale)
						}
						if err != nil {
							return err
						}
					}
					return nil
				})
				flops := float64(s.B) * 4 * float64(s.nh) * float64(s.hd) * float64(s.T) * float64(s.T+1) / 2
				if s.kind == "decode" {
					flops = float64(s.B) * 4 * float64(s.nh) * float64(s.hd) * float64(s.S)
				}
				bytes := float64(s.B) * 2 * float64(esz) * float64(kv)
				b.ReportMetric(ms*1e3, "gpu-us/op")
				b.ReportMetric(flops/(ms*1e-3)/1e12, "TFLOP/s")
				b.ReportMetric(bytes/(ms*1e-3)/1e9, "GB/s")
			})
		}
		d.free()
	}
}

// tcAttCache is a device buffer of n bf16 values for the benchmark: 1M random ones, repeated (doubling copies
// on the device: the timing does not depend on the values, and 64 caches of 32768 positions are 8 GB).
func tcAttCache(b *testing.B, d *dev, r *rand.Rand, n int) cuda.Ptr {
	b.Helper()
	p, err := d.g.d.Alloc(4 * int64(n))
	if err != nil {
		b.Fatal(err)
	}
	d.ptrs = append(d.ptrs, p)
	src := tcData(r, min(n, 1<<20), 1, false)
	if err := cuda.UploadTo(d.g.d, p, src); err != nil {
		b.Fatal(err)
	}
	if err := d.g.d.Do(func(c *cuda.Ctx) error {
		for have := len(src); have < n; have *= 2 {
			if err := c.CopyDtoD(p.Add(4*int64(have)), p, 4*int64(min(have, n-have))); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	return p
}
