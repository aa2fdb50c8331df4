package cudakernels

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"bitalign/cuda"
	"bitalign/kernels"
)

// The `tc` profile's matmul on the tensor cores (docs/arithmetic.md §18, tc.2): tc/tc_matmul.cu, the twin of
// kernels.MatmulTC and kernels.MatmulTCPartial. Its PTX is not yet among the committed modules (it is built by
// `make ptx-tc`, scripts/gpu.sh tc), so Load takes it only when the PTX it loads has it: the embedded modules
// once it is committed, or $BITALIGN_PTX_DIR/kernels/cuda/tc_matmul.ptx. Without it HasTC says why and the
// tc launchers return that error; nothing else changes.

// tcModule is the tc kernels' PTX module (mma.sync, every size, and tc_finish); tcWGModule the wgmma kernels for
// M > 64 (sm_90a), used when loaded as well.
const (
	tcModule   = "tc_matmul"
	tcWGModule = "tc_wgmma"
)

// tcRules is launch.json's "tc": the tiles of tc_matmul's variants and the split rule's numbers.
type tcRules struct {
	About     string `json:"about"`
	Dec16MaxM int    `json:"dec16_max_m"`
	Dec64MaxM int    `json:"dec64_max_m"`
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
}

// tcVariantNames are the variants tc_matmul.cu instantiates, in launch.json's order.
var tcVariantNames = []string{"dec16", "dec64", "big", "big64", "wg128", "wg64t"}

func (r *tcRules) check() error {
	if r.Dec16MaxM <= 0 || r.Dec64MaxM <= r.Dec16MaxM || r.BlocksPerSM <= 0 || r.FinishBlock <= 0 {
		return errors.New("cudakernels: launch.json: tc: sizes must be positive and dec16_max_m < dec64_max_m")
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
	return nil
}

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

// smem is the variant's dynamic shared memory: stages of the x and w tiles, rows of bk+8 bf16 (the wgmma
// variants' w tiles are in the unpadded core-matrix layout).
func (v tcVariant) smem() int {
	if strings.HasPrefix(v.name, "wg") {
		return v.stages * (v.bm*(v.bk+8) + v.bn*v.bk) * 2
	}
	return v.stages * (v.bm + v.bn) * (v.bk + 8) * 2
}

// TCPlan is a tc matmul's launches: the tile kernel and, when the segments are split over blocks (Parts > 1),
// tc_finish, which adds the Parts subtrees the tile kernel wrote to scratch.
type TCPlan struct {
	Launches []Launch
	G        int // segments per block
	Parts    int // nseg/G subtrees in scratch (1: none, the tile kernel finishes)
}

// planTC: M×K times N×K with the chains' bounds b (kernels.TCBounds or TCPartialBounds); vec: K and every bound
// a multiple of 8 (16-byte cp.async); wg: the wgmma kernels are loaded. The variant by M: dec16
// (M ≤ dec16_max_m), dec64, then wg128 / big for one chain per block and wg64t / big64 for several. G, the segments of a row-parallel matmul one block runs (whole segments
// only: tc.2's split rule), starts at all of them and halves while the grid has fewer than blocks_per_sm
// blocks per SM; a column-parallel matmul (one range) is never split. forceG > 0 overrides G (tests).
func planTC(l Limits, M, K, N int, b []int, vec, wg bool, forceG int) TCPlan {
	r := &rules.TC
	if M <= 0 || N <= 0 {
		return TCPlan{}
	}
	nseg := len(b) - 1
	name := "big"
	switch {
	case M <= r.Dec16MaxM:
		name = "dec16"
	case M <= r.Dec64MaxM:
		name = "dec64"
	case wg && nseg > 1:
		name = "wg64t"
	case wg:
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
		}
	}
	kernel := fmt.Sprintf("tc_mm_%s_%s", v.name, kind)
	if vec {
		kernel += "_vec"
	}
	p := TCPlan{G: G, Parts: nseg / G}
	p.Launches = []Launch{{Kernel: kernel, Grid: cuda.Dim3{X: ceilDiv(int64(N), v.bn), Y: ceilDiv(int64(M), v.bm), Z: nseg / G},
		Block: cuda.Dim3{X: v.threads}, Smem: v.smem()}}
	if p.Parts > 1 {
		p.Launches = append(p.Launches, flat("tc_finish", int64(M)*int64(N), r.FinishBlock, r.FinishBlock))
	}
	return p
}

