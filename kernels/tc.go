package kernels

import (
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"sync"

	"bitalign/internal/fp"
)

// The `tc` profile (docs/arithmetic.md §18): matmuls and attention's two products as chains of tensor-core
// k-steps (tc.1), emulated bit for bit on the CPU. Every k-step here gives the bits of MMABF16Dot16 (the
// emulation matched on the H200): tcStep is the same arithmetic on operands decoded once (exponent and signed
// significand per element, so a chain never re-decodes w), and rows holding NaN or Inf go through
// HopperMMA.Dot16 itself. TestTCStepMatchesDot16 checks the two on random and adversarial k-steps.

// TCLayout says how a tc matmul sums K (docs/arithmetic.md tc.2).
type TCLayout uint8

const (
	// ColumnParallel: a matmul whose K no TP layout splits (q/k/v, gate/up, lm_head, every matmul that is not
	// row-parallel): one chain of k-steps over K.
	ColumnParallel TCLayout = iota
	// RowParallel: o_proj, down_proj: the 8 segments of §3, each its own chain, added by the tree.
	RowParallel
)

func (l TCLayout) String() string {
	if l == RowParallel {
		return "row-parallel"
	}
	return "column-parallel"
}

// TCStepK is the k-step's width: 16 bf16 products per MMA step (m16n8k16, m64nNk16).
const TCStepK = 16

// MatmulTC computes out = round_dt(x·wᵀ + bias) with the tc k-chains of layout (docs/arithmetic.md tc.2).
// x is (M, K), w is (N, K), bias is (N) or nil, out is (M, N); x and w must hold bf16 values (an error names
// the first that is not). A row's bits never depend on M or its position in the batch: each output is its
// own chain (ColumnParallel) or the tree of its 8 segment chains (RowParallel).
func MatmulTC(l TCLayout, dt DType, out, x, w, bias []float32, M, K, N int) error {
	checkLen("MatmulTC", "out", out, M*N)
	if bias != nil {
		checkLen("MatmulTC", "bias", bias, N)
	}
	b, tree := TCBounds(l, K)
	return matmulTC("MatmulTC", out, x, WeightsF32(w), M, K, N, b, tree, epilogue{bias: bias, dt: dt})
}

// MatmulTCPartial is one rank's share of a tc row-parallel matmul: x is (M, kLocal), w is (N, kLocal) (the
// rank's columns of the (N, K) weight, K = kLocal·tp), out (M, N) receives the rank's subtree of its
// G = 8/tp segment chains, float32, unrounded (every NaN MMANaN, as the GPU leaves it: TCNaN), without bias. The nvls AllReduce (tree order) and MatmulFinish
// then give MatmulTC(RowParallel, ...)'s bits for every tp in {1, 2, 4, 8} (tc.2, §3).
func MatmulTCPartial(out, x, w []float32, M, kLocal, N, tp int) error {
	b, tree, err := TCPartialBounds(kLocal, tp)
	if err != nil {
		return err
	}
	checkLen("MatmulTCPartial", "out", out, M*N)
	return matmulTC("MatmulTCPartial", out, x, WeightsF32(w), M, kLocal, N, b, tree, epilogue{raw: true})
}

// tcCombine is how matmulTC adds an output's chains: the tree (tree true), the only chain (one range),
// or left to right (the tests' control variant that splits K by M).
func tcCombine(tree bool) func([]float32) float32 {
	if tree {
		return TreeSum
	}
	return seqSum
}

// matmulTC runs, for every (m, n), one tc chain per [b[s], b[s+1]), combines the chains (tree or left to
// right) and stores post.apply(n, y). Workers own disjoint column ranges; each decodes a weight row once and
// runs every row's chains against it, so the order of operations of one output is fixed by b alone. w is in its
// stored dtype (a bf16 weight's bits are decoded as they are, no float32 copy).
func matmulTC(op string, out, x []float32, w Weights, M, K, N int, b []int, tree bool, post epilogue) error {
	checkLen(op, "x", x, M*K)
	checkWeights(op, "w", w, N*K)
	defer runtime.KeepAlive(w)
	if M <= 0 || N <= 0 {
		return nil
	}
	xs, err := decodeTC(op, "x", x[:M*K], M, K)
	if err != nil {
		return err
	}
	if err := checkBF16W(op, "w", w, N*K, K); err != nil {
		return err
	}
	combine := tcCombine(tree)
	workers := max(1, min(runtime.GOMAXPROCS(0), N))
	if int64(M)*int64(N)*int64(K) < 1<<15 {
		workers = 1
	}
	var wg sync.WaitGroup
	for wk := 0; wk < workers; wk++ {
		n0, n1 := N*wk/workers, N*(wk+1)/workers
		run := func() {
			wr := newTCOperand(1, K)
			part := make([]float32, len(b)-1)
			for n := n0; n < n1; n++ {
				wr.decodeWeightsRow(0, w, n*K, K)
				for m := 0; m < M; m++ {
					for s := range part {
						part[s] = tcChain(&xs, m, &wr, 0, b[s], b[s+1])
					}
					out[m*N+n] = post.apply(n, TCNaN(combine(part))) // the GPU's NaN (tc.4); round_dt maps it again
				}
			}
		}
		if wk == workers-1 {
			run()
		} else {
			wg.Add(1)
			go func() { defer wg.Done(); run() }()
		}
	}
	wg.Wait()
	return nil
}

