package cudakernels

import (
	"fmt"
	"math/bits"

	"bitalign/cuda"
	"bitalign/kernels"
)

// Kernel choice by M (the arithmetic is the same in all three; only speed differs):
//   - decM (32) or fewer rows, 16-byte aligned segments: matmul_dec (w and x streamed through shared memory
//     by cp.async, one warp per segment, one lane per column);
//   - smallM (16) or fewer rows, unaligned: matmul_small (each thread streams its own w row slice);
//   - else the tiled kernel (matmul_t128 or matmul_t64), each block running G of the segments in a row and
//     adding their partials in the tree's order; matmul_reduce adds the blocks' subtrees when G < nseg.
const (
	decM   = 32
	smallM = 16
)

// decConfig is each matmul_dec kernel's (span CH, stages ST), as its DEC(MT, CH, ST) line in matmul.cu says
// (TestDecConfigMatchesSource keeps them in step).
var decConfig = map[int][2]int{1: {64, 3}, 2: {64, 3}, 4: {64, 2}, 8: {32, 3}, 16: {32, 3}, 32: {32, 3}}

// decSharedBytes is matmul_dec<mt>'s dynamic shared memory: ST stages of w [8][32][CH+4] and x [8][MT][CH].
func decSharedBytes(mt int) int {
	c := decConfig[mt]
	ch, st := c[0], c[1]
	return st * (8*32*(ch+4) + 8*mt*ch) * 4
}

// MatmulForward: x is (M, K), w is (N, K), bias is (N) or 0, out is (M, N) = round_dt(x·wᵀ + bias)
// (kernels.MatmulForward). dt NoRound skips the final rounding.
func (k *Kernels) MatmulForward(c *cuda.Ctx, p kernels.Profile, dt int, out, x, w, bias cuda.Ptr, M, K, N int) error {
	b, tree := kernels.MatmulBounds(p, M, K) // the CPU reference's bounds and combine order, from the same function
	return k.matmul(c, out, x, w, bias, M, K, N, b, tree, dt)
}

// MatmulPartial: this rank's share of a row-parallel matmul (kernels.MatmulPartial): x is (M, kLocal), w is
// (N, kLocal), out (M, N) gets the rank's float32 subtree of G = 8/tp local segments, unrounded, no bias.
func (k *Kernels) MatmulPartial(c *cuda.Ctx, p kernels.Profile, out, x, w cuda.Ptr, M, kLocal, N, tp int) error {
	b, tree, err := kernels.PartialBounds(p, kLocal, tp)
	if err != nil {
		return err
	}
	return k.matmul(c, out, x, w, 0, M, kLocal, N, b, tree, NoRound)
}

// matmul launches the kernel for M: b are the chains' K-ranges, tree says whether their partials are added
// by the tree (else left to right, the kernels' seq = 1).
func (k *Kernels) matmul(c *cuda.Ctx, out, x, w, bias cuda.Ptr, M, K, N int, b []int, tree bool, dt int) error {
	if M <= 0 || N <= 0 {
		return nil
	}
	seq := 0
	if !tree {
		seq = 1
	}
	vec := K%4 == 0
	for _, v := range b {
		vec = vec && v%4 == 0
	}
	sg := segs(b)
	if vec && M <= decM {
		mt := 1
		for mt < M {
			mt *= 2
		}
		return k.launch(c, fmt.Sprintf("matmul_dec%d", mt), blocks(int64(N), 32), cuda.Dim3{X: 256}, decSharedBytes(mt),
			out, x, w, bias, M, K, N, sg, seq, dt)
	}
	if M <= smallM {
		mt := 1
		for mt < M {
			mt *= 2
		}
		const rows = 8 // columns per block (64 threads): ~4 blocks per SM at N = 4096 balance the waves
		return k.launch(c, fmt.Sprintf("matmul_small%d", mt), blocks(int64(N), rows), cuda.Dim3{X: rows * 8}, 0, out, x, w, bias, M, K, N, sg, seq, dt)
	}
	nseg := len(b) - 1
	tc := k.tileFor(M, N, nseg, seq == 1)
	grid := cuda.Dim3{X: (N + 127) / 128, Y: (M + tc.bm - 1) / tc.bm, Z: nseg / tc.g}
	nparts := nseg / tc.g
	partFloats := int64(0)
	if nparts > 1 {
		partFloats = (int64(nparts)*int64(M)*int64(N) + 63) &^ 63 // the stack after it stays 256-byte aligned
	}
	nslots := bits.Len(uint(tc.g)) - 1
	stackFloats := int64(grid.X) * int64(grid.Y) * int64(grid.Z) * int64(nslots) * int64(tc.bm) * 128
	scratch, err := k.Scratch(c, 4*(partFloats+stackFloats))
	if err != nil {
		return err
	}
	part, stack := scratch, scratch.Add(4*partFloats)
	name := fmt.Sprintf("matmul_t%d", tc.bm)
	if vec && N%4 == 0 {
		name += "_vec"
	}
	if err := k.launch(c, name, grid, cuda.Dim3{X: 256}, 0, out, part, stack, x, w, bias, M, K, N, sg, tc.g, seq, dt); err != nil {
		return err
	}
	if nparts == 1 {
		return nil
	}
	return k.launch(c, "matmul_reduce", blocks(int64(M)*int64(N), 256), cuda.Dim3{X: 256}, 0,
		out, part, bias, M, N, nparts, seq, dt)
}

