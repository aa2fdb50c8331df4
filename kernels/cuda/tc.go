package cudakernels

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"bitalign/cuda"
	"bitalign/kernels"
)

// The `tc` profile's matmul on the tensor cores (docs/arithmetic.md §18, tc.2): tc/tc_matmul.cu, the twin of
// kernels.MatmulTC and kernels.MatmulTCPartial. Its PTX is committed and embedded beside its source
// (tc/*.ptx, `make ptx`; tcPTX), or read from $BITALIGN_PTX_DIR/kernels/cuda/tc/; Load takes each tc module
// only when it loads: without it HasTC says why and the tc launchers return that error; nothing else changes.

// tcModule is the tc kernels' PTX module (mma.sync, every size, and tc_finish); tcWGModule the wgmma kernels for
// M > 64 (sm_90a), tcTMAModule the TMA + warp-specialised wgmma kernels for M > 64 (sm_90a), each used when
// loaded as well.
const (
	tcModule    = "tc_matmul"
	tcWGModule  = "tc_wgmma"
	tcTMAModule = "tc_tma"
)

// TCPath is a family of the tc kernels that serve M > dec64_max_m: launch.json's "big_order" lists them by
// preference, and the first that is loaded and can take the matmul runs it (tests and benchmarks may force one).
type TCPath string

// The M > dec64_max_m paths.
const (
	TCPathTMAP    TCPath = "tmap"    // tc_tma.cu's persistent entries: tma's tiles, a persistent grid, a static schedule
	TCPathTMAPAll TCPath = "tmapall" // tmap at every M, decode included (else dec16/dec64 serve M ≤ dec64_max_m)
	TCPathTMA     TCPath = "tma"     // tc_tma.cu: TMA loads, mbarrier pipeline, producer warp + 2 consumer warpgroups
	TCPathWGMMA   TCPath = "wgmma"   // tc_wgmma.cu: cp.async loads, wgmma with A from registers
	TCPathMMASync TCPath = "mmasync" // tc_matmul.cu's big and big64: mma.sync
)

// tcPaths are the valid TCPath values.
var tcPaths = []TCPath{TCPathTMAP, TCPathTMAPAll, TCPathTMA, TCPathWGMMA, TCPathMMASync}

// tcRules is launch.json's "tc": the tiles of tc_matmul's variants and the split rule's numbers.
type tcRules struct {
	About     string   `json:"about"`
	Dec16MaxM int      `json:"dec16_max_m"`
	Dec64MaxM int      `json:"dec64_max_m"`
	BigOrder  []TCPath `json:"big_order"`
	Variants  []struct {
		Name    string `json:"name"`
		BM      int    `json:"bm"`
		BN      int    `json:"bn"`
		Threads int    `json:"threads"`
		BK      int    `json:"bk"`
		Stages  int    `json:"stages"`
	} `json:"variants"`
	BlocksPerSM int `json:"blocks_per_sm"`
	FinishBlock int `json:"finish_block"`
	// TmapNarrowCost: the tmap path's column-parallel chain takes 128-wide tiles (tma128p) instead of 256-wide
	// (tma256p) when rounds(128) · 128 · TmapNarrowCost < rounds(256) · 256, rounds(bn) being the persistent
	// grid's rounds of tiles (the narrow tile's cost per output, relative: more loads per MMA). Speed only.
	TmapNarrowCost float64 `json:"tmap_narrow_cost"`
	// DecPath: the family of M ≤ dec64_max_m: "tmd" (tc_tma.cu's tc_mm_tmd<R>, where TMA can load the operands)
	// or "mma" (tc_matmul.cu's dec16, dec64, which serve every operand).
	DecPath string   `json:"dec_path"`
	TMD     tmdRules `json:"tmd"`
}

// tmdRules is launch.json's tc "tmd": the cost model planTMD picks the decode family's block width (C consumer
// warps of 16 columns) and segments per work item (G) by, and its bounds. Speed only.
type tmdRules struct {
	MaxWarps  int     `json:"max_warps"`  // consumer warps a block at most (16 · 16 = 256 rows: the TMA box's limit)
	MaxStages int     `json:"max_stages"` // slots a block at most (tc_tma.cu's TC_TMD_MAXS)
	HBMGBps   float64 `json:"hbm_gbps"`   // the weights' stream when every SM reads
	SMGBps    float64 `json:"sm_gbps"`    // one SM's share at most, when few read
	KStepNs   float64 `json:"kstep_ns"`   // one k-step of a chain (the MMA's latency): a work item's floor
	FinishUs  float64 `json:"finish_us"`  // tc_finish's launch, when the segments are split over items
}