// tcZeroExp is a zero element's exponent in a tcOperand: the sum of two such (or one and any real exponent,
// at least −252 for a product) stays more than 64 below every real alignment exponent, so a zero product's
// aligned value is a shift past 64 bits, i.e. 0, and it never sets E (tc.1: ±0 terms are dropped).
const tcZeroExp = -1 << 12

// tcOperand is a (rows, cols) matrix of bf16 values decoded for the k-step. Element i: e[i] is its exponent
// field − 127 (a subnormal's field counts as 1, tc.1's nominal exponent), tcZeroExp for ±0; m[i] its
// significand with the implicit bit, signed; raw[i] its bf16 bits (for rows through the generic step);
// special[r] says row r holds a NaN or an Inf (its chains run HopperMMA.Dot16). Rows are padded with 16 zeros
// (stride = cols + 16), so a chain's last step, which may start anywhere, can read 16 elements.
type tcOperand struct {
	stride  int
	e, m    []int16
	raw     []uint16
	special []bool
}

func newTCOperand(rows, cols int) tcOperand {
	st := cols + TCStepK
	o := tcOperand{stride: st, e: make([]int16, rows*st), m: make([]int16, rows*st), raw: make([]uint16, rows*st),
		special: make([]bool, rows)}
	for i := range o.e {
		o.e[i] = tcZeroExp
	}
	return o
}

// decodeBF16 splits bf16 bits into tcOperand's exponent and signed significand; special is true for NaN and
// Inf (whose e, m are then those of a finite value of exponent 128: they are never used in a fast step).
func decodeBF16(u uint16) (e, m int16, special bool) {
	f := int16(u >> 7 & 0xFF)
	mm := int16(u & 0x7F)
	switch {
	case f == 0 && mm == 0:
		return tcZeroExp, 0, false
	case f == 0:
		f = 1 // subnormal: 0.m · 2^−126
	default:
		mm |= 0x80
	}
	if u&0x8000 != 0 {
		mm = -mm
	}
	return f - 127, mm, f == 0xFF
}

// decodeRow decodes one row of bf16 values (already checked by checkBF16 or decodeTC) into row r.
func (o *tcOperand) decodeRow(r int, v []float32) {
	base := r * o.stride
	sp := false
	for i, f := range v {
		u := uint16(math.Float32bits(f) >> 16)
		e, m, s := decodeBF16(u)
		o.e[base+i], o.m[base+i], o.raw[base+i] = e, m, u
		sp = sp || s
	}
	o.special[r] = sp
}

// decodeTC checks that v (rows, cols) holds bf16 values and decodes it.
func decodeTC(op, name string, v []float32, rows, cols int) (tcOperand, error) {
	if err := checkBF16(op, name, v, cols); err != nil {
		return tcOperand{}, err
	}
	o := newTCOperand(rows, cols)
	for r := 0; r < rows; r++ {
		o.decodeRow(r, v[r*cols:(r+1)*cols])
	}
	return o, nil
}

// checkBF16 returns an error naming the first element of v (rows of cols) that is not a bf16 value.
func checkBF16(op, name string, v []float32, cols int) error {
	for i, f := range v {
		if _, ok := fp.BF16Exact(f); !ok {
			return fmt.Errorf("kernels: %s: %s[%d, %d] = %g (%#08x) is not a bf16 value: the tc profile takes bf16 operands",
				op, name, i/max(cols, 1), i%max(cols, 1), f, math.Float32bits(f))
		}
	}
	return nil
}

// tcChain is chain(lo, hi) of tc.2 for row ra of a and row rb of b: acc from +0, k-steps at lo, lo+16, …,
// positions ≥ hi +0 in both operands.
func tcChain(a *tcOperand, ra int, b *tcOperand, rb, lo, hi int) float32 {
	ao, bo := ra*a.stride, rb*b.stride
	if a.special[ra] || b.special[rb] {
		return tcChainGeneric(a.raw[ao:ao+hi], b.raw[bo:bo+hi], lo, hi)
	}
	ae, am := a.e[ao:ao+a.stride], a.m[ao:ao+a.stride]
	be, bm := b.e[bo:bo+b.stride], b.m[bo:bo+b.stride]
	acc := float32(0)
	k := lo
	for ; k+TCStepK <= hi; k += TCStepK {
		acc = tcStep(ae[k:k+TCStepK], am[k:k+TCStepK], be[k:k+TCStepK], bm[k:k+TCStepK], acc)
	}
	if k < hi { // the last step, zero-padded past hi (the next segment's elements are not part of it)
		var te, tm [TCStepK]int16
		for j := range te {
			te[j] = tcZeroExp
		}
		copy(te[:], ae[k:hi])
		copy(tm[:], am[k:hi])
		acc = tcStep(te[:], tm[:], be[k:k+TCStepK], bm[k:k+TCStepK], acc)
	}
	return acc
}

