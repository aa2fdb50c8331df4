package cudakernels

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"math/bits"
	"slices"

	"bitalign/cuda"
	"bitalign/kernels"
)

// The launch rules: which kernel variant, grid, block and dynamic shared memory each op takes for a shape.
// Every variant computes the same bits (docs/arithmetic.md fixes the order; the tests check every variant
// against the CPU), so these choices only change speed. Their numbers live once, in launch.json beside the PTX;
// the Python package (capture/python/bitalign/launch.py) reads the same file and makes the same plans, which
// testdata/launch_plans.tsv pins for both over a sweep of shapes (TestLaunchPlans here, test_launch.py there).
//
//go:embed launch.json
var launchJSON []byte

// launchRules is launch.json.
type launchRules struct {
	About       string `json:"about"`
	SmemReserve int    `json:"smem_reserve"` // bytes kept back from the opt-in limit for static shared memory
	// BigSmem are the kernels whose dynamic shared memory may exceed the default 48 KB (up to the device's
	// opt-in limit less SmemReserve, which covers their static shared memory); the matmul_dec kernels get
	// their own size (decSharedBytes).
	BigSmem []string `json:"big_smem_kernels"`
	Matmul  struct {
		DecMaxM   int `json:"dec_max_m"`
		SmallMaxM int `json:"small_max_m"`
		Dec       []struct {
			MT     int `json:"mt"`
			Span   int `json:"span"`
			Stages int `json:"stages"`
		} `json:"dec"`
		DecCols            int `json:"dec_cols"`
		DecBlock           int `json:"dec_block"`
		SmallCols          int `json:"small_cols"`
		SmallThreadsPerCol int `json:"small_threads_per_col"`
		TileN              int `json:"tile_n"`
		TileM              int `json:"tile_m"`
		TileMSmall         int `json:"tile_m_small"`
		TileMSmallMaxM     int `json:"tile_m_small_max_m"`
		TileBlock          int `json:"tile_block"`
		BlocksPerSM        int `json:"blocks_per_sm"`
		FullWaveNum        int `json:"full_wave_num"`
		FullWaveDen        int `json:"full_wave_den"`
		ManyWaves          int `json:"many_waves"`
		ReduceBlock        int `json:"reduce_block"`
	} `json:"matmul"`
	RMSNorm struct {
		RowBlock     int `json:"row_block"`
		RowSegments  int `json:"row_segments"`
		RowsPerBlock int `json:"rows_per_block"`
		Block        int `json:"block"`
		WarpMaxC     int `json:"warp_max_c"` // canonical rows up to this C run rmsnorm (a warp a row): same bits
	} `json:"rmsnorm"`
	Attention struct {
		KB           int `json:"kb"`
		Warps        int `json:"warps"`
		Tasks        int `json:"tasks"`
		MaxHeadDim   int `json:"max_head_dim"`
		RowsPerBlock int `json:"rows_per_block"`
		Block        int `json:"block"`
	} `json:"attention"`
	Elementwise struct {
		Block int `json:"block"`
	} `json:"elementwise"`
	LogSoftmax struct {
		Chunk              int `json:"chunk"`
		Block              int `json:"block"`
		MaxFinRowsPerBlock int `json:"max_fin_rows_per_block"`
		TreeBlock          int `json:"tree_block"`
		FinishBlock        int `json:"finish_block"`
	} `json:"logsoftmax"`
	LogProbs struct {
		Block int `json:"block"`
	} `json:"logprobs"`
	Sample struct {
		Block int `json:"block"`
	} `json:"sample"`
	TC tcRules `json:"tc"`
}

// rules is the parsed launch.json (TestLaunchRules checks it parses, strictly, and is consistent).
var rules, rulesErr = parseRules(launchJSON)