// tileConfig is the tiled matmul's launch shape: bm output rows per tile (128 or 64) and g, the segments one
// block runs in a row (g = nseg: no reduction kernel). Neither changes a bit of the result.
type tileConfig struct{ bm, g int }

// tileFor picks the tiled kernel's shape (k.tile, when set, overrides each field it sets; benchmarks and
// tests use it). The largest g that still fills the GPU once (two blocks per SM, 15/16 of a wave: K = N = 4096
// measured g = 8 at M = 1024 and up, 4 at 512, 2 at 256, 1 at 128, docs/gpu.md). The standard profile adds its
// parts left to right, so its g is 1 or nseg.
func (k *Kernels) tileFor(M, N, nseg int, seq bool) tileConfig {
	tc := tileConfig{bm: 128, g: nseg}
	if M <= 64 {
		tc.bm = 64
	}
	if k.tile.bm != 0 {
		tc.bm = k.tile.bm
	}
	tiles := ((N + 127) / 128) * ((M + tc.bm - 1) / tc.bm)
	want := 2 * k.dev.SMCount() * 15 / 16
	for tc.g > 1 && tiles*(nseg/tc.g) < want {
		tc.g /= 2
	}
	if k.tile.g != 0 && nseg%k.tile.g == 0 {
		tc.g = k.tile.g
	}
	if seq && tc.g != nseg {
		tc.g = 1
	}
	return tc
}

// RMSNormForward: x is (rows, C), w is (C), out is (rows, C) (kernels.RMSNormForward); out may alias x.
func (k *Kernels) RMSNormForward(c *cuda.Ctx, p kernels.Profile, dt kernels.DType, out, x, w cuda.Ptr, rows, C int, eps float32) error {
	if rows <= 0 {
		return nil
	}
	stride := ((C+7)/8+31)/32*32 + 1 // rmsnorm_row's per-segment stride in shared memory
	if smem := 4 * 8 * stride; p == kernels.Canonical && smem <= k.rowSmem && !k.general {
		vec := 0
		if C%4 == 0 && (out|x|w)%16 == 0 {
			vec = 1
		}
		return k.launch(c, "rmsnorm_row", cuda.Dim3{X: rows}, cuda.Dim3{X: 128}, smem, out, x, w, rows, C, eps, DTCode(dt), vec)
	}
	return k.launch(c, "rmsnorm", blocks(int64(rows), 8), cuda.Dim3{X: 256}, 0, out, x, w, rows, C, eps, profCode(p), DTCode(dt))
}