// tcChainGeneric is tcChain through HopperMMA.Dot16, for rows holding NaN or Inf: a and b hold bf16 bits at
// least up to hi.
func tcChainGeneric(a, b []uint16, lo, hi int) float32 {
	acc := float32(0)
	for k := lo; k < hi; k += TCStepK {
		var sa, sb [TCStepK]uint16 // +0 past hi
		copy(sa[:], a[k:min(k+TCStepK, hi)])
		copy(sb[:], b[k:min(k+TCStepK, hi)])
		acc = HopperMMA.Dot16(&sa, &sb, acc)
	}
	return acc
}

// tcStep is one k-step of tc.1 on 16 decoded finite products (ae, am of one operand, be, bm of the other)
// and the accumulator c (finite or ±Inf: finite products leave an Inf as it is). It gives MMABF16Dot16's bits:
// the nominal exponents E = max(ea+eb−254, ec−127); every term truncated toward zero to a multiple of
// 2^(E−25), i.e. a product's significand ma·mb (< 2^16, scaled by 2^(x−14)) shifted left by 11 and right by
// E−x, c's (24 bits, scaled by 2^(x−23)) left by 2 and right by E−x; the exact sum rounded toward zero.
func tcStep(ae, am, be, bm []int16, c float32) float32 {
	ae, am, be, bm = ae[:TCStepK], am[:TCStepK], be[:TCStepK], bm[:TCStepK]
	u := math.Float32bits(c)
	ec := int32(u >> 23 & 0xFF)
	if ec == 0xFF { // finite products: an Inf c stays, a NaN c gives the MMA's NaN (tc.1)
		if u&0x7FFFFF != 0 {
			return math.Float32frombits(MMANaN)
		}
		return c
	}
	mc := uint64(u & 0x7FFFFF)
	xc := int32(2 * tcZeroExp)
	switch {
	case ec != 0:
		mc |= 1 << 23
		xc = ec - 127
	case mc != 0:
		xc = -126 // subnormal c
	}
	if haveTCAVX2 {
		E, sum := tcProducts16(&ae[0], &am[0], &be[0], &bm[0], xc)
		if E < tcZeroExp/2 {
			return 0 // every term is zero: +0 (tc.1)
		}
		if mc != 0 {
			v := int64((mc << 2) >> uint(E-xc))
			if u>>31 != 0 {
				v = -v
			}
			sum += v
		}
		return tcRZ(sum, E-25)
	}
	var x [TCStepK]int32
	E := xc
	for j := range x {
		x[j] = int32(ae[j]) + int32(be[j])
		E = max(E, x[j])
	}
	if E < tcZeroExp/2 {
		return 0 // every term is zero: +0 (tc.1)
	}
	var sum int64
	if mc != 0 {
		v := int64((mc << 2) >> uint(E-xc))
		if u>>31 != 0 {
			v = -v
		}
		sum = v
	}
	for j := range x {
		p := int64(am[j]) * int64(bm[j]) // |p| < 2^16, exact
		s := p >> 63                     // 0 or −1: the sign, applied after truncating the magnitude
		v := int64(uint64((p^s)-s) << 11 >> uint(E-x[j]))
		sum += (v ^ s) - s
	}
	return tcRZ(sum, E-25)
}

// tcRZ rounds sum·2^q toward zero to float32 (tc.1), the common normal case inline, the rest (subnormal,
// overflow) by RoundZero.toFloat32, the emulation's own rounding.
func tcRZ(sum int64, q int32) float32 {
	if sum == 0 {
		return 0
	}
	neg := sum < 0
	mag := uint64(sum)
	if neg {
		mag = -mag
	}
	n := int32(bits.Len64(mag))
	lead := q + n - 1
	if lead < -126 || lead > 127 {
		return RoundZero.toFloat32(sum, int(q))
	}
	var kept uint64
	if n > 24 {
		kept = mag >> uint(n-24)
	} else {
		kept = mag << uint(24-n)
	}
	r := uint32(lead+127)<<23 | uint32(kept)&0x7FFFFF
	if neg {
		r |= 1 << 31
	}
	return math.Float32frombits(r)
}