// tmdMaxStages is tc_tma.cu's TC_TMD_MAXS (TestTCVariantsMatchSource checks it).
const tmdMaxStages = 32

// tcVariantNames are the variants tc_matmul.cu instantiates, in launch.json's order.
var tcVariantNames = []string{"dec16", "dec64", "big", "big64", "wg128", "wg64t", "tma256", "tma128t", "tma256p", "tma128p", "tma128tp"}

func (r *tcRules) check() error {
	if r.Dec16MaxM <= 0 || r.Dec64MaxM <= r.Dec16MaxM || r.BlocksPerSM <= 0 || r.FinishBlock <= 0 || !(r.TmapNarrowCost > 0) {
		return errors.New("cudakernels: launch.json: tc: sizes and tmap_narrow_cost must be positive and dec16_max_m < dec64_max_m")
	}
	var names []string
	for _, v := range r.Variants {
		if v.BM <= 0 || v.BN <= 0 || v.Threads <= 0 || v.BK <= 0 || v.BK%16 != 0 || v.Stages < 2 {
			return fmt.Errorf("cudakernels: launch.json: tc variant %q: bad tile %+v", v.Name, v)
		}
		names = append(names, v.Name)
	}
	if !slices.Equal(names, tcVariantNames) {
		return fmt.Errorf("cudakernels: launch.json: tc variants %v, want %v", names, tcVariantNames)
	}
	for _, v := range r.Variants {
		if strings.HasPrefix(v.Name, "tma") && (v.BM != tmaBM || v.BK != tmaBK || v.Threads != 384) {
			return fmt.Errorf("cudakernels: launch.json: tc variant %q: tc_tma.cu's tiles are %d rows, %d k per stage, 384 threads", v.Name, tmaBM, tmaBK)
		}
	}
	if t := r.TMD; r.DecPath != "tmd" && r.DecPath != "mma" || t.MaxWarps < 1 || t.MaxWarps > 16 || t.MaxStages < 2 ||
		t.MaxStages > tmdMaxStages || !(t.HBMGBps > 0) || !(t.SMGBps > 0) || !(t.KStepNs >= 0) || !(t.FinishUs >= 0) {
		return fmt.Errorf("cudakernels: launch.json: tc: dec_path %q (tmd or mma) or tmd %+v out of range (max_warps 1…16, max_stages 2…%d, rates positive)", r.DecPath, r.TMD, tmdMaxStages)
	}
	seen := map[TCPath]bool{}
	for _, p := range r.BigOrder {
		if !slices.Contains(tcPaths, p) || seen[p] {
			return fmt.Errorf("cudakernels: launch.json: tc big_order %v: each of %v at most once", r.BigOrder, tcPaths)
		}
		seen[p] = true
	}
	if !seen[TCPathMMASync] {
		return fmt.Errorf("cudakernels: launch.json: tc big_order %v must end with the fallback %q", r.BigOrder, TCPathMMASync)
	}
	return nil
}

// tmaBM, tmaBK are tc_tma.cu's TC_TMA_BM and TC_TMA_BK (every tma variant's tile rows and k per stage).
const tmaBM, tmaBK = 128, 64

// tcVariant is one variant's tile.
type tcVariant struct {
	name                        string
	bm, bn, threads, bk, stages int
}

func (r *tcRules) variant(name string) tcVariant {
	for _, v := range r.Variants {
		if v.Name == name {
			return tcVariant{v.Name, v.BM, v.BN, v.Threads, v.BK, v.Stages}
		}
	}
	panic("cudakernels: no tc variant " + name) // check() guarantees every name
}

// smem is the variant's dynamic shared memory for a chain (tree false) or tree entry: stages of the x and w
// tiles, rows of bk+8 bf16 (the wgmma variants' w tiles are in the unpadded core-matrix layout; the tma
// variants' tiles are unpadded, 128-byte swizzled, after 1024 bytes of alignment slack, and a tree entry keeps
// two open subtrees of bm·bn floats there too, but for the persistent ones, whose subtrees are in the stash
// buffer: tc_tma.cu's tc_tma_body).
func (v tcVariant) smem(tree bool) int {
	switch {
	case strings.HasPrefix(v.name, "tma"):
		b := 1024 + v.stages*(v.bm+v.bn)*v.bk*2
		if tree && !tmaPersistent(v.name) {
			b += 2 * v.bm * v.bn * 4
		}
		return b
	case strings.HasPrefix(v.name, "wg"):
		return v.stages * (v.bm*(v.bk+8) + v.bn*v.bk) * 2
	}
	return v.stages * (v.bm + v.bn) * (v.bk + 8) * 2
}

