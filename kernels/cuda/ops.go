package cudakernels

import (
	"fmt"

	"bitalign/cuda"
	"bitalign/kernels"
)

// MatmulForward: x is (M, K), w is (N, K), bias is (N) or 0, out is (M, N) = round_dt(x·wᵀ + bias)
// (kernels.MatmulForward). dt NoRound skips the final rounding.
func (k *Kernels) MatmulForward(c *cuda.Ctx, p kernels.Profile, dt int, out, x, w, bias cuda.Ptr, M, K, N int) error {
	return k.MatmulForwardW(c, p, dt, out, x, w, kernels.F32, bias, M, K, N)
}

// MatmulForwardW is MatmulForward with w stored as wdt (kernels.WeightDTypes: float32 values, or bf16 or f16
// bits read by the WeightSuffix twins, which HasWeights(wdt) says the PTX has).
func (k *Kernels) MatmulForwardW(c *cuda.Ctx, p kernels.Profile, dt int, out, x, w cuda.Ptr, wdt kernels.DType, bias cuda.Ptr, M, K, N int) error {
	b, tree := kernels.MatmulBounds(p, M, K) // the CPU reference's bounds and combine order, from the same function
	return k.matmul(c, out, x, w, wdt, bias, M, K, N, b, tree, dt)
}

// MatmulPartial: this rank's share of a row-parallel matmul (kernels.MatmulPartial): x is (M, kLocal), w is
// (N, kLocal), out (M, N) gets the rank's float32 subtree of G = 8/tp local segments, unrounded, no bias.
func (k *Kernels) MatmulPartial(c *cuda.Ctx, p kernels.Profile, out, x, w cuda.Ptr, M, kLocal, N, tp int) error {
	return k.MatmulPartialW(c, p, out, x, w, kernels.F32, M, kLocal, N, tp)
}

// MatmulPartialW is MatmulPartial with w stored as wdt (see MatmulForwardW).
func (k *Kernels) MatmulPartialW(c *cuda.Ctx, p kernels.Profile, out, x, w cuda.Ptr, wdt kernels.DType, M, kLocal, N, tp int) error {
	b, tree, err := kernels.PartialBounds(p, kLocal, tp)
	if err != nil {
		return err
	}
	return k.matmul(c, out, x, w, wdt, 0, M, kLocal, N, b, tree, NoRound)
}

// matmul launches the plan for M (planMatmul): b are the chains' K-ranges, tree says whether their partials
// are added by the tree (else left to right, the kernels' seq = 1).
// wdt: w's stored dtype; the plan is the float32 weight's (same grid, block and shared memory), its first
// kernel the WeightSuffix(wdt) twin.
func (k *Kernels) matmul(c *cuda.Ctx, out, x, w cuda.Ptr, wdt kernels.DType, bias cuda.Ptr, M, K, N int, b []int, tree bool, dt int) error {
	if !kernels.IsWeightDType(wdt) {
		return fmt.Errorf("cudakernels: MatmulForward: weight dtype %v (want one of %v)", wdt, kernels.WeightDTypes)
	}
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
	pl := planMatmul(k.lim, M, K, N, b, tree, vec, k.tile)
	l := pl.Launches[0]
	l.Kernel += WeightSuffix(wdt)
	if pl.Tile.bm == 0 { // matmul_dec or matmul_small
		return k.launch(c, l, out, x, w, bias, M, K, N, sg, seq, dt)
	}
	scratch, err := k.Scratch(c, 4*(pl.PartFloats+pl.StackFloats))
	if err != nil {
		return err
	}
	part, stack := scratch, scratch.Add(4*pl.PartFloats)
	if err := k.launch(c, l, out, part, stack, x, w, bias, M, K, N, sg, pl.Tile.g, seq, dt); err != nil {
		return err
	}
	if len(pl.Launches) == 1 {
		return nil
	}
	return k.launch(c, pl.Launches[1], out, part, bias, M, N, int(pl.Launches[0].Grid.Z), seq, dt)
}