func parseRules(b []byte) (launchRules, error) {
	var r launchRules
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&r); err != nil {
		return r, fmt.Errorf("cudakernels: launch.json: %w", err)
	}
	m := r.Matmul
	for _, v := range []int{m.DecMaxM, m.SmallMaxM, m.DecCols, m.DecBlock, m.SmallCols, m.SmallThreadsPerCol, m.TileN,
		m.TileM, m.TileMSmall, m.TileBlock, m.BlocksPerSM, m.FullWaveNum, m.FullWaveDen, m.ManyWaves, m.ReduceBlock, r.RMSNorm.RowBlock,
		r.RMSNorm.RowSegments, r.RMSNorm.RowsPerBlock, r.RMSNorm.Block, r.RMSNorm.WarpMaxC, r.Attention.KB, r.Attention.Warps,
		r.Attention.Tasks, r.Attention.MaxHeadDim, r.Attention.RowsPerBlock, r.Attention.Block, r.Elementwise.Block,
		r.LogSoftmax.Chunk, r.LogSoftmax.Block, r.LogSoftmax.MaxFinRowsPerBlock, r.LogSoftmax.TreeBlock,
		r.LogSoftmax.FinishBlock, r.LogProbs.Block, r.Sample.Block} {
		if v <= 0 {
			return r, fmt.Errorf("cudakernels: launch.json: every size must be positive")
		}
	}
	if err := r.TC.check(); err != nil {
		return r, err
	}
	for mt := 1; mt <= m.DecMaxM; mt *= 2 {
		if _, _, ok := r.dec(mt); !ok {
			return r, fmt.Errorf("cudakernels: launch.json: matmul.dec has no entry for mt = %d (dec_max_m %d)", mt, m.DecMaxM)
		}
	}
	return r, nil
}

// bigSmem tells whether kernel may use up to rowSmem bytes of dynamic shared memory.
func (r *launchRules) bigSmem(kernel string) bool { return slices.Contains(r.BigSmem, kernel) }

// dec is matmul_dec<mt>'s (span, stages).
func (r *launchRules) dec(mt int) (span, stages int, ok bool) {
	for _, d := range r.Matmul.Dec {
		if d.MT == mt {
			return d.Span, d.Stages, true
		}
	}
	return 0, 0, false
}

// decSharedBytes is matmul_dec<mt>'s dynamic shared memory: stages of w [8][32][span+4] and x [8][mt][span].
func decSharedBytes(mt int) int {
	span, stages, _ := rules.dec(mt)
	return stages * (kernels.Segments*32*(span+4) + kernels.Segments*mt*span) * 4
}

// Limits are what the launch rules read of the device.
type Limits struct {
	SMs       int // multiprocessors
	SmemOptin int // the opt-in maximum of dynamic shared memory per block, bytes
}

func limitsOf(d *cuda.Device) Limits {
	return Limits{SMs: d.SMCount(), SmemOptin: d.MaxSharedMemoryPerBlock()}
}

// rowSmem is the dynamic shared memory the big-shared-memory kernels (rmsnorm_row, attention_blk*) may use.
func (l Limits) rowSmem() int { return l.SmemOptin - rules.SmemReserve }

// Launch is one kernel launch of a plan.
type Launch struct {
	Kernel string
	Grid   cuda.Dim3
	Block  cuda.Dim3
	Smem   int // dynamic shared memory, bytes
}

func (l Launch) String() string {
	return fmt.Sprintf("%s grid=%d,%d,%d block=%d smem=%d", l.Kernel, l.Grid.X, max(l.Grid.Y, 1), max(l.Grid.Z, 1), l.Block.X, l.Smem)
}

func ceilDiv(n int64, d int) int { return int((n + int64(d) - 1) / int64(d)) }

func pow2Ceil(n int) int {
	p := 1
	for p < n {
		p *= 2
	}
	return p
}

// flat is a one-dimensional launch of n items, per to a block of threads threads.
func flat(kernel string, n int64, per, threads int) Launch {
	return Launch{Kernel: kernel, Grid: cuda.Dim3{X: ceilDiv(n, per)}, Block: cuda.Dim3{X: threads}}
}

// tileConfig is the tiled matmul's launch shape: bm output rows per tile and g, the segments one block runs in
// a row (g = nseg: no reduction kernel). Neither changes a bit of the result.
type tileConfig struct{ bm, g int }

// MatmulPlan is a matmul's launches (the tiled kernel may add a matmul_reduce) and the scratch they need.
type MatmulPlan struct {
	Launches    []Launch
	Tile        tileConfig // the tiled kernel's shape (zero for matmul_dec and matmul_small)
	PartFloats  int64      // the G-block partials matmul_reduce adds (0: none)
	StackFloats int64      // the tiled kernel's per-block stacks of open subtrees
}