// TCPlan is a tc matmul's launches: the tile kernel and, when the segments are split over blocks (Parts > 1),
// tc_finish, which adds the Parts subtrees the tile kernel wrote to scratch.
type TCPlan struct {
	Launches []Launch
	G        int // segments per block (tmd: per work item)
	Parts    int // nseg/G subtrees in scratch (1: none, the tile kernel finishes)
	C, S     int // tmd only: consumer warps a block, slots
}

// planTC: M×K times N×K with the chains' bounds b (kernels.TCBounds or TCPartialBounds); vec: K and every bound
// a multiple of 8 (16-byte cp.async); path: the family for M > dec64_max_m (tcChoosePath). The variant by M:
// dec16 (M ≤ dec16_max_m), dec64, then by path one chain per block (tma256, wg128, big) or several (tma128t,
// wg64t, big64). G, the segments of a row-parallel matmul one block runs (whole segments only: tc.2's split
// rule), starts at all of them and halves while the grid has fewer than blocks_per_sm blocks per SM; a
// column-parallel matmul (one range) is never split. forceG > 0 overrides G (tests); forceBN (128 or 256)
// overrides the tmap chain's tile width (tests, benchmarks), else tmapNarrow picks it.
func planTC(l Limits, M, K, N int, b []int, vec bool, path TCPath, forceG, forceBN int) TCPlan {
	r := &rules.TC
	if M <= 0 || N <= 0 {
		return TCPlan{}
	}
	nseg := len(b) - 1
	name := "big"
	switch {
	case path == TCPathTMAPAll && nseg > 1:
		name = "tma128tp"
	case path == TCPathTMAPAll:
		name = "tma256p"
	case M <= r.Dec16MaxM:
		name = "dec16"
	case M <= r.Dec64MaxM:
		name = "dec64"
	case path == TCPathTMAP && nseg > 1:
		name = "tma128tp"
	case path == TCPathTMAP:
		name = "tma256p"
	case path == TCPathTMA && nseg > 1:
		name = "tma128t"
	case path == TCPathTMA:
		name = "tma256"
	case path == TCPathWGMMA && nseg > 1:
		name = "wg64t"
	case path == TCPathWGMMA:
		name = "wg128"
	case nseg > 1:
		name = "big64"
	}
	v := r.variant(name)
	tiles := ceilDiv(int64(N), v.bn) * ceilDiv(int64(M), v.bm)
	G := nseg
	for G > 1 && tiles*(nseg/G) < r.BlocksPerSM*l.SMs {
		G /= 2
	}
	if forceG > 0 && nseg%forceG == 0 {
		G = forceG
	}
	kind := "tree"
	if G == 1 {
		kind = "chain"
		switch name {
		case "big64":
			v = r.variant("big")
		case "wg64t":
			v = r.variant("wg128")
		case "tma128t":
			v = r.variant("tma256")
		case "tma128tp":
			v = r.variant("tma256p")
		}
		if v.name == "tma256p" {
			switch {
			case forceBN == 128 || (forceBN != 256 && tmapNarrow(l, M, N)):
				v = r.variant("tma128p")
			case forceBN == 0:
				// measured on the H200 (docs/benchmarks.md, session 7): the non-persistent tma256 was faster than
				// tma256p wherever the narrow tile does not win (1024 × 4096 × 4096: 73.6 against ~102 µs)
				v = r.variant("tma256")
			}
		}
	}
	kernel := fmt.Sprintf("tc_mm_%s_%s", v.name, kind)
	grid := cuda.Dim3{X: ceilDiv(int64(N), v.bn), Y: ceilDiv(int64(M), v.bm), Z: nseg / G}
	if tmaPersistent(v.name) {
		// a persistent grid: at most blocks_per_sm blocks per SM, each running every gridDim.x-th of the
		// tiles·(nseg/G) work items (tc_tma.cu, PERSIST)
		grid = cuda.Dim3{X: min(grid.X*grid.Y*grid.Z, r.BlocksPerSM*l.SMs), Y: 1, Z: 1}
	} else if strings.HasPrefix(v.name, "tma") {
		// tc_tma.cu rasters the tiles itself (grouped columns) from a one-dimensional grid; it reads its operands
		// through tensor maps only, so there is no element-wise variant (tcTMAOK says when it can run)
		grid = cuda.Dim3{X: grid.X * grid.Y, Y: 1, Z: grid.Z}
	} else if vec {
		kernel += "_vec"
	}
	p := TCPlan{G: G, Parts: nseg / G}
	p.Launches = []Launch{{Kernel: kernel, Grid: grid, Block: cuda.Dim3{X: v.threads}, Smem: v.smem(kind == "tree")}}
	if p.Parts > 1 {
		p.Launches = append(p.Launches, flat("tc_finish", int64(M)*int64(N), r.FinishBlock, r.FinishBlock))
	}
	return p
}