// RoPEForward: x and out are (T, heads·hd), pos is (T) int32 on the device, cos and sin are (maxPos, hd/2)
// (kernels.RoPEForward); out may alias x.
func (k *Kernels) RoPEForward(c *cuda.Ctx, dt kernels.DType, out, x, pos cuda.Ptr, T, heads, hd int, cos, sin cuda.Ptr) error {
	n := int64(T) * int64(heads) * int64(hd/2)
	if n == 0 {
		return nil
	}
	return k.launch(c, "rope", blocks(n, 256), cuda.Dim3{X: 256}, 0, out, x, pos, T, heads, hd, cos, sin, DTCode(dt))
}

// AttentionForward: q is (T, nh·hd), kc and vc are (S, nkv·hd), pos is (T) int32 on the device, out is
// (T, nh·hd) (kernels.AttentionForward). Positions must be < S (checked by the caller, who knows them).
func (k *Kernels) AttentionForward(c *cuda.Ctx, p kernels.Profile, dt kernels.DType, out, q, kc, vc, pos cuda.Ptr, T, S, nh, nkv, hd int, scale float32) error {
	return k.attention(c, p, false, dt, out, q, kc, vc, pos, T, S, nh, nkv, hd, scale)
}

// AttentionFastExp is canonical attention with the fast-exp fault's exponential (kernels.AttentionForwardExp
// with kernels.FastExp).
func (k *Kernels) AttentionFastExp(c *cuda.Ctx, dt kernels.DType, out, q, kc, vc, pos cuda.Ptr, T, S, nh, nkv, hd int, scale float32) error {
	return k.attention(c, kernels.Canonical, true, dt, out, q, kc, vc, pos, T, S, nh, nkv, hd, scale)
}

func (k *Kernels) attention(c *cuda.Ctx, p kernels.Profile, fast bool, dt kernels.DType, out, q, kc, vc, pos cuda.Ptr, T, S, nh, nkv, hd int, scale float32) error {
	if nkv <= 0 || nh%nkv != 0 {
		return fmt.Errorf("cudakernels: AttentionForward: %d query heads not a multiple of %d kv heads", nh, nkv)
	}
	if hd > 256 {
		return fmt.Errorf("cudakernels: AttentionForward: head dim %d > 256", hd)
	}
	if T <= 0 {
		return nil
	}
	if p == kernels.Canonical && !k.general {
		grp := nh / nkv
		tq := min(T, max(1, attTasks/grp))
		smem := 4 * (attKB*(hd+4) + attKB*hd + attTasks*attKB + attTasks*hd)
		if tq*grp <= attTasks && smem <= k.rowSmem {
			dl := 1 // output dims per lane
			for 32*dl < hd {
				dl *= 2
			}
			name := fmt.Sprintf("attention_blk%d", dl)
			if fast {
				name += "_fast"
			}
			return k.launch(c, name, cuda.Dim3{X: (T + tq - 1) / tq, Y: nkv}, cuda.Dim3{X: 32 * attWarps}, smem,
				out, q, kc, vc, pos, T, nh, nkv, hd, scale, DTCode(dt), tq)
		}
	}
	mode := 0
	if fast {
		mode = 3
	} else if p == kernels.Standard {
		mode = 2 // decode: split-KV
		if T > 1 {
			mode = 1 // prefill: two-pass
		}
	}
	return k.launch(c, "attention", blocks(int64(T)*int64(nh), 4), cuda.Dim3{X: 128}, 0,
		out, q, kc, vc, pos, T, S, nh, nkv, hd, scale, mode, DTCode(dt))
}

// attention_blk's shape (ATT_KB, ATT_WARPS, ATT_WARPS·ATT_TPW in attention.cu): 64-key blocks, 8 warps, at most
// 32 (query row, head) tasks per block.
const (
	attKB    = 64
	attWarps = 8
	attTasks = 32
)

// ResidualForward: out = round_dt(a ⊕ b) over n elements (kernels.ResidualForward); dt NoRound: plain add.
func (k *Kernels) ResidualForward(c *cuda.Ctx, dt int, out, a, b cuda.Ptr, n int) error {
	if n <= 0 {
		return nil
	}
	return k.launch(c, "residual", blocks(int64(n), 256), cuda.Dim3{X: 256}, 0, out, a, b, int64(n), dt)
}

