package kernels

import (
	"fmt"
	"math"
)

// AttentionTCChunk is tc.3's chunk: the keys [256c, 256c+256) of chunk c are one online-softmax state from
// scratch, and a query's chunk states are folded in chunk order (docs/arithmetic.md tc.3). The bounds depend on
// key positions only, so a decode step may give each chunk its own block.
const AttentionTCChunk = 4 * AttentionBlock

// AttentionTC is causal grouped-query attention with tensor-core products (docs/arithmetic.md tc.3): §7's
// 64-key blocks from position 0 and online-softmax update within each AttentionTCChunk of keys, the chunks'
// states folded in order, the scores q·k as a chain of k-steps over hd, the probabilities rounded to bf16 and
// p·V as four k-steps of 16 keys per block (keys past the block's end +0 in both operands). q is (T, nh*hd), kCache and vCache are (S, nkv*hd), qPos is (T) (each < S), out is
// (T, nh*hd); hd must be a multiple of 16 and q, k, v must hold bf16 values. A query's bits depend only on its
// position and the cache: prefill, chunked prefill and decode agree.
func AttentionTC(dt DType, out, q, kCache, vCache []float32, qPos []int32, T, S, nh, nkv, hd int, scale float32) error {
	const op = "AttentionTC"
	if nkv <= 0 || nh%nkv != 0 {
		return fmt.Errorf("kernels: %s: %d query heads not a multiple of %d kv heads", op, nh, nkv)
	}
	if hd <= 0 || hd%TCStepK != 0 {
		return fmt.Errorf("kernels: %s: head dim %d is not a multiple of the k-step %d", op, hd, TCStepK)
	}
	checkLen(op, "q", q, T*nh*hd)
	checkLen(op, "out", out, T*nh*hd)
	checkLen(op, "kCache", kCache, S*nkv*hd)
	checkLen(op, "vCache", vCache, S*nkv*hd)
	for t := 0; t < T; t++ {
		if qPos[t] < 0 || int(qPos[t]) >= S {
			return fmt.Errorf("kernels: %s: query %d at position %d outside the cache [0, %d)", op, t, qPos[t], S)
		}
	}
	if T <= 0 {
		return nil
	}
	// q as T·nh rows of hd, k as S·nkv rows of hd, v transposed to nkv·hd rows of the keys (padded to whole
	// blocks), so that one p·V step reads 16 consecutive keys of one output dim.
	qs, err := decodeTC(op, "q", q[:T*nh*hd], T*nh, hd)
	if err != nil {
		return err
	}
	ks, err := decodeTC(op, "kCache", kCache[:S*nkv*hd], S*nkv, hd)
	if err != nil {
		return err
	}
	if err := checkBF16(op, "vCache", vCache[:S*nkv*hd], nkv*hd); err != nil {
		return err
	}
	sp := (S + AttentionBlock - 1) / AttentionBlock * AttentionBlock
	vt := newTCOperand(nkv*hd, sp)
	vSpecial := make([]bool, S*nkv) // key j of kv head g holds a NaN or an Inf
	for j := 0; j < S; j++ {
		for g := 0; g < nkv; g++ {
			for i := 0; i < hd; i++ {
				u := uint16(math.Float32bits(vCache[j*nkv*hd+g*hd+i]) >> 16)
				e, m, s := decodeBF16(u)
				at := (g*hd+i)*vt.stride + j
				vt.e[at], vt.m[at], vt.raw[at] = e, m, u
				vSpecial[j*nkv+g] = vSpecial[j*nkv+g] || s
			}
		}
	}
	group := nh / nkv
	acc, part := make([]float32, hd), make([]float32, hd)
	var sc [AttentionBlock]float32
	p := newTCOperand(1, AttentionBlock)
	for t := 0; t < T; t++ {
		P := int(qPos[t])
		for h := 0; h < nh; h++ {
			g := h / group
			attendTC(acc, part, &sc, &p, &qs, t*nh+h, &ks, &vt, vSpecial, g, nkv, hd, P, scale)
			o := out[(t*nh+h)*hd : (t*nh+h+1)*hd]
			for i, a := range acc {
				o[i] = dt.Round(a)
			}
		}
	}
	return nil
}