// tmapNarrow says whether the tmap chain takes 128-wide tiles at M × N (launch.json's tmap_narrow_cost): the
// fewer rounds of a persistent grid, e.g. M = 512, N = 4096: 64 tiles of 256 (half the SMs idle) against 128 of
// 128. Which tile computes an output never changes its bits.
func tmapNarrow(l Limits, M, N int) bool {
	slots := rules.TC.BlocksPerSM * l.SMs
	rounds := func(bn int) int { return ceilDiv(int64(ceilDiv(int64(N), bn)*ceilDiv(int64(M), tmaBM)), slots) }
	return float64(rounds(128)*128)*rules.TC.TmapNarrowCost < float64(rounds(256)*256)
}

// planTMD plans tc_tma.cu's decode entry tc_mm_tmd<R> (M ≤ 64; R, the x box's rows, is M rounded up to 8, 16, 32
// or 64): C consumer warps a block (tiles of 16·C columns), G whole segments a work item (tc_finish iff G < nseg),
// S slots (as many as the shared memory holds, at most max_stages), a persistent grid of at most one block per
// SM. C and G by launch.json's tmd cost model: each round of work items streams its blocks' weights at
// min(hbm_gbps, blocks · sm_gbps), never faster than an item's k-steps at kstep_ns each; the cheapest wins, and
// one within 1 % of it goes to more segments an item and then more warps (bigger TMA boxes, fewer epilogues); never
// more warps than the entry takes (tmdMaxWarps). forceG, forceC > 0 override (tests; C capped by the entry). Neither
// changes a bit:
// every chain is the same whichever block and warp compute it.
func planTMD(l Limits, M, K, N int, b []int, forceG, forceC int) TCPlan {
	r := &rules.TC.TMD
	R := 8
	for R < M {
		R *= 2
	}
	nseg, frags := len(b)-1, ceilDiv(int64(N), 16)
	bestT, G, C, items := math.Inf(1), 0, 0, 0
	for g := nseg; g >= 1; g /= 2 {
		if nseg%g != 0 || (forceG > 0 && g != forceG) {
			continue
		}
		kItem := float64(K) * float64(g) / float64(nseg)
		floor := math.Ceil(kItem/16) * r.KStepNs / 1e3 // µs
		var widths []int                               // the widths measured (docs/benchmarks.md): 16, 8, 4, 2, 1 warps, or the forced one
		for c := min(r.MaxWarps, tmdMaxWarps(R, g > 1)); c >= 1; c /= 2 {
			widths = append(widths, c)
		}
		if forceC > 0 {
			widths = []int{min(forceC, tmdMaxWarps(R, g > 1))}
		}
		for _, c := range widths {
			n := ceilDiv(int64(frags), c) * (nseg / g)
			perBlock := float64(c*16*2) * kItem // bytes of w a work item streams
			round := func(a int) float64 {
				return max(float64(a)*perBlock/(min(r.HBMGBps, float64(a)*r.SMGBps)*1e3), floor)
			}
			t := float64(n/l.SMs) * round(l.SMs)
			if rem := n % l.SMs; rem > 0 {
				t += round(rem)
			}
			if g < nseg {
				t += r.FinishUs
			}
			if t < bestT*0.99 {
				bestT, G, C, items = t, g, c, n
			}
		}
	}
	if C == 0 { // a forced G that does not divide the segments: the automatic choice
		return planTMD(l, M, K, N, b, 0, forceC)
	}
	stage := (16*C+R)*128 + 16 // a slot and its two mbarriers
	S := min(r.MaxStages, (l.rowSmem()-1024)/stage)
	kind := "chain"
	if G > 1 {
		kind = "tree"
	}
	p := TCPlan{G: G, Parts: nseg / G, C: C, S: S}
	p.Launches = []Launch{{Kernel: fmt.Sprintf("tc_mm_tmd%d_%s", R, kind), Grid: cuda.Dim3{X: min(items, l.SMs), Y: 1, Z: 1},
		Block: cuda.Dim3{X: 32 * (C + 1)}, Smem: 1024 + S*stage}}
	if p.Parts > 1 {
		p.Launches = append(p.Launches, flat("tc_finish", int64(M)*int64(N), rules.TC.FinishBlock, rules.TC.FinishBlock))
	}
	return p
}