// SwiGLUForward: out = round_dt(round_dt(SiLU(gate))·up) over n elements (kernels.SwiGLUForward).
func (k *Kernels) SwiGLUForward(c *cuda.Ctx, dt kernels.DType, out, gate, up cuda.Ptr, n int) error {
	if n <= 0 {
		return nil
	}
	return k.launch(c, "swiglu", blocks(int64(n), 256), cuda.Dim3{X: 256}, 0, out, gate, up, int64(n), DTCode(dt))
}

// Round rounds n elements of x to dt in place (kernels.DType.RoundSlice).
func (k *Kernels) Round(c *cuda.Ctx, dt kernels.DType, x cuda.Ptr, n int) error {
	if n <= 0 {
		return nil
	}
	return k.launch(c, "round_buf", blocks(int64(n), 256), cuda.Dim3{X: 256}, 0, x, int64(n), DTCode(dt))
}

// AddBias: out is (M, N), bias is (N): out[m,n] ⊕= bias[n], unrounded.
func (k *Kernels) AddBias(c *cuda.Ctx, out, bias cuda.Ptr, M, N int) error {
	if M*N <= 0 {
		return nil
	}
	return k.launch(c, "add_bias", blocks(int64(M)*int64(N), 256), cuda.Dim3{X: 256}, 0, out, bias, M, N)
}

// EmbeddingForward: table is (V, C), tokens is (T) int32 on the device, out is (T, C)
// (kernels.EmbeddingForward). The caller checks the tokens (a bad one gives NaN rows here).
func (k *Kernels) EmbeddingForward(c *cuda.Ctx, dt kernels.DType, out, table, tokens cuda.Ptr, T, V, C int) error {
	if T*C <= 0 {
		return nil
	}
	return k.launch(c, "embedding", blocks(int64(T)*int64(C), 256), cuda.Dim3{X: 256}, 0, out, table, tokens, T, V, C, DTCode(dt))
}

// LogSoftmaxStats: logits is (T, V) on one rank (tp = 1); m and S (each T floats, device) receive the row max
// and the 8-segment sum of Exp(x ⊖ m).
func (k *Kernels) LogSoftmaxStats(c *cuda.Ctx, p kernels.Profile, m, S, logits cuda.Ptr, T, V int) error {
	if err := k.LogSoftmaxMax(c, m, logits, T, V, true); err != nil {
		return err
	}
	return k.LogSoftmaxSum(c, p, S, logits, m, T, V, 1)
}

// LogSoftmaxMax: m (T) = the max of each row of this rank's logits (T, vLocal), NaN if any NaN. zeroFix maps
// a zero max to +0 (do it after the AllReduceMax when the vocabulary is sharded).
func (k *Kernels) LogSoftmaxMax(c *cuda.Ctx, m, logits cuda.Ptr, T, vLocal int, zeroFix bool) error {
	z := 0
	if zeroFix {
		z = 1
	}
	if T <= 0 {
		return nil
	}
	nb := (vLocal + lsChunk - 1) / lsChunk
	pm, err := k.auxBuf(c, int64(T)*int64(nb)*4)
	if err != nil {
		return err
	}
	if err := k.launch(c, "ls_max_part", cuda.Dim3{X: nb, Y: T}, cuda.Dim3{X: 256}, 0, pm, logits, T, vLocal); err != nil {
		return err
	}
	return k.launch(c, "ls_max_fin", blocks(int64(T), 8), cuda.Dim3{X: 256}, 0, m, pm, T, nb, z)
}

// lsChunk is ls_max_part's columns per block (LSC in logsoftmax.cu).
const lsChunk = 4096