// planMatmul: M×K times N×K, the chains' bounds b (len(b)-1 segments) added by the tree or left to right (tree
// false: the kernels' seq = 1); vec: K and every bound are multiples of 4 (16-byte loads). force overrides the
// tiled kernel's shape field by field (tests and benchmarks).
//
// The choice by M (the arithmetic is the same in all three): at most dec_max_m rows with 16-byte aligned
// segments, matmul_dec (w and x streamed through shared memory by cp.async, one warp per segment, one lane per
// column); at most small_max_m rows, unaligned, matmul_small (each thread streams its own w row slice); else the
// tiled kernel, each block running G of the segments in a row and adding their partials in the tree's order,
// G the largest whose grid loses little to its last wave (waveFits; docs/benchmarks.md has the sweep of every
// G at the Qwen2 shapes that this rule was fitted to). The standard profile adds its parts left to right, so its
// G is 1 or nseg.
func planMatmul(l Limits, M, K, N int, b []int, tree, vec bool, force tileConfig) MatmulPlan {
	m := &rules.Matmul
	if M <= 0 || N <= 0 {
		return MatmulPlan{}
	}
	if vec && M <= m.DecMaxM {
		mt := pow2Ceil(M)
		return MatmulPlan{Launches: []Launch{{Kernel: fmt.Sprintf("matmul_dec%d", mt), Grid: cuda.Dim3{X: ceilDiv(int64(N), m.DecCols)},
			Block: cuda.Dim3{X: m.DecBlock}, Smem: decSharedBytes(mt)}}}
	}
	if M <= m.SmallMaxM {
		return MatmulPlan{Launches: []Launch{flat(fmt.Sprintf("matmul_small%d", pow2Ceil(M)), int64(N), m.SmallCols, m.SmallCols*m.SmallThreadsPerCol)}}
	}
	nseg := len(b) - 1
	tc := tileConfig{bm: m.TileM, g: nseg}
	if M <= m.TileMSmallMaxM {
		tc.bm = m.TileMSmall
	}
	if force.bm != 0 {
		tc.bm = force.bm
	}
	tiles := ceilDiv(int64(N), m.TileN) * ceilDiv(int64(M), tc.bm)
	for tc.g > 1 && !waveFits(tiles*(nseg/tc.g), m.BlocksPerSM*l.SMs) {
		tc.g /= 2
	}
	if force.g != 0 && nseg%force.g == 0 {
		tc.g = force.g
	}
	if !tree && tc.g != nseg {
		tc.g = 1
	}
	grid := cuda.Dim3{X: ceilDiv(int64(N), m.TileN), Y: ceilDiv(int64(M), tc.bm), Z: nseg / tc.g}
	p := MatmulPlan{Tile: tc}
	nparts := nseg / tc.g
	if nparts > 1 {
		p.PartFloats = (int64(nparts)*int64(M)*int64(N) + 63) &^ 63 // the stack after it stays 256-byte aligned
	}
	nslots := bits.Len(uint(tc.g)) - 1
	p.StackFloats = int64(grid.X) * int64(grid.Y) * int64(grid.Z) * int64(nslots) * int64(tc.bm) * int64(m.TileN)
	name := fmt.Sprintf("matmul_t%d", tc.bm)
	if vec && N%4 == 0 {
		name += "_vec"
	}
	p.Launches = append(p.Launches, Launch{Kernel: name, Grid: grid, Block: cuda.Dim3{X: m.TileBlock}})
	if nparts > 1 {
		p.Launches = append(p.Launches, flat("matmul_reduce", int64(M)*int64(N), m.ReduceBlock, m.ReduceBlock))
	}
	return p
}

// waveFits: a grid of blocks on slots resident blocks is worth its fewer partials when it has many_waves waves
// or more (the blocks of the last wave then overlap the others' ends), or when its last wave is at least
// full_wave_num/full_wave_den full (blocks ≥ that fraction of whole waves).
func waveFits(blocks, slots int) bool {
	m := &rules.Matmul
	waves := (blocks + slots - 1) / slots
	return blocks >= m.ManyWaves*slots || blocks*m.FullWaveDen >= m.FullWaveNum*waves*slots
}

// planRMSNorm: canonical rows longer than warp_max_c that fit the per-row kernel's shared memory (its
// row_segments segments' strides) run rmsnorm_row, one block a row; shorter rows, the standard profile, and
// general (tests), run rmsnorm.
func planRMSNorm(l Limits, p kernels.Profile, general bool, rows, C int) Launch {
	r := &rules.RMSNorm
	seg := r.RowSegments
	stride := ((C+seg-1)/seg+31)/32*32 + 1 // rmsnorm_row's per-segment stride in shared memory
	// Short rows (a head's q/k norm: C = 128, 131072 rows at 8 × 512 tokens of Qwen3-8B) run a warp a row: a block
	// a row spends its time in block scheduling and two barriers for 16 FMAs a chain (308 µs a launch on the H200,
	// 73 µs with the warp kernel). Both kernels run the same canonical chains and tree (docs/arithmetic.md §5).
	if smem := 4 * seg * stride; p == kernels.Canonical && smem <= l.rowSmem() && !general && C > r.WarpMaxC {
		return Launch{Kernel: "rmsnorm_row", Grid: cuda.Dim3{X: rows}, Block: cuda.Dim3{X: r.RowBlock}, Smem: smem}
	}
	return flat("rmsnorm", int64(rows), r.RowsPerBlock, r.Block)
}