// tmaPersistent says whether variant name is one of tc_tma.cu's persistent entries (the tmap path): a grid of
// at most blocks_per_sm blocks per SM and the extra parameter ob.
func tmaPersistent(name string) bool {
	return strings.HasPrefix(name, "tma") && strings.HasSuffix(name, "p")
}

// tcTMAOK says whether tc_tma.cu can give the contract's operands (its header comment): K a multiple of 8 (the
// tensor maps' 16-byte row strides), x and w 16-byte aligned, every bound but the last a multiple of 16 (no
// k-step straddles an interior segment bound; one that straddles K reads the TMA's zero fill).
func tcTMAOK(K int, x, w cuda.Ptr, b []int) bool {
	if K <= 0 || K%8 != 0 || x%16 != 0 || w%16 != 0 {
		return false
	}
	for _, v := range b[:len(b)-1] {
		if v%16 != 0 {
			return false
		}
	}
	return true
}

// tcChoosePath is the family for M > dec64_max_m: force when set (tests, benchmarks; it must be loaded and able
// to run the matmul, else an error says why), else the first of launch.json's big_order that is.
func (k *Kernels) tcChoosePath(force TCPath, K int, x, w cuda.Ptr, b []int) (TCPath, error) {
	can := func(p TCPath) error {
		switch p {
		case TCPathTMA, TCPathTMAP, TCPathTMAPAll:
			if k.tcTMAErr != nil {
				return k.tcTMAErr
			}
			if !tcTMAOK(K, x, w, b) {
				return fmt.Errorf("cudakernels: the tma path cannot load K = %d with bounds %v (K %% 8, interior bounds %% 16, 16-byte aligned operands)", K, b)
			}
		case TCPathWGMMA:
			return k.tcWGErr
		}
		return nil
	}
	if force != "" {
		if err := can(force); err != nil {
			return "", fmt.Errorf("cudakernels: tc path %q forced: %w", force, err)
		}
		return force, nil
	}
	for _, p := range rules.TC.BigOrder {
		if can(p) == nil {
			return p, nil
		}
	}
	return TCPathMMASync, nil
}

// tcSmem is the dynamic shared memory tc entry name needs, 0 for tc_finish and names of no variant.
func tcSmem(name string) int {
	rest, ok := strings.CutPrefix(name, "tc_mm_")
	if !ok {
		return 0
	}
	v, kind, _ := strings.Cut(rest, "_")
	if !slices.Contains(tcVariantNames, v) {
		return 0
	}
	return rules.TC.variant(v).smem(strings.HasPrefix(kind, "tree"))
}

// loadTC loads the tc modules when the PTX source has them (tcPTX finds them): without tc_matmul, or with one the
// driver refuses, tc is unavailable with the reason in k.tcErr; tc_wgmma and tc_tma are optional (their
// reasons in k.tcWGErr, k.tcTMAErr). The other kernels stay as they are either way.
func (k *Kernels) loadTC(c *cuda.Ctx) {
	k.tcAttErr = k.loadOptional(c, tcAttModule) // tc attention: its own module, independent of the matmul's
	if k.tcErr = k.loadOptional(c, tcModule); k.tcErr != nil {
		k.tcWGErr, k.tcTMAErr = k.tcErr, k.tcErr
		return
	}
	k.tcWGErr = k.loadOptional(c, tcWGModule)
	k.tcTMAErr = k.loadOptional(c, tcTMAModule)
}