// tcSmem is the dynamic shared memory tc entry name needs, 0 for tc_finish and names of no variant.
func tcSmem(name string) int {
	rest, ok := strings.CutPrefix(name, "tc_mm_")
	if !ok {
		return 0
	}
	v, _, _ := strings.Cut(rest, "_")
	if !slices.Contains(tcVariantNames, v) {
		return 0
	}
	return rules.TC.variant(v).smem()
}

// loadTC loads the tc modules when the PTX source has them (PTX finds them): without tc_matmul, or with one the
// driver refuses, tc is unavailable with the reason in k.tcErr; tc_wgmma is optional (k.tcWG, its reason in
// k.tcWGErr). The other kernels stay as they are either way.
func (k *Kernels) loadTC(c *cuda.Ctx) {
	if k.tcErr = k.loadOptional(c, tcModule); k.tcErr != nil {
		return
	}
	k.tcWGErr = k.loadOptional(c, tcWGModule)
	k.tcWG = k.tcWGErr == nil
}

func (k *Kernels) loadOptional(c *cuda.Ctx, mod string) error {
	src, err := PTX(mod)
	if err != nil {
		return fmt.Errorf("cudakernels: %s is not in the loaded PTX (make ptx-tc; scripts/gpu.sh tc): %w", mod, err)
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
		if b := tcSmem(name); b > 0 {
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

// MatmulTC: x is (M, K) bf16, w is (N, K) bf16 (device buffers of uint16 bits), bias is (N) float32 or 0, out
// is (M, N) float32 = round_dt(x·wᵀ + bias) with the chains of layout (kernels.MatmulTC, the same bits).
func (k *Kernels) MatmulTC(c *cuda.Ctx, l kernels.TCLayout, dt int, out, x, w, bias cuda.Ptr, M, K, N int) error {
	b, _ := kernels.TCBounds(l, K) // the CPU reference's chains, from the same function
	return k.matmulTC(c, out, x, w, bias, M, K, N, b, dt)
}

// MatmulTCPartial: this rank's share of a tc row-parallel matmul (kernels.MatmulTCPartial): x is (M, kLocal)
// bf16, w is (N, kLocal) bf16, out (M, N) gets the rank's float32 subtree of its G = 8/tp segments, unrounded.
func (k *Kernels) MatmulTCPartial(c *cuda.Ctx, out, x, w cuda.Ptr, M, kLocal, N, tp int) error {
	b, _, err := kernels.TCPartialBounds(kLocal, tp)
	if err != nil {
		return err
	}
	return k.matmulTC(c, out, x, w, 0, M, kLocal, N, b, NoRound)
}

func (k *Kernels) matmulTC(c *cuda.Ctx, out, x, w, bias cuda.Ptr, M, K, N int, b []int, dt int) error {
	if k.tcErr != nil {
		return k.tcErr
	}
	if M <= 0 || N <= 0 {
		return nil
	}
	vec := K%8 == 0 && x%16 == 0 && w%16 == 0
	for _, v := range b {
		vec = vec && v%8 == 0
	}
	pl := planTC(k.lim, M, K, N, b, vec, k.tcWG && !k.tcNoWG, k.tcG)
	part := cuda.Ptr(0)
	if pl.Parts > 1 {
		var err error
		if part, err = k.Scratch(c, 4*int64(pl.Parts)*int64(M)*int64(N)); err != nil {
			return err
		}
	}
	if err := k.launch(c, pl.Launches[0], out, part, x, w, bias, M, K, N, segs(b), pl.G, dt); err != nil {
		return err
	}
	if pl.Parts == 1 {
		return nil
	}
	return k.launch(c, pl.Launches[1], out, part, bias, M, N, pl.Parts, dt)
}