// AttentionPlan is attention's launch and the two values its kernels take besides the tensors: tq, the query
// rows one attention_blk block serves (0 for the general kernel), and mode, the general kernel's variant.
type AttentionPlan struct {
	Launch
	TQ, Mode int
}

// planAttention: canonical attention runs attention_blk<dl> (64-key blocks, warps warps, at most tasks
// (query row, head) tasks a block; dl output dims per lane) when a block's tasks and shared memory fit; else, and
// for the standard profile and general (tests), the general kernel in mode 0 canonical, 1 standard prefill
// (two-pass), 2 standard decode (split-KV), 3 fast-exp.
func planAttention(l Limits, p kernels.Profile, fast, general bool, T, nh, nkv, hd int) AttentionPlan {
	a := &rules.Attention
	if p == kernels.Canonical && !general {
		grp := nh / nkv
		tq := min(T, max(1, a.Tasks/grp))
		smem := 4 * (a.KB*(hd+4) + a.KB*hd + a.Tasks*a.KB + a.Tasks*hd)
		if tq*grp <= a.Tasks && smem <= l.rowSmem() {
			name := fmt.Sprintf("attention_blk%d", pow2Ceil(ceilDiv(int64(hd), 32)))
			if fast {
				name += "_fast"
			}
			return AttentionPlan{Launch: Launch{Kernel: name, Grid: cuda.Dim3{X: ceilDiv(int64(T), tq), Y: nkv},
				Block: cuda.Dim3{X: 32 * a.Warps}, Smem: smem}, TQ: tq}
		}
	}
	mode := 0
	if fast {
		mode = 3
	} else if p == kernels.Standard {
		mode = 2
		if T > 1 {
			mode = 1
		}
	}
	return AttentionPlan{Launch: flat("attention", int64(T)*int64(nh), a.RowsPerBlock, a.Block), Mode: mode}
}

// planElementwise: residual, swiglu, round_buf, add_bias and embedding, one thread an element.
func planElementwise(kernel string, n int64) Launch {
	b := rules.Elementwise.Block
	return flat(kernel, n, b, b)
}

// planSwiGLU: swiglu4 (four elements a thread, 16-byte accesses) when n is a multiple of 4 and the three
// buffers are 16-byte aligned, else swiglu; both take (out, gate, up, n, dt) and give the same bits.
func planSwiGLU(n int64, aligned bool) Launch {
	if aligned && n%4 == 0 {
		b := rules.Elementwise.Block
		return flat("swiglu4", n/4, b, b)
	}
	return planElementwise("swiglu", n)
}

// planLogSoftmaxMax: ls_max_part over chunk-column blocks of each row, then ls_max_fin; nb is the partial
// maxima per row.
func planLogSoftmaxMax(T, vLocal int) (part, fin Launch, nb int) {
	s := &rules.LogSoftmax
	nb = ceilDiv(int64(vLocal), s.Chunk)
	part = Launch{Kernel: "ls_max_part", Grid: cuda.Dim3{X: nb, Y: T}, Block: cuda.Dim3{X: s.Block}}
	return part, flat("ls_max_fin", int64(T), s.MaxFinRowsPerBlock, s.Block), nb
}

// planLogSoftmaxSum: ls_sum_seg, one block per (segment, row), then ls_tree.
func planLogSoftmaxSum(T, nseg int) (seg, tree Launch) {
	s := &rules.LogSoftmax
	seg = Launch{Kernel: "ls_sum_seg", Grid: cuda.Dim3{X: nseg, Y: T}, Block: cuda.Dim3{X: s.Block}}
	return seg, flat("ls_tree", int64(T), s.TreeBlock, s.TreeBlock)
}

func planLogSoftmaxFinish(T, V int) Launch {
	b := rules.LogSoftmax.FinishBlock
	return flat("ls_finish", int64(T)*int64(V), b, b)
}

func planLogProbs(T int) Launch {
	b := rules.LogProbs.Block
	return flat("logprobs", int64(T), b, b)
}

func planSample(T int) Launch {
	return Launch{Kernel: "sample", Grid: cuda.Dim3{X: T}, Block: cuda.Dim3{X: rules.Sample.Block}}
}