func (k *Kernels) loadOptional(c *cuda.Ctx, mod string) error {
	src, err := tcPTX(mod)
	if err != nil {
		return fmt.Errorf("cudakernels: %s is not in the loaded PTX (make ptx; docs/gpu.md): %w", mod, err)
	}
	m, err := c.LoadModule(src)
	if err != nil {
		return fmt.Errorf("cudakernels: loading %s.ptx: %w", mod, err)
	}
	fns := map[string]*cuda.Function{}
	for _, name := range entryNames(src) {
		f, err := c.Function(m, name)
		if err != nil {
			return err
		}
		b := max(tcSmem(name), tcAttSmemOf(name))
		if strings.HasPrefix(name, "tc_mm_tmd") { // its slots fill what the block may have (planTMD)
			b = k.lim.rowSmem()
		}
		if b > 0 {
			if err := f.SetMaxDynamicSharedMemory(c, b); err != nil {
				return fmt.Errorf("cudakernels: %s: %w", name, err)
			}
		}
		fns[name] = f
	}
	for name, f := range fns {
		k.fn[name] = f
	}
	return nil
}

// HasTC returns nil when the tc kernels are loaded, else why not.
func (k *Kernels) HasTC() error { return k.tcErr }

// HasTCWGMMA returns nil when the wgmma kernels (M > 64) are loaded too, else why not (the mma.sync kernels
// then serve every M).
func (k *Kernels) HasTCWGMMA() error {
	if k.tcErr != nil {
		return k.tcErr
	}
	return k.tcWGErr
}

// HasTCTMA returns nil when the TMA kernels (M > 64, tc_tma.cu) are loaded too, else why not.
func (k *Kernels) HasTCTMA() error {
	if k.tcErr != nil {
		return k.tcErr
	}
	return k.tcTMAErr
}

// MatmulTC: x is (M, K) bf16, w is (N, K) bf16 (device buffers of uint16 bits), bias is (N) float32 or 0, out
// is (M, N) float32 = round_dt(x·wᵀ + bias) with the chains of layout (kernels.MatmulTC, the same bits).
func (k *Kernels) MatmulTC(c *cuda.Ctx, l kernels.TCLayout, dt int, out, x, w, bias cuda.Ptr, M, K, N int) error {
	b, _ := kernels.TCBounds(l, K) // the CPU reference's chains, from the same function
	return k.matmulTC(c, out, x, w, bias, M, K, N, b, dt, false)
}

// MatmulTCBF16: MatmulTC with dt = bf16 and out (M, N) bf16 bits (uint16) instead of float32: the bits
// fp.F32ToBF16 gives of MatmulTC's float32 output, half the bytes. The persistent tma kernels (tmap) write them
// from their epilogue when they finish the tree themselves; every other plan writes float32 into a buffer of
// its own and narrows it (narrow_bf16), so that the bits never depend on the plan.
func (k *Kernels) MatmulTCBF16(c *cuda.Ctx, l kernels.TCLayout, out, x, w, bias cuda.Ptr, M, K, N int) error {
	b, _ := kernels.TCBounds(l, K)
	return k.matmulTC(c, out, x, w, bias, M, K, N, b, DTCode(kernels.BF16), true)
}

// MatmulTCPartial: this rank's share of a tc row-parallel matmul (kernels.MatmulTCPartial): x is (M, kLocal)
// bf16, w is (N, kLocal) bf16, out (M, N) gets the rank's float32 subtree of its G = 8/tp segments, unrounded.
func (k *Kernels) MatmulTCPartial(c *cuda.Ctx, out, x, w cuda.Ptr, M, kLocal, N, tp int) error {
	b, _, err := kernels.TCPartialBounds(kLocal, tp)
	if err != nil {
		return err
	}
	return k.matmulTC(c, out, x, w, 0, M, kLocal, N, b, NoRound, false)
}