// attendTC is tc.3 for query row qr of qs (kv head g, position P): each chunk's state (m_c, l_c, acc_c) from
// scratch, folded in chunk order into (M, L, A); acc = A/L. part is the chunk's acc (hd floats).
func attendTC(acc, part []float32, sc *[AttentionBlock]float32, p *tcOperand, qs *tcOperand, qr int, ks, vt *tcOperand,
	vSpecial []bool, g, nkv, hd, P int, scale float32) {
	var M, L float32
	for c0 := 0; c0 <= P; c0 += AttentionTCChunk {
		mc, lc := attendTCChunk(part, sc, p, qs, qr, ks, vt, vSpecial, g, nkv, hd, c0, min(P, c0+AttentionTCChunk-1), scale)
		if c0 == 0 { // the first chunk as it is
			M, L = mc, lc
			copy(acc, part)
			continue
		}
		M, L = FoldTCChunk(acc, part, M, L, mc, lc)
	}
	for i := range acc {
		acc[i] = acc[i] / L
	}
}

// FoldTCChunk folds a chunk's state (mc, lc, part) into the running one (M, L, acc) as tc.3 does: both
// rescaled to the larger maximum, each product and the sum rounded (no FMA). It returns the new M and L. The
// GPU's kernels run the same operations (tc_attention.cu's tc_att_fold).
func FoldTCChunk(acc, part []float32, M, L, mc, lc float32) (float32, float32) {
	mn := M
	if mc > M {
		mn = mc
	}
	a, b := Exp(float32(M-mn)), Exp(float32(mc-mn))
	L = float32(float32(L*a) + float32(lc*b))
	for i, x := range part {
		acc[i] = float32(float32(acc[i]*a) + float32(x*b))
	}
	return mn, L
}

// attendTCChunk is one chunk's online softmax (tc.3's block step over the 64-key blocks from c0 to last, the
// row's last key in the chunk): acc_c into acc, and the chunk's m and l.
func attendTCChunk(acc []float32, sc *[AttentionBlock]float32, p *tcOperand, qs *tcOperand, qr int, ks, vt *tcOperand,
	vSpecial []bool, g, nkv, hd, c0, P int, scale float32) (float32, float32) {
	m := float32(math.Inf(-1))
	l := float32(0)
	clear(acc)
	for blk := c0; blk <= P; blk += AttentionBlock { // fixed 64-key blocks from the chunk's start
		end := min(blk+AttentionBlock, P+1)
		n := end - blk
		for j := blk; j < end; j++ {
			sc[j-blk] = float32(tcChain(qs, qr, ks, j*nkv+g, 0, hd) * scale)
		}
		bm := sc[0]
		for _, s := range sc[1:n] {
			if s > bm {
				bm = s
			}
		}
		mn := m
		if bm > m {
			mn = bm
		}
		alpha := Exp(float32(m - mn))
		l = float32(l * alpha)
		for i := range acc {
			acc[i] = float32(acc[i] * alpha)
		}
		pSpecial := [4]bool{}
		for jj := 0; jj < AttentionBlock; jj++ {
			var u uint16 // +0 past the block's end
			if jj < n {
				e := Exp(float32(sc[jj] - mn))
				l = float32(l + e)
				u = uint16(math.Float32bits(RoundBF16(e)) >> 16) // the MMA takes bf16 probabilities
			}
			e, mm, s := decodeBF16(u)
			p.e[jj], p.m[jj], p.raw[jj] = e, mm, u
			pSpecial[jj/TCStepK] = pSpecial[jj/TCStepK] || s
		}
		for st := 0; st < AttentionBlock/TCStepK; st++ {
			j0 := blk + st*TCStepK
			generic := pSpecial[st]
			for j := j0; j < min(j0+TCStepK, end); j++ {
				generic = generic || vSpecial[j*nkv+g]
			}
			pe, pm, pr := p.e[st*TCStepK:(st+1)*TCStepK], p.m[st*TCStepK:(st+1)*TCStepK], p.raw[st*TCStepK:(st+1)*TCStepK]
			for i := range acc {
				r := (g*hd + i) * vt.stride
				if !generic { // keys past end: p is +0 there, so their products are zero whatever v holds
					acc[i] = tcStep(pe, pm, vt.e[r+j0:r+j0+TCStepK], vt.m[r+j0:r+j0+TCStepK], acc[i])
					continue
				}
				var a, b [TCStepK]uint16 // +0 past the block's end in both operands (0·NaN would be NaN)
				copy(a[:], pr)
				for j := j0; j < min(j0+TCStepK, end); j++ {
					b[j-j0] = vt.raw[r+j]
				}
				acc[i] = HopperMMA.Dot16(&a, &b, acc[i])
			}
		}
		m = mn
	}
	return m, l
}