// LogSoftmaxSum: S (T) = this rank's subtree (8/tp segments; standard: one chain) of Σ Exp(x ⊖ m) over its
// logits (T, vLocal); the AllReduce over ranks finishes the tree.
func (k *Kernels) LogSoftmaxSum(c *cuda.Ctx, p kernels.Profile, S, logits, m cuda.Ptr, T, vLocal, tp int) error {
	if T <= 0 {
		return nil
	}
	nseg, err := kernels.LocalSegments("LogSoftmax", vLocal, tp)
	if err != nil {
		return err
	}
	if p == kernels.Standard {
		nseg = 1 // one chain over the row
	}
	part, err := k.auxBuf(c, int64(T)*int64(nseg)*4)
	if err != nil {
		return err
	}
	if err := k.launch(c, "ls_sum_seg", cuda.Dim3{X: nseg, Y: T}, cuda.Dim3{X: 256}, 0, part, logits, m, T, vLocal, nseg); err != nil {
		return err
	}
	return k.launch(c, "ls_tree", blocks(int64(T), 128), cuda.Dim3{X: 128}, 0, S, part, T, nseg)
}

// LogProbsTarget: d (T) = (x[t, target−off] ⊖ m) ⊕ 0 where this rank holds the target (columns
// [off, off+vLocal)), else +0; all-reduced over ranks, then logprob = d ⊖ Log(S).
func (k *Kernels) LogProbsTarget(c *cuda.Ctx, d, logits, targets, m cuda.Ptr, T, vLocal, off int) error {
	return k.launch(c, "logprobs", blocks(int64(T), 128), cuda.Dim3{X: 128}, 0, d, logits, targets, m, cuda.Ptr(0), T, vLocal, off, 0)
}

// statsInScratch runs LogSoftmaxStats of the (T, V) logits into the scratch: the rows' m and S, (T) float32
// each, valid until the scratch is next used.
func (k *Kernels) statsInScratch(c *cuda.Ctx, p kernels.Profile, logits cuda.Ptr, T, V int) (m, S cuda.Ptr, err error) {
	st, err := k.Scratch(c, int64(2*T)*4)
	if err != nil {
		return 0, 0, err
	}
	m, S = st, st.Add(int64(T)*4)
	return m, S, k.LogSoftmaxStats(c, p, m, S, logits, T, V)
}

// LogSoftmaxForward: logits and out are (T, V), float32 (kernels.LogSoftmaxForward with one rank).
func (k *Kernels) LogSoftmaxForward(c *cuda.Ctx, p kernels.Profile, out, logits cuda.Ptr, T, V int) error {
	if T <= 0 {
		return nil
	}
	m, S, err := k.statsInScratch(c, p, logits, T, V)
	if err != nil {
		return err
	}
	return k.launch(c, "ls_finish", blocks(int64(T)*int64(V), 256), cuda.Dim3{X: 256}, 0, out, logits, m, S, T, V)
}

// LogProbs: out[t] = log p(targets[t]) (kernels.LogProbs with one rank); targets is (T) int32 on the device.
func (k *Kernels) LogProbs(c *cuda.Ctx, p kernels.Profile, out, logits, targets cuda.Ptr, T, V int) error {
	if T <= 0 {
		return nil
	}
	m, S, err := k.statsInScratch(c, p, logits, T, V)
	if err != nil {
		return err
	}
	return k.launch(c, "logprobs", blocks(int64(T), 128), cuda.Dim3{X: 128}, 0, out, logits, targets, m, S, T, V, 0, 1)
}

// Sample: logits is (T, V), seqs and poss are (T) int64 on the device, out is (T) int32 tokens
// (kernels.Sample with TopK and TopP off; those need a sort and run on the host).
func (k *Kernels) Sample(c *cuda.Ctx, out, logits cuda.Ptr, T, V int, sp kernels.SampleParams, seqs, poss cuda.Ptr) error {
	if (sp.TopK > 0 && sp.TopK < V) || (sp.TopP > 0 && sp.TopP < 1) {
		return fmt.Errorf("cudakernels: Sample: top-k/top-p run on the host (kernels.Sample)")
	}
	if T <= 0 {
		return nil
	}
	return k.launch(c, "sample", cuda.Dim3{X: T}, cuda.Dim3{X: 256}, 0, out, logits, T, V, sp.Temperature, sp.Seed, seqs, poss)
}