// matmulTC runs the plan; bf16Out: out is bf16 bits (dt is bf16: MatmulTCBF16), written by the tile kernel
// where it can (a persistent tma kernel that finishes the tree), else narrowed from a float32 buffer.
func (k *Kernels) matmulTC(c *cuda.Ctx, out, x, w, bias cuda.Ptr, M, K, N int, b []int, dt int, bf16Out bool) error {
	if k.tcErr != nil {
		return k.tcErr
	}
	if M <= 0 || N <= 0 {
		return nil
	}
	pl, err := k.tcPlanFor(x, w, M, K, N, b)
	if err != nil {
		return err
	}
	if bf16Out && pl.Launches[0].Kernel == "tc_mm_tma256_chain" && k.tcPath != TCPathTMA && k.tcBN == 0 {
		// the tmap rule's tma256 writes float32 only: tma256p writes the bf16 bits itself (cheaper than a
		// float32 output narrowed after: 257 against ~270 µs at 4096³, session 7)
		saved := k.tcBN
		k.tcBN = 256
		pl, err = k.tcPlanFor(x, w, M, K, N, b)
		k.tcBN = saved
		if err != nil {
			return err
		}
	}
	first := pl.Launches[0]
	ob := 0
	if bf16Out {
		if rest, _ := strings.CutPrefix(first.Kernel, "tc_mm_"); pl.Parts == 1 && tmaPersistent(strings.Split(rest, "_")[0]) {
			ob = 1
		} else {
			if !k.HasNarrowBF16() {
				return errors.New("cudakernels: MatmulTCBF16: the loaded PTX has no narrow_bf16 (stale PTX: make ptx)")
			}
			f32, err := k.auxBuf(c, 4*int64(M)*int64(N))
			if err != nil {
				return err
			}
			if err := k.matmulTC(c, f32, x, w, bias, M, K, N, b, dt, false); err != nil {
				return err
			}
			return k.NarrowBF16(c, out, f32, M*N)
		}
	}
	part := cuda.Ptr(0)
	if pl.Parts > 1 {
		var err error
		if part, err = k.Scratch(c, 4*int64(pl.Parts)*int64(M)*int64(N)); err != nil {
			return err
		}
	}
	if strings.HasPrefix(first.Kernel, "tc_mm_tmd") {
		err = k.launchTMD(c, first, out, part, x, w, bias, M, K, N, b, dt, pl)
	} else if strings.HasPrefix(first.Kernel, "tc_mm_tma") {
		err = k.launchTMA(c, first, out, part, x, w, bias, M, K, N, b, pl.G, dt, ob)
	} else {
		err = k.launch(c, first, out, part, x, w, bias, M, K, N, segs(b), pl.G, dt)
	}
	if err != nil {
		return err
	}
	if pl.Parts == 1 {
		return nil
	}
	return k.launch(c, pl.Launches[1], out, part, bias, M, N, pl.Parts, dt)
}

// tcPlanFor is the plan matmulTC launches for these operands: the M > dec64_max_m family by launch.json's
// big_order, or k.tcPath when a test forces one.
func (k *Kernels) tcPlanFor(x, w cuda.Ptr, M, K, N int, b []int) (TCPlan, error) {
	vec := K%8 == 0 && x%16 == 0 && w%16 == 0
	for _, v := range b {
		vec = vec && v%8 == 0
	}
	if M <= rules.TC.Dec64MaxM && k.tcPath != TCPathTMAPAll && k.tmdOK(K, x, w, b) {
		return planTMD(k.lim, M, K, N, b, k.tcG, k.tcC), nil
	}
	path := TCPathMMASync
	if M > rules.TC.Dec64MaxM || k.tcPath == TCPathTMAPAll { // the only family that also serves M ≤ dec64_max_m
		var err error
		if path, err = k.tcChoosePath(k.tcPath, K, x, w, b); err != nil {
			return TCPlan{}, err
		}
	}
	return planTC(k.lim, M, K, N, b, vec, path, k.tcG, k.tcBN), nil
}

// tmdOK says whether tc_mm_tmd serves M ≤ dec64_max_m here: k.tcDec when a test forces a family ("tmd" or
// "mma"), else launch.json's dec_path, and only where tc_tma.cu is loaded with the tmd entries (a stale PTX has
// none) and TMA can load the operands (tcTMAOK).
func (k *Kernels) tmdOK(K int, x, w cuda.Ptr, b []int) bool {
	dec := k.tcDec
	if dec == "" {
		dec = rules.TC.DecPath
	}
	return dec == "tmd" && k.HasTCTMA() == nil && k.fn["tc_mm_tmd8_chain"] != nil && tcTMAOK(K, x, w, b)
}

// Kernels names the plan's launches, for messages.
func (p TCPlan) Kernels() string {
	names := make([]string, len(p.Launches))
	for i, l := range p.Launches {
		names[i] = l.Kernel
	}
	return strings.Join(names, " + ")
}

