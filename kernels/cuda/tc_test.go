package cudakernels

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"bitalign/cuda"
	"bitalign/internal/fp"
	"bitalign/kernels"
)

// tcPathFlag makes BenchmarkMatmulTC time one family of the M > 64 kernels (scripts/gpu.sh tc runs each that
// loaded): tmap, tma, wgmma or mmasync; empty, launch.json's big_order.
var tcPathFlag = flag.String("tc-path", "", "BenchmarkMatmulTC: the tc kernels of M > 64 to time (tmap, tma, wgmma, mmasync; tmapall: tmap at every M; empty: launch.json's big_order)")

// tcBF16Flag makes BenchmarkMatmulTC time MatmulTCBF16 (bf16 output, as cuBLAS's torch.mm writes) instead of
// MatmulTC's float32 output.
var tcBF16Flag = flag.Bool("tc-bf16", false, "BenchmarkMatmulTC: bf16 output (MatmulTCBF16) instead of float32")

// tcBNFlag forces the tmap chain's tile width in BenchmarkMatmulTC (128 or 256; 0: launch.json's rule).
var tcBNFlag = flag.Int("tc-bn", 0, "BenchmarkMatmulTC: the tmap chain's tile width, 128 or 256 (0: the tmap_narrow_cost rule)")

// tcDecFlag, tcCFlag force the decode family (M ≤ dec64_max_m) in BenchmarkMatmulTC and tmd's consumer warps a
// block (scripts/gpu.sh tc times mma and tmd side by side, TCDECC sweeps C).
var tcDecFlag = flag.String("tc-dec", "", "BenchmarkMatmulTC: the tc kernels of M ≤ 64 to time (tmd, mma; empty: launch.json's dec_path)")
var tcCFlag = flag.Int("tc-c", 0, "BenchmarkMatmulTC: tmd's consumer warps a block, 1…16 (0: planTMD's cost model)")

// tcGFlag forces the segments a block (tmd: a work item) runs in BenchmarkMatmulTC (row-parallel: 1, 2, 4 or 8).
var tcGFlag = flag.Int("tc-g", 0, "BenchmarkMatmulTC: segments a block or tmd work item runs (0: the automatic choice)")

// tcRepsFlag: BenchmarkMatmulTC enqueues that many launches back to back between its two events and reports the
// time of one (the launch gaps shrink to what the host cannot hide; scripts/tc_bench.py times cuBLAS the same way
// in a CUDA graph), and host-us/op, the host's time to enqueue one launch.
var tcRepsFlag = flag.Int("tc-reps", 1, "BenchmarkMatmulTC: launches back to back per timed run (1: one launch between the events)")

// requireTCEnv set to 1 (scripts/gpu.sh tc) makes a missing tc module fail the GPU tests instead of skipping.
const requireTCEnv = "BITALIGN_REQUIRE_TC"