// RMSNormForward: x is (rows, C), w is (C), out is (rows, C) (kernels.RMSNormForward); out may alias x.
func (k *Kernels) RMSNormForward(c *cuda.Ctx, p kernels.Profile, dt kernels.DType, out, x, w cuda.Ptr, rows, C int, eps float32) error {
	return k.RMSNormForwardW(c, p, dt, out, x, w, kernels.F32, rows, C, eps)
}

// RMSNormForwardW is RMSNormForward with w stored as wdt (see MatmulForwardW): the plan's kernel's
// WeightSuffix(wdt) twin.
func (k *Kernels) RMSNormForwardW(c *cuda.Ctx, p kernels.Profile, dt kernels.DType, out, x, w cuda.Ptr, wdt kernels.DType, rows, C int, eps float32) error {
	if !kernels.IsWeightDType(wdt) {
		return fmt.Errorf("cudakernels: RMSNormForward: weight dtype %v (want one of %v)", wdt, kernels.WeightDTypes)
	}
	if rows <= 0 {
		return nil
	}
	l := planRMSNorm(k.lim, p, k.general, rows, C)
	row := l.Kernel == "rmsnorm_row"
	l.Kernel += WeightSuffix(wdt)
	if row {
		vec := 0
		if C%4 == 0 && (out|x|w)%16 == 0 {
			vec = 1
		}
		return k.launch(c, l, out, x, w, rows, C, eps, DTCode(dt), vec)
	}
	return k.launch(c, l, out, x, w, rows, C, eps, profCode(p), DTCode(dt))
}

// RoPEForward: x and out are (T, heads·hd), pos is (T) int32 on the device, cos and sin are (maxPos, hd/2)
// (kernels.RoPEForward); out may alias x.
func (k *Kernels) RoPEForward(c *cuda.Ctx, dt kernels.DType, out, x, pos cuda.Ptr, T, heads, hd int, cos, sin cuda.Ptr) error {
	n := int64(T) * int64(heads) * int64(hd/2)
	if n == 0 {
		return nil
	}
	return k.launch(c, planElementwise("rope", n), out, x, pos, T, heads, hd, cos, sin, DTCode(dt))
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
	if hd > rules.Attention.MaxHeadDim {
		return fmt.Errorf("cudakernels: AttentionForward: head dim %d > %d", hd, rules.Attention.MaxHeadDim)
	}
	if T <= 0 {
		return nil
	}
	if p == kernels.TC && !fast {
		return k.attentionTC(c, dt, out, q, kc, vc, pos, T, S, nh, nkv, hd, scale)
	}
	pl := planAttention(k.lim, p, fast, k.general, T, nh, nkv, hd)
	if pl.Kernel != "attention" {
		return k.launch(c, pl.Launch, out, q, kc, vc, pos, T, nh, nkv, hd, scale, DTCode(dt), pl.TQ)
	}
	return k.launch(c, pl.Launch, out, q, kc, vc, pos, T, S, nh, nkv, hd, scale, pl.Mode, DTCode(dt))
}

// ResidualForward: out = round_dt(a ⊕ b) over n elements (kernels.ResidualForward); dt NoRound: plain add.
func (k *Kernels) ResidualForward(c *cuda.Ctx, dt int, out, a, b cuda.Ptr, n int) error {
	if n <= 0 {
		return nil
	}
	return k.launch(c, planElementwise("residual", int64(n)), out, a, b, int64(n), dt)
}

// SwiGLUForward: out = round_dt(round_dt(SiLU(gate))·up) over n elements (kernels.SwiGLUForward).
func (k *Kernels) SwiGLUForward(c *cuda.Ctx, dt kernels.DType, out, gate, up cuda.Ptr, n int) error {
	if n <= 0 {
		return nil
	}
	aligned := (uint64(out)|uint64(gate)|uint64(up))%16 == 0
	return k.launch(c, planSwiGLU(int64(n), aligned), out, gate, up, int64(n), DTCode(dt))
}