// launchTMD runs tc_mm_tmd<R>: the tensor maps of x (box tmaBK × R) and w (box tmaBK × 16·C), as launchTMA's,
// then tc_matmul.cu's parameters and C, S.
func (k *Kernels) launchTMD(c *cuda.Ctx, l Launch, out, part, x, w, bias cuda.Ptr, M, K, N int, b []int, dt int, pl TCPlan) error {
	R, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(l.Kernel, "tc_mm_tmd"), "_chain"), "_tree"))
	if err != nil {
		return fmt.Errorf("cudakernels: %s: not a tmd entry", l.Kernel)
	}
	tx, err := k.tcTensorMap(c, x, M, K, R)
	if err != nil {
		return fmt.Errorf("cudakernels: %s: x: %w", l.Kernel, err)
	}
	tw, err := k.tcTensorMap(c, w, N, K, 16*pl.C)
	if err != nil {
		return fmt.Errorf("cudakernels: %s: w: %w", l.Kernel, err)
	}
	return k.launch(c, l, tx.Bytes(), tw.Bytes(), out, part, bias, M, K, N, segs(b), pl.G, dt, pl.C, pl.S)
}

// tcTensorMap is the tensor map of a (rows, K) bf16 operand at p that tc_tma.cu's kernels load: boxes of tmaBK
// columns (128 bytes) and box rows, 128-byte swizzle, zero fill past the matrix.
func (k *Kernels) tcTensorMap(c *cuda.Ctx, p cuda.Ptr, rows, K, box int) (cuda.TensorMap, error) {
	return c.EncodeTiled(cuda.Tiled2D{Type: cuda.TensorMapBFloat16, Base: p, Rows: int64(rows), Cols: int64(K),
		RowStride: 2 * int64(K), BoxRows: box, BoxCols: tmaBK, Swizzle: cuda.Swizzle128B, L2Promotion256: true})
}

// launchTMA runs a tc_tma.cu entry: the tensor maps of x (box tmaBK × tmaBM) and w (box tmaBK × the variant's
// bn), 128-byte swizzle, zero fill past the matrices, then the entry's other parameters as tc_matmul.cu's, and
// for a persistent entry ob (1: out is bf16 bits).
func (k *Kernels) launchTMA(c *cuda.Ctx, l Launch, out, part, x, w, bias cuda.Ptr, M, K, N int, b []int, G, dt, ob int) error {
	rest, _ := strings.CutPrefix(l.Kernel, "tc_mm_")
	name, _, _ := strings.Cut(rest, "_")
	v := rules.TC.variant(name)
	tx, err := k.tcTensorMap(c, x, M, K, tmaBM)
	if err != nil {
		return fmt.Errorf("cudakernels: %s: x: %w", l.Kernel, err)
	}
	tw, err := k.tcTensorMap(c, w, N, K, v.bn)
	if err != nil {
		return fmt.Errorf("cudakernels: %s: w: %w", l.Kernel, err)
	}
	if tmaPersistent(name) {
		stash := cuda.Ptr(0)
		if strings.HasSuffix(l.Kernel, "_tree") { // the open subtrees: 2·bm·bn floats a block
			if stash, err = grow(c, &k.stash, &k.stashBytes, 4*2*int64(v.bm)*int64(v.bn)*int64(l.Grid.X), "stash"); err != nil {
				return err
			}
		}
		return k.launch(c, l, tx.Bytes(), tw.Bytes(), out, part, bias, M, K, N, segs(b), G, dt, ob, stash)
	}
	return k.launch(c, l, tx.Bytes(), tw.Bytes(), out, part, bias, M, K, N, segs(b), G, dt)
}

// tmdEntries are tc_tma.cu's decode entries planTMD launches: x boxes of 8, 16, 32, 64 rows, chain and tree.
func tmdEntries() []string {
	var e []string
	for _, r := range []int{8, 16, 32, 64} {
		e = append(e, fmt.Sprintf("tc_mm_tmd%d_chain", r), fmt.Sprintf("tc_mm_tmd%d_tree", r))
	}
	return e
}

// tmdMaxWarps is the consumer warps tc_mm_tmd<R>_<chain|tree> takes at most: its TC_TMD_ENTRY's MAXC, the
// thread bound that leaves the tree entries of 32 and 64 rows the registers their open subtrees need
// (TestTCVariantsMatchSource checks it against tc_tma.cu).
func tmdMaxWarps(R int, tree bool) int {
	if tree && R >= 32 {
		return 8
	}
	return 16
}