// TestTCVariantsMatchSource: launch.json's tc variants are the tiles tc/tc_matmul.cu instantiates (bm = WM·16·MI,
// bn = WN·8·NI, threads = WM·WN·32, bk, stages, a chain and a tree entry each but big's chain and big64's tree),
// and each fits the H200's 227 KB of shared memory per block.
func TestTCVariantsMatchSource(t *testing.T) {
	src, err := os.ReadFile("tc/tc_matmul.cu")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^TC_VARIANT\((\w+), (\d+), (\d+), (\d+), (\d+), (\d+), (\d+), (true|false), (chain|tree)\)$`)
	seen := map[string][]string{}
	for _, m := range re.FindAllStringSubmatch(string(src), -1) {
		n := make([]int, 6)
		for i := range n {
			n[i], _ = strconv.Atoi(m[2+i])
		}
		v := rules.TC.variant(m[1])
		got := tcVariant{m[1], n[0] * 16 * n[2], n[1] * 8 * n[3], n[0] * n[1] * 32, n[4], n[5]}
		if got != v {
			t.Errorf("tc_matmul.cu instantiates %+v, launch.json says %+v", got, v)
		}
		if (m[8] == "true") != (m[9] == "tree") {
			t.Errorf("%s: TREE %s for the %s entry", m[1], m[8], m[9])
		}
		seen[m[1]] = append(seen[m[1]], m[9])
		if v.smem(m[9] == "tree") > 232448-1024 {
			t.Errorf("tc variant %s needs %d bytes of shared memory, over the 227 KB limit", v.name, v.smem(m[9] == "tree"))
		}
	}
	wsrc, err := os.ReadFile("tc/tc_wgmma.cu")
	if err != nil {
		t.Fatal(err)
	}
	re = regexp.MustCompile(`(?m)^TC_WG_VARIANT\((\w+), (\d+), (\d+), (\d+), (\d+), (true|false), (chain|tree)\)$`)
	for _, m := range re.FindAllStringSubmatch(string(wsrc), -1) {
		n := make([]int, 4)
		for i := range n {
			n[i], _ = strconv.Atoi(m[2+i])
		}
		v := rules.TC.variant(m[1])
		got := tcVariant{m[1], 64 * n[0], n[1], 128 * n[0], n[2], n[3]}
		if got != v {
			t.Errorf("tc_wgmma.cu instantiates %+v, launch.json says %+v", got, v)
		}
		if (m[6] == "true") != (m[7] == "tree") {
			t.Errorf("%s: TREE %s for the %s entry", m[1], m[6], m[7])
		}
		seen[m[1]] = append(seen[m[1]], m[7])
		if v.smem(m[7] == "tree") > 232448-1024 {
			t.Errorf("tc variant %s needs %d bytes of shared memory, over the 227 KB limit", v.name, v.smem(m[7] == "tree"))
		}
	}
	tsrc, err := os.ReadFile("tc/tc_tma.cu")
	if err != nil {
		t.Fatal(err)
	}
	re = regexp.MustCompile(`(?m)^TC_TMA_VARIANT\((\w+), (\d+), (\d+), (true|false), (true|false), (chain|tree)\)$`)
	for _, m := range re.FindAllStringSubmatch(string(tsrc), -1) {
		bn, _ := strconv.Atoi(m[2])
		stages, _ := strconv.Atoi(m[3])
		v := rules.TC.variant(m[1])
		got := tcVariant{m[1], tmaBM, bn, 384, tmaBK, stages}
		if got != v {
			t.Errorf("tc_tma.cu instantiates %+v, launch.json says %+v", got, v)
		}
		if (m[4] == "true") != (m[6] == "tree") {
			t.Errorf("%s: TREE %s for the %s entry", m[1], m[4], m[6])
		}
		if (m[5] == "true") != tmaPersistent(m[1]) {
			t.Errorf("%s: PERSIST %s, but tmaPersistent says %v (the launcher's grid and parameters follow it)", m[1], m[5], tmaPersistent(m[1]))
		}
		seen[m[1]] = append(seen[m[1]], m[6])
		if b := v.smem(m[6] == "tree"); b > 232448-256 { // static shared memory: the mbarriers and the bounds
			t.Errorf("tc variant %s (%s) needs %d bytes of shared memory, over the 227 KB limit", v.name, m[6], b)
		}
	}
	for _, d := range []string{fmt.Sprintf("#define TC_TMA_BM %d\n", tmaBM), fmt.Sprintf("#define TC_TMA_BK %d\n", tmaBK)} {
		if !strings.Contains(string(tsrc), d) {
			t.Errorf("tc_tma.cu does not say %q, which tc.go's tmaBM, tmaBK assume", strings.TrimSpace(d))
		}
	}
	if d := fmt.Sprintf("#define TC_TMD_MAXS %d\n", tmdMaxStages); !strings.Contains(string(tsrc), d) {
		t.Errorf("tc_tma.cu does not say %q, which tc.go's tmdMaxStages assumes", strings.TrimSpace(d))
	}
	var tmd []string
	for _, m := range regexp.MustCompile(`(?m)^TC_TMD_ENTRY\((\d+), (true|false), (chain|tree), (\d+)\)$`).FindAllStringSubmatch(string(tsrc), -1) {
		if (m[2] == "true") != (m[3] == "tree") {
			t.Errorf("tmd%s: TREE %s for the %s entry", m[1], m[2], m[3])
		}
		if R, _ := strconv.Atoi(m[1]); fmt.Sprint(tmdMaxWarps(R, m[2] == "true")) != m[4] {
			t.Errorf("tmd%s_%s: MAXC %s, tmdMaxWarps says %d", m[1], m[3], m[4], tmdMaxWarps(R, m[2] == "true"))
		}
		tmd = append(tmd, "tc_mm_tmd"+m[1]+"_"+m[3])
	}
	if want := tmdEntries(); fmt.Sprint(tmd) != fmt.Sprint(want) {
		t.Errorf("tc_tma.cu's tmd entries %v, planTMD launches %v", tmd, want)
	}
	want := map[string][]string{"dec16": {"chain", "tree"}, "dec64": {"chain", "tree"}, "big": {"chain"}, "big64": {"tree"},
		"wg128": {"chain"}, "wg64t": {"tree"}, "tma256": {"chain"}, "tma128t": {"tree"},
		"tma256p": {"chain"}, "tma128p": {"chain"}, "tma128tp": {"tree"}}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("tc_matmul.cu's entries %v, the launcher needs %v", seen, want)
	}
}

// TestTCPlan: a column-parallel tc matmul is never split over K (one block row of K, grid z = 1, no finish), a
// row-parallel one only at whole segments (G divides the segment count; tc_finish iff G < nseg), every path's
// variant serves M > dec64_max_m only, the tma kernels take a one-dimensional grid of all tiles, and the kernel
// exists for every plan.
func TestTCPlan(t *testing.T) {
	l := Limits{SMs: 132, SmemOptin: 232448}
	entries := map[string]bool{"tc_finish": true, "tc_mm_tma256_chain": true, "tc_mm_tma128t_tree": true,
		"tc_mm_tma256p_chain": true, "tc_mm_tma128p_chain": true, "tc_mm_tma128tp_tree": true}
	for _, v := range []string{"dec16_chain", "dec16_tree", "dec64_chain", "dec64_tree", "big_chain", "big64_tree", "wg128_chain", "wg64t_tree"} {
		entries["tc_mm_"+v], entries["tc_mm_"+v+"_vec"] = true, true
	}
	for _, e := range tmdEntries() {
		entries[e] = true
	}
	prefix := map[TCPath]string{TCPathTMAP: "tc_mm_tma", TCPathTMAPAll: "tc_mm_tma", TCPathTMA: "tc_mm_tma", TCPathWGMMA: "tc_mm_wg", TCPathMMASync: "tc_mm_big"}
	for _, M := range []int{1, 7, 16, 17, 64, 65, 512, 4096, 8192} {
		for _, K := range []int{16, 1000, 3584, 4096, 18944} {
			for _, N := range []int{1, 512, 3584, 4096, 152064} {
				for _, lay := range []kernels.TCLayout{kernels.ColumnParallel, kernels.RowParallel} {
					for _, path := range tcPaths {
						b, _ := kernels.TCBounds(lay, K)
						p := planTC(l, M, K, N, b, K%8 == 0, path, 0, 0)
						nseg := len(b) - 1
						what := fmt.Sprintf("%v M=%d K=%d N=%d path %s", lay, M, K, N, path)
						ln := p.Launches[0]
						if big := strings.HasPrefix(ln.Kernel, prefix[path]); big != (M > rules.TC.Dec64MaxM || path == TCPathTMAPAll) {
							t.Fatalf("%s: %s", what, ln.Kernel)
						}
						persist := strings.HasPrefix(ln.Kernel, "tc_mm_tma") && strings.HasSuffix(strings.Split(ln.Kernel, "_")[2], "p")
						tmapPlan := (path == TCPathTMAP && M > rules.TC.Dec64MaxM) || path == TCPathTMAPAll
						if persist && !tmapPlan || tmapPlan && !persist && ln.Kernel != "tc_mm_tma256_chain" {
							t.Fatalf("%s: %s", what, ln.Kernel)
						}
						if nseg%p.G != 0 || p.Parts != nseg/p.G || (!persist && int(ln.Grid.Z) != p.Parts) {
							t.Fatalf("%s: G %d, parts %d, grid %v", what, p.G, p.Parts, ln.Grid)
						}
						if lay == kernels.ColumnParallel && (p.Parts != 1 || len(p.Launches) != 1) {
							t.Fatalf("%s: a column-parallel chain split: %+v", what, p)
						}
						if (len(p.Launches) == 2) != (p.Parts > 1) {
							t.Fatalf("%s: %d launches for %d parts", what, len(p.Launches), p.Parts)
						}
						if rest, ok := strings.CutPrefix(ln.Kernel, "tc_mm_tma"); ok {
							v := rules.TC.variant("tma" + rest[:strings.Index(rest, "_")])
							tiles := ceilDiv(int64(N), v.bn) * ceilDiv(int64(M), v.bm)
							gx := tiles
							if persist { // every work item (tile, segment group) on at most blocks_per_sm blocks per SM
								gx = min(tiles*p.Parts, rules.TC.BlocksPerSM*l.SMs)
								if ln.Grid.Z != 1 {
									t.Fatalf("%s: %s grid %v: a persistent grid is one-dimensional", what, ln.Kernel, ln.Grid)
								}
							}
							if ln.Grid.X != gx || ln.Grid.Y != 1 || ln.Block.X != 384 || ln.Smem != v.smem(strings.HasSuffix(ln.Kernel, "_tree")) {
								t.Fatalf("%s: %s grid %v block %v smem %d for %d tiles", what, ln.Kernel, ln.Grid, ln.Block, ln.Smem, tiles)
							}
						}
						for _, ln := range p.Launches {
							if !entries[ln.Kernel] {
								t.Fatalf("%s: plan launches %s, which the tc sources do not define", what, ln.Kernel)
							}
						}
					}
				}
			}
		}
	}
	// tmd: every M ≤ dec64_max_m, whole segments a work item, a column never split between blocks or warps (tiles
	// of 16·C columns), at most one block per SM, the slots within the shared memory, forced C and G obeyed
	for _, M := range []int{1, 7, 8, 9, 16, 17, 33, 64} {
		for _, K := range []int{64, 1000, 3584, 4096, 18944} {
			for _, N := range []int{1, 17, 512, 3584, 4096, 18944, 152064} {
				for _, lay := range []kernels.TCLayout{kernels.ColumnParallel, kernels.RowParallel} {
					b, _ := kernels.TCBounds(lay, K)
					nseg := len(b) - 1
					for _, force := range [][2]int{{0, 0}, {1, 0}, {0, 3}, {nseg, 16}, {3, 1}} {
						p := planTMD(l, M, K, N, b, force[0], force[1])
						what := fmt.Sprintf("tmd %v M=%d K=%d N=%d forced G, C %v", lay, M, K, N, force)
						R := 8
						for R < M {
							R *= 2
						}
						kind := map[bool]string{false: "chain", true: "tree"}[p.G > 1]
						ln := p.Launches[0]
						items := ceilDiv(int64(N), 16*p.C) * p.Parts
						switch {
						case ln.Kernel != fmt.Sprintf("tc_mm_tmd%d_%s", R, kind) || !entries[ln.Kernel]:
							t.Fatalf("%s: %s", what, ln.Kernel)
						case nseg%p.G != 0 || p.Parts != nseg/p.G || (len(p.Launches) == 2) != (p.Parts > 1):
							t.Fatalf("%s: G %d parts %d, %d launches", what, p.G, p.Parts, len(p.Launches))
						case lay == kernels.ColumnParallel && p.Parts != 1:
							t.Fatalf("%s: a column-parallel chain split: %+v", what, p)
						case p.C < 1 || p.C > rules.TC.TMD.MaxWarps || p.C > tmdMaxWarps(R, p.G > 1) || force[1] > 0 && p.C != min(force[1], tmdMaxWarps(R, p.G > 1)):
							t.Fatalf("%s: C %d", what, p.C)
						case force[0] > 0 && nseg%force[0] == 0 && p.G != force[0]:
							t.Fatalf("%s: G %d, forced %d", what, p.G, force[0])
						case ln.Grid.X != min(items, l.SMs) || ln.Grid.Y != 1 || ln.Grid.Z != 1 || ln.Block.X != 32*(p.C+1):
							t.Fatalf("%s: grid %v block %v for %d items", what, ln.Grid, ln.Block, items)
						case p.S < 2 || p.S > tmdMaxStages || ln.Smem != 1024+p.S*((16*p.C+R)*128+16) || ln.Smem > l.rowSmem():
							t.Fatalf("%s: %d slots, %d bytes of shared memory", what, p.S, ln.Smem)
						}
						if p.Parts > 1 && p.Launches[1].Kernel != "tc_finish" {
							t.Fatalf("%s: %s", what, p.Launches[1].Kernel)
						}
					}
				}
			}
		}
	}
	// the tmap chain's width: 128 where 256-wide tiles leave a round of the persistent grid mostly idle
	for _, c := range []struct {
		M, N   int
		narrow bool
	}{{512, 4096, true}, {1024, 4096, false}, {4096, 4096, false}, {512, 18944, true}, {4096, 18944, false},
		{512, 3584, true}, {1024, 152064, false}} {
		if got := tmapNarrow(l, c.M, c.N); got != c.narrow {
			t.Errorf("tmapNarrow(M=%d, N=%d) = %v, want %v", c.M, c.N, got, c.narrow)
		}
		b, _ := kernels.TCBounds(kernels.ColumnParallel, 4096)
		want := map[bool]string{true: "tc_mm_tma128p_chain", false: "tc_mm_tma256_chain"}[c.narrow]
		if p := planTC(l, c.M, 4096, c.N, b, true, TCPathTMAP, 0, 0); p.Launches[0].Kernel != want {
			t.Errorf("tmap M=%d N=%d: %s, want %s", c.M, c.N, p.Launches[0].Kernel, want)
		}
		for bn, k := range map[int]string{128: "tc_mm_tma128p_chain", 256: "tc_mm_tma256p_chain"} {
			if p := planTC(l, c.M, 4096, c.N, b, true, TCPathTMAP, 0, bn); p.Launches[0].Kernel != k {
				t.Errorf("tmap M=%d N=%d forced bn %d: %s", c.M, c.N, bn, p.Launches[0].Kernel)
			}
		}
	}
	// the tma path only where TMA gives the contract's operands
	for _, c := range []struct {
		K    int
		x, w cuda.Ptr
		lay  kernels.TCLayout
		ok   bool
	}{{4096, 0, 256, kernels.RowParallel, true}, {3584, 0, 0, kernels.RowParallel, true}, {24, 0, 0, kernels.ColumnParallel, true},
		{1000, 0, 0, kernels.ColumnParallel, true}, {1000, 0, 0, kernels.RowParallel, false}, {1027, 0, 0, kernels.ColumnParallel, false},
		{4096, 8, 0, kernels.ColumnParallel, false}, {4096, 0, 2, kernels.ColumnParallel, false}, {64, 0, 0, kernels.RowParallel, false}} {
		b, _ := kernels.TCBounds(c.lay, c.K)
		if got := tcTMAOK(c.K, c.x, c.w, b); got != c.ok {
			t.Errorf("tcTMAOK(K=%d, x=%#x, w=%#x, %v) = %v, want %v", c.K, c.x, c.w, c.lay, got, c.ok)
		}
	}
}

// tcGPU is the shared GPU with the tc kernels, or a skip (a failure with BITALIGN_REQUIRE_TC=1) without them.
func tcGPU(t testing.TB) *gpu {
	g := openGPU(t)
	if err := g.k.HasTCWGMMA(); err != nil && g.k.HasTC() == nil {
		t.Logf("tc: mma.sync kernels only: %v", err)
		if os.Getenv(requireTCEnv) == "1" {
			t.Errorf("%s=1 but the wgmma kernels did not load: %v", requireTCEnv, err)
		}
	}
	if err := g.k.HasTC(); err != nil {
		if os.Getenv(requireTCEnv) == "1" {
			t.Fatalf("%s=1 but: %v", requireTCEnv, err)
		}
		t.Skipf("tc kernels not loaded (%s=1 makes this a failure): %v; skipped, not passed", requireTCEnv, err)
	}
	return g
}

// tcData returns n bf16 values of mixed magnitude; specials plants NaN, ±Inf and ±0 at a few places.
func tcData(r *rand.Rand, n int, sd float64, specials bool) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = kernels.RoundBF16(float32(r.NormFloat64() * sd * math.Ldexp(1, r.IntN(5)-2)))
	}
	if specials {
		sp := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0, float32(math.Copysign(0, -1))}
		for i := 0; i < 1+n/2000; i++ {
			x[r.IntN(n)] = sp[r.IntN(len(sp))]
		}
	}
	return x
}

// tcMs is the M sweep: 1…8192 with odd sizes and every variant's edges.
func tcMs(short bool) []int {
	ms := []int{1, 2, 3, 5, 8, 13, 16, 17, 31, 33, 63, 64, 65, 100, 127, 128, 129, 255, 257, 511, 1000, 1024, 2049, 4096, 8192}
	if short {
		ms = []int{1, 3, 16, 17, 64, 65, 129, 1000}
	}
	return ms
}

// TestMatmulTCBitwise: every tc kernel against the CPU tc matmul (kernels.MatmulTC), bitwise, over the M sweep
// on the shared rows (the CPU computes the largest M once: its rows do not depend on M, TestMatmulTCBatchInvariance
// in package kernels), K not a multiple of 64 or of 8 (the element-wise loads), N odd, both layouts, every forced
// G of the row-parallel split, with bias and bf16 output, and with NaN/Inf/±0 planted.
func TestMatmulTCBitwise(t *testing.T) {
	g := tcGPU(t)
	r := newRand(t)
	type kn struct {
		K, N     int
		specials bool
	}
	cases := []kn{{1000, 33, false}, {1027, 7, false}, {64, 129, false}, {24, 255, false}, {4096, 65, false}, {16, 1, false}, {3584, 40, true}}
	ms := tcMs(testing.Short())
	maxM := ms[len(ms)-1]
	for _, c := range cases {
		x, w := tcData(r, maxM*c.K, 1, c.specials), tcData(r, c.N*c.K, 0.05, c.specials)
		bias := tcData(r, c.N, 0.1, false)
		d := &dev{g: g}
		dx, dw, db := upload(t, d, bf16Bits(x)), upload(t, d, bf16Bits(w)), d.f32(t, bias)
		out := d.poisoned(t, maxM*c.N)
		outh := d.poisoned(t, (maxM*c.N+1)/2) // MatmulTCBF16's bf16 output
		for _, lay := range []kernels.TCLayout{kernels.ColumnParallel, kernels.RowParallel} {
			for _, withBias := range []bool{false, true} {
				dt, bp, dbp := kernels.F32, []float32(nil), cuda.Ptr(0)
				if withBias {
					dt, bp, dbp = kernels.BF16, bias, db
				}
				want := make([]float32, maxM*c.N)
				if err := kernels.MatmulTC(lay, dt, want, x, w, bp, maxM, c.K, c.N); err != nil {
					t.Fatal(err)
				}
				gs := []int{0}
				if lay == kernels.RowParallel && !withBias {
					gs = []int{0, 1, 2, 4, 8}
				}
				for _, G := range gs {
					for _, M := range ms {
						for _, pb := range tcBitwisePaths(g.k, M, c.K, lay) {
							path, bn := pb.path, pb.bn
							what := fmt.Sprintf("%v K=%d N=%d specials=%v bias=%v G=%d M=%d path=%q bn=%d dec=%q C=%d", lay, c.K, c.N, c.specials, withBias, G, M, path, bn, pb.dec, pb.c)
							d.run(t, func(cc *cuda.Ctx, k *Kernels) error {
								k.tcG, k.tcPath, k.tcBN, k.tcDec, k.tcC = G, path, bn, pb.dec, pb.c
								defer func() { k.tcG, k.tcPath, k.tcBN, k.tcDec, k.tcC = 0, "", 0, "", 0 }()
								b, _ := kernels.TCBounds(lay, c.K)
								pl, err := k.tcPlanFor(dx, dw, M, c.K, c.N, b)
								if err != nil {
									return fmt.Errorf("%s: %w", what, err)
								}
								what += " (" + pl.Kernels() + ")" // the message names the variant that ran
								// poisoned again: the rows an earlier M wrote are the same bits, so a row this
								// launch skipped would pass otherwise
								if err := cc.Memset32(out, 0x7FBADBAD, int64(M*c.N)); err != nil {
									return err
								}
								return tcSync(cc, what, k.MatmulTC(cc, lay, DTCode(dt), out, dx, dw, dbp, M, c.K, c.N))
							})
							if !same(t, what, d.get(t, out, M*c.N), want[:M*c.N]) {
								d.free()
								return
							}
							if dt != kernels.BF16 {
								continue
							}
							// the same in bf16 bits (MatmulTCBF16: from the epilogue of the persistent tma kernels, else narrowed)
							gh := make([]uint16, M*c.N)
							d.run(t, func(cc *cuda.Ctx, k *Kernels) error {
								k.tcG, k.tcPath, k.tcBN, k.tcDec, k.tcC = G, path, bn, pb.dec, pb.c
								defer func() { k.tcG, k.tcPath, k.tcBN, k.tcDec, k.tcC = 0, "", 0, "", 0 }()
								if err := cc.Memset32(outh, 0x7FBD7FBD, int64((M*c.N+1)/2)); err != nil {
									return err
								}
								if err := tcSync(cc, what+" bf16 out", k.MatmulTCBF16(cc, lay, outh, dx, dw, dbp, M, c.K, c.N)); err != nil {
									return err
								}
								return cuda.Download(cc, gh, outh)
							})
							if !sameBF16(t, what+" bf16 out", gh, want[:M*c.N]) {
								d.free()
								return
							}
						}
					}
				}
			}
		}
		// the row-parallel partials of tp = 2, 4, 8: each rank's subtree as the CPU computes it
		for _, tp := range []int{2, 4, 8} {
			if c.K%tp != 0 {
				continue
			}
			kl := c.K / tp
			for rank := 0; rank < tp; rank++ {
				M := ms[(rank*7)%len(ms)]
				xr, wr := columns(x, M, c.K, rank*kl, (rank+1)*kl), columns(w, c.N, c.K, rank*kl, (rank+1)*kl)
				want := make([]float32, M*c.N)
				if err := kernels.MatmulTCPartial(want, xr, wr, M, kl, c.N, tp); err != nil {
					t.Fatal(err)
				}
				dxr, dwr := upload(t, d, bf16Bits(xr)), upload(t, d, bf16Bits(wr))
				what := fmt.Sprintf("partial K=%d N=%d tp=%d rank %d M=%d", c.K, c.N, tp, rank, M)
				d.run(t, func(cc *cuda.Ctx, k *Kernels) error {
					b, _, _ := kernels.TCPartialBounds(kl, tp)
					if pl, err := k.tcPlanFor(dxr, dwr, M, kl, c.N, b); err == nil {
						what += " (" + pl.Kernels() + ")"
					}
					if err := cc.Memset32(out, 0x7FBADBAD, int64(M*c.N)); err != nil {
						return err
					}
					return tcSync(cc, what, k.MatmulTCPartial(cc, out, dxr, dwr, M, kl, c.N, tp))
				})
				if !same(t, what, d.get(t, out, M*c.N), want) {
					d.free()
					return
				}
			}
		}
		d.free()
		t.Logf("K=%d N=%d specials=%v: %d batch sizes up to %d, both layouts, bitwise", c.K, c.N, c.specials, len(ms), maxM)
	}
	err := g.d.Do(func(cc *cuda.Ctx) error { return g.k.MatmulTCPartial(cc, 0, 0, 0, 1, 6, 1, 3) })
	if err == nil {
		t.Error("tp = 3 accepted")
	}
}

// tcPathBN is a family and, for tmap, a forced chain width (0: the rule's); at M ≤ dec64_max_m dec forces the
// decode family (tmd or mma; "": launch.json's dec_path) and c tmd's consumer warps (0: planTMD's choice).
type tcPathBN struct {
	path TCPath
	bn   int
	dec  string
	c    int
}

// tcBitwisePaths are the M > 64 families TestMatmulTCBitwise runs at M: launch.json's choice (""), then each
// other loaded family forced, the tma ones only where they can load the operands (tcTMAOK; the uploads are
// aligned), tmap with each chain width (tma128p and tma256p); at M ≤ dec64_max_m the mma.sync decode kernels
// (dec16, dec64) and tmd forced, tmd also with 3 consumer warps a block (more work items than blocks at most
// shapes), and tmapall with each width.
func tcBitwisePaths(k *Kernels, M, K int, lay kernels.TCLayout) []tcPathBN {
	paths := []tcPathBN{{path: ""}}
	b, _ := kernels.TCBounds(lay, K)
	if M <= rules.TC.Dec64MaxM {
		paths = append(paths, tcPathBN{dec: "mma"})
		if k.HasTCTMA() == nil && tcTMAOK(K, 0, 0, b) {
			if k.fn["tc_mm_tmd8_chain"] != nil {
				paths = append(paths, tcPathBN{dec: "tmd"}, tcPathBN{dec: "tmd", c: 3})
			}
			paths = append(paths, tcPathBN{path: TCPathTMAPAll, bn: 128}, tcPathBN{path: TCPathTMAPAll, bn: 256})
		}
		return paths
	}
	def, _ := k.tcChoosePath("", K, 0, 0, b)
	for _, p := range tcPaths {
		tma := p == TCPathTMA || p == TCPathTMAP
		if p == TCPathTMAPAll || (tma && (k.HasTCTMA() != nil || !tcTMAOK(K, 0, 0, b))) || (p == TCPathWGMMA && k.HasTCWGMMA() != nil) {
			continue
		}
		if p == TCPathTMAP {
			paths = append(paths, tcPathBN{path: p, bn: 128}, tcPathBN{path: p, bn: 256})
		} else if p != def {
			paths = append(paths, tcPathBN{path: p})
		}
	}
	return paths
}

// tcSync returns err, or the error of synchronising after the launch, both naming what ran: a kernel that
// faults or traps (tc_tma.cu's bounded mbarrier wait is a trap) fails here, with its variant, not at a later copy.
func tcSync(c *cuda.Ctx, what string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := c.Synchronize(); err != nil {
		return fmt.Errorf("%s: the kernel failed (a trap in tc_mm_tma* is its mbarrier wait timing out: a pipeline bug): %w", what, err)
	}
	return nil
}

// sameBF16 reports whether got holds fp.F32ToBF16 of every want (MatmulTCBF16 against MatmulTC's float32 bits),
// else an error with the first differing index.
func sameBF16(t testing.TB, what string, got []uint16, want []float32) bool {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d bf16 outputs, want %d", what, len(got), len(want))
		return false
	}
	for i, v := range want {
		if w := fp.F32ToBF16(v); got[i] != w {
			t.Errorf("%s: first difference at %d: gpu bf16 %#04x, cpu %v (%#08x) → bf16 %#04x", what, i, got[i], v, math.Float32bits(v), w)
			return false
		}
	}
	return true
}

// columns returns columns [c0, c1) of the (rows, cols) matrix a.
func columns(a []float32, rows, cols, c0, c1 int) []float32 {
	out := make([]float32, 0, rows*(c1-c0))
	for i := 0; i < rows; i++ {
		out = append(out, a[i*cols+c0:i*cols+c1]...)
	}
	return out
}

// timeGPUMedian times each of n runs of f between its own two events and returns the median milliseconds.
func timeGPUMedian(b *testing.B, g *gpu, n int, f func(c *cuda.Ctx, i int) error) float64 {
	b.Helper()
	ms := make([]float64, 0, n)
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
		for i := 0; i < n; i++ {
			if err := c.Record(e0, nil); err != nil {
				return err
			}
			if err := f(c, i); err != nil {
				return err
			}
			if err := c.Record(e1, nil); err != nil {
				return err
			}
			if err := c.EventSync(e1); err != nil {
				return err
			}
			t, err := c.Elapsed(e0, e1)
			if err != nil {
				return err
			}
			ms = append(ms, float64(t))
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	slices.Sort(ms)
	return ms[len(ms)/2]
}

// tcBenchShapes: K = N = 4096 at the M, and the Qwen2.5-7B projections (hidden 3584, 28/4 heads of 128,
// intermediate 18944, V 152064): q, k/v, gate/up, lm_head column-parallel; o_proj, down_proj row-parallel.
type tcShape struct {
	name    string
	lay     kernels.TCLayout
	K, N    int
	decodeM bool // also time M = 1, 8, 16, 32, 64
}

var tcBenchShapes = []tcShape{
	{"square", kernels.ColumnParallel, 4096, 4096, true},
	{"square-row", kernels.RowParallel, 4096, 4096, true},
	{"qwen7b-q", kernels.ColumnParallel, 3584, 3584, true},
	{"qwen7b-kv", kernels.ColumnParallel, 3584, 512, true},
	{"qwen7b-gateup", kernels.ColumnParallel, 3584, 18944, true},
	{"qwen7b-lmhead", kernels.ColumnParallel, 3584, 152064, false},
	{"qwen7b-o", kernels.RowParallel, 3584, 3584, true},
	{"qwen7b-down", kernels.RowParallel, 18944, 3584, true},
}

// BenchmarkMatmulTC times the tc matmul (median of CUDA-event-timed runs after warm-up, weights rotated over 4
// copies when they fit) and reports µs, TFLOP/s and the bytes moved (bf16 x and w read once, float32 out
// written, or bf16 with -tc-bf16) against the copy ceiling of BenchmarkCopy in the same run. scripts/tc_bench.py prints it beside
// cuBLAS bf16 (torch.mm) at the same shapes.
func BenchmarkMatmulTC(b *testing.B) {
	g := tcGPU(b)
	r := rand.New(rand.NewPCG(5, 6))
	for _, s := range tcBenchShapes {
		d := &dev{g: g}
		copies := 4
		if s.K*s.N > 64<<20 {
			copies = 1 // lm_head: 1 GB of bf16 weights per copy
		}
		ws := make([]cuda.Ptr, copies)
		for i := range ws {
			ws[i] = upload(b, d, bf16Bits(tcData(r, s.N*s.K, 0.05, false)))
		}
		Ms := []int{512, 1024, 4096}
		if s.decodeM {
			Ms = append([]int{1, 8, 16, 32, 64}, Ms...)
		}
		mmax := Ms[len(Ms)-1]
		if s.N > 100000 {
			Ms, mmax = []int{1, 64, 512, 1024}, 1024
		}
		x := upload(b, d, bf16Bits(tcData(r, mmax*s.K, 1, false)))
		out := d.poisoned(b, mmax*s.N)
		for _, M := range Ms {
			b.Run(fmt.Sprintf("%s/%v/M=%d/K=%d/N=%d", s.name, s.lay, M, s.K, s.N), func(b *testing.B) {
				reps := max(*tcRepsFlag, 1)
				var host time.Duration
				ms := timeGPUMedian(b, g, max(b.N, 20), func(c *cuda.Ctx, i int) error {
					g.k.tcPath, g.k.tcBN, g.k.tcDec, g.k.tcC, g.k.tcG = TCPath(*tcPathFlag), *tcBNFlag, *tcDecFlag, *tcCFlag, *tcGFlag
					defer func() { g.k.tcPath, g.k.tcBN, g.k.tcDec, g.k.tcC, g.k.tcG = "", 0, "", 0, 0 }()
					t0 := time.Now()
					defer func() { host += time.Since(t0) }()
					for j := 0; j < reps; j++ {
						w := ws[(i*reps+j)%copies]
						var err error
						if *tcBF16Flag {
							err = g.k.MatmulTCBF16(c, s.lay, out, x, w, 0, M, s.K, s.N)
						} else {
							err = g.k.MatmulTC(c, s.lay, DTCode(kernels.BF16), out, x, w, 0, M, s.K, s.N)
						}
						if err != nil {
							return err
						}
					}
					return nil
				}) / float64(reps)
				b.ReportMetric(float64(host.Microseconds())/float64((max(b.N, 20)+3)*reps), "host-us/op")
				ob := 4.0
				if *tcBF16Flag {
					ob = 2
				}
				bytes := 2*float64(M)*float64(s.K) + 2*float64(s.N)*float64(s.K) + ob*float64(M)*float64(s.N)
				b.ReportMetric(ms*1e3, "gpu-us/op")
				b.ReportMetric(2*float64(M)*float64(s.K)*float64(s.N)/(ms*1e-3)/1e12, "TFLOP/s")
				b.ReportMetric(bytes/(ms*1e-3)/1e9, "GB/s")
				if hbmCeiling > 0 {
					b.ReportMetric(100*bytes/(ms*1e-3)/hbmCeiling, "%copy-BW")
				}
			})
		}
		d.free()
	}
}