// Round rounds n elements of x to dt in place (kernels.DType.RoundSlice).
func (k *Kernels) Round(c *cuda.Ctx, dt kernels.DType, x cuda.Ptr, n int) error {
	if n <= 0 {
		return nil
	}
	return k.launch(c, planElementwise("round_buf", int64(n)), x, int64(n), DTCode(dt))
}

// NarrowBF16: out (n uint16) = the bf16 bits of x's n float32 values (fp.F32ToBF16), for the recorder's copies
// to the host. HasNarrowBF16 says whether the loaded PTX has the kernel.
func (k *Kernels) NarrowBF16(c *cuda.Ctx, out, x cuda.Ptr, n int) error {
	if n <= 0 {
		return nil
	}
	return k.launch(c, planElementwise("narrow_bf16", int64(n)), out, x, int64(n))
}

// HasNarrowBF16 reports whether the loaded PTX has narrow_bf16 (PTX built before it has not: the engine then
// copies float32 and narrows on the host).
func (k *Kernels) HasNarrowBF16() bool { return k.fn["narrow_bf16"] != nil }

// AddBias: out is (M, N), bias is (N): out[m,n] ⊕= bias[n], unrounded.
func (k *Kernels) AddBias(c *cuda.Ctx, out, bias cuda.Ptr, M, N int) error {
	if M*N <= 0 {
		return nil
	}
	return k.launch(c, planElementwise("add_bias", int64(M)*int64(N)), out, bias, M, N)
}

// EmbeddingForward: table is (V, C), tokens is (T) int32 on the device, out is (T, C)
// (kernels.EmbeddingForward). The caller checks the tokens (a bad one gives NaN rows here).
func (k *Kernels) EmbeddingForward(c *cuda.Ctx, dt kernels.DType, out, table, tokens cuda.Ptr, T, V, C int) error {
	return k.EmbeddingForwardW(c, dt, out, table, kernels.F32, tokens, T, V, C)
}

// EmbeddingForwardW is EmbeddingForward with table stored as wdt (see MatmulForwardW).
func (k *Kernels) EmbeddingForwardW(c *cuda.Ctx, dt kernels.DType, out, table cuda.Ptr, wdt kernels.DType, tokens cuda.Ptr, T, V, C int) error {
	if !kernels.IsWeightDType(wdt) {
		return fmt.Errorf("cudakernels: EmbeddingForward: table dtype %v (want one of %v)", wdt, kernels.WeightDTypes)
	}
	if T*C <= 0 {
		return nil
	}
	return k.launch(c, planElementwise("embedding"+WeightSuffix(wdt), int64(T)*int64(C)), out, table, tokens, T, V, C, DTCode(dt))
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
	part, fin, nb := planLogSoftmaxMax(T, vLocal)
	pm, err := k.auxBuf(c, int64(T)*int64(nb)*4)
	if err != nil {
		return err
	}
	if err := k.launch(c, part, pm, logits, T, vLocal); err != nil {
		return err
	}
	return k.launch(c, fin, m, pm, T, nb, z)
}

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
	seg, tree := planLogSoftmaxSum(T, nseg)
	if err := k.launch(c, seg, part, logits, m, T, vLocal, nseg); err != nil {
		return err
	}
	return k.launch(c, tree, S, part, T, nseg)
}

// LogProbsTarget: d (T) = (x[t, target−off] ⊖ m) ⊕ 0 where this rank holds the target (columns
// [off, off+vLocal)), else +0; all-reduced over ranks, then logprob = d ⊖ Log(S).
func (k *Kernels) LogProbsTarget(c *cuda.Ctx, d, logits, targets, m cuda.Ptr, T, vLocal, off int) error {
	return k.launch(c, planLogProbs(T), d, logits, targets, m, cuda.Ptr(0), T, vLocal, off, 0)
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
	return k.launch(c, planLogSoftmaxFinish(T, V), out, logits, m, S, T, V)
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
	return k.launch(c, planLogProbs(T), out, logits, targets, m, S, T, V, 0, 1)
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
	return k.launch(c, planSample(T), out, logits, T, V, sp.Temperature, sp.Seed, seqs, poss)
}
