package kernels

import (
	"math"
	"runtime"
	"sync"
)

// MatmulForward computes out = round_dt(x·wᵀ + bias) (docs/arithmetic.md §4).
// x is (M, K), w is (N, K), bias is (N) or nil, out is (M, N).
// Canonical: 8 fixed K-segments, FMA chains in ascending k, pairwise tree, then bias: a row's bits never
// depend on M or on its position in the batch. Standard: split-K chosen from M (§13).
func MatmulForward(p Profile, dt DType, out, x, w, bias []float32, M, K, N int) {
	checkLen("MatmulForward", "x", x, M*K)
	checkLen("MatmulForward", "w", w, N*K)
	checkLen("MatmulForward", "out", out, M*N)
	if bias != nil {
		checkLen("MatmulForward", "bias", bias, N)
	}
	bounds, tree := MatmulBounds(p, M, K)
	matmulCore(out, x, WeightsF32(w), M, K, N, bounds, tree, epilogue{bias: bias, dt: dt})
}

// MatmulForwardW is MatmulForward with the weight in its stored dtype (w is (N, K): F32, BF16 or F16): each
// weight is widened exactly as it is read (packed), so the bits are MatmulForward's on the widened values.
func MatmulForwardW(p Profile, dt DType, out, x []float32, w Weights, bias []float32, M, K, N int) {
	checkLen("MatmulForward", "x", x, M*K)
	checkWeights("MatmulForward", "w", w, N*K)
	checkLen("MatmulForward", "out", out, M*N)
	if bias != nil {
		checkLen("MatmulForward", "bias", bias, N)
	}
	bounds, tree := MatmulBounds(p, M, K)
	matmulCore(out, x, w, M, K, N, bounds, tree, epilogue{bias: bias, dt: dt})
	runtime.KeepAlive(w)
}

// MatmulPartial is one rank's share of a row-parallel matmul (o_proj, down_proj): x is (M, kLocal), the rank's
// columns [rank·kLocal, (rank+1)·kLocal) of a K = kLocal·tp reduction, w is (N, kLocal) (the same columns of
// the (N, K) weight), out is (M, N) and receives the rank's subtree of the 8-segment tree, float32, unrounded,
// without bias. An nvls AllReduce (tree order) then MatmulFinish gives the bits of MatmulForward for every tp
// in {1, 2, 4, 8}. Standard: one sequential FMA chain over the local K.
func MatmulPartial(p Profile, out, x, w []float32, M, kLocal, N, rank, tp int) error {
	return MatmulPartialW(p, out, x, WeightsF32(w), M, kLocal, N, rank, tp)
}

// MatmulPartialW is MatmulPartial with the weight (N, kLocal) in its stored dtype (see MatmulForwardW).
func MatmulPartialW(p Profile, out, x []float32, w Weights, M, kLocal, N, rank, tp int) error {
	bounds, tree, err := PartialBounds(p, kLocal, tp)
	if err != nil {
		return err
	}
	_ = rank // canonical local boundaries do not depend on the rank (docs/arithmetic.md §3)
	checkLen("MatmulPartial", "x", x, M*kLocal)
	checkWeights("MatmulPartial", "w", w, N*kLocal)
	checkLen("MatmulPartial", "out", out, M*N)
	matmulCore(out, x, w, M, kLocal, N, bounds, tree, epilogue{raw: true})
	runtime.KeepAlive(w)
	return nil
}

// MatmulFinish completes a row-parallel matmul after the all-reduce: out = round_dt(out + bias).
// out is (M, N), bias is (N) or nil.
func MatmulFinish(dt DType, out, bias []float32, M, N int) {
	checkLen("MatmulFinish", "out", out, M*N)
	for m := 0; m < M; m++ {
		row := out[m*N : (m+1)*N]
		for n, y := range row {
			if bias != nil {
				y = float32(y + bias[n])
			}
			row[n] = dt.Round(y)
		}
	}
}

// epilogue is what happens to a finished reduction: bias add and rounding (MatmulForward), or nothing
// (MatmulPartial's unrounded partial).
type epilogue struct {
	bias []float32
	dt   DType
	raw  bool
}

func (e epilogue) apply(n int, y float32) float32 {
	if e.raw {
		return y
	}
	if e.bias != nil {
		y = float32(y + e.bias[n])
	}
	return e.dt.Round(y)
}

// exactProducts reports whether every product of an element of a with an element of b is exactly representable
// in float32: all values are bf16 (8 significant bits, so a product has at most 16) with magnitudes 0 or in
// [2^-60, 2^60] (no underflow or overflow). Then fma(a, b, c) = RN(RN(a·b) + c) bit for bit, and the FMA
// chains can run as a float32 multiply and add.
func exactProducts(v []float32) bool {
	for _, f := range v {
		if !okBits(math.Float32bits(f)) {
			return false
		}
	}
	return true
}

// matmulCore computes, for every (m, n), one FMA chain per [bounds[s], bounds[s+1]) from +0 in ascending k,
// combines the chains with combine and stores post.apply(n, y). The order of operations for one output is fixed by
// bounds and combine alone; blocking, unrolling and goroutines only choose which outputs are computed together.
// A bf16 or f16 weight is widened (exactly) as it is packed into a panel, or block by block into a float32
// scratch on the scalar path: the arithmetic only ever sees the widened values.
func matmulCore(out, x []float32, w Weights, M, K, N int, bounds []int, tree bool, post epilogue) {
	combine := seqSum
	if tree {
		combine = TreeSum
	}
	tree8 := tree && len(bounds) == Segments+1
	const nb = 4 // columns per micro-tile
	const mb = 2 // rows per micro-tile
	workers := runtime.GOMAXPROCS(0)
	if haveFMAPanels && M >= panelMinRows && K > 0 && N >= panelWidth {
		// SIMD panels over the columns (same bits, see matmulPanels); the last N mod 16 columns run below.
		panels := N / panelWidth
		nw := max(1, min(workers, panels))
		var wg sync.WaitGroup
		for wk := 0; wk < nw; wk++ {
			lo, hi := panels*wk/nw*panelWidth, panels*(wk+1)/nw*panelWidth
			wg.Add(1)
			go func() { defer wg.Done(); matmulPanels(out, x, w, M, K, N, lo, hi, bounds, combine, tree8, post) }()
		}
		if n16 := panels * panelWidth; n16 < N {
			matmulBlockW(exactProducts(x[:M*K]), out, x, w, K, N, 0, M, n16, N, bounds, combine, post)
		}
		wg.Wait()
		return
	}
	fastX := exactProducts(x[:M*K]) // the weights are checked block by block, while they are in cache
	if int64(M)*int64(N)*int64(K) < 1<<16 {
		workers = 1
	}
	// Split the larger dimension across workers: columns when there are few rows (decode), rows otherwise.
	splitN := N >= M
	total := M
	unit := mb
	if splitN {
		total, unit = N, nb
	}
	units := (total + unit - 1) / unit
	workers = max(1, min(workers, units))
	var wg sync.WaitGroup
	for wk := 0; wk < workers; wk++ {
		lo := units * wk / workers * unit
		hi := min(total, units*(wk+1)/workers*unit)
		m0, m1, n0, n1 := lo, hi, 0, N
		if splitN {
			m0, m1, n0, n1 = 0, M, lo, hi
		}
		run := func() {
			matmulBlockW(fastX, out, x, w, K, N, m0, m1, n0, n1, bounds, combine, post)
		}
		if wk == workers-1 {
			run()
		} else {
			wg.Add(1)
			go func() { defer wg.Done(); run() }()
		}
	}
	wg.Wait()
}

// widenBlock is the number of weight rows matmulBlockW widens at a time (matmulBlock's column block).
const widenBlock = 64

// matmulBlockW is matmulBlock on a weight in its stored dtype: F32 weights directly, bf16/f16 weights widened
// widenBlock rows at a time into a scratch (the blocks are matmulBlock's own column blocks: the same outputs
// are computed together, and an output's bits never depend on that anyway).
func matmulBlockW(fastX bool, out, x []float32, w Weights, K, N, m0, m1, n0, n1 int, bounds []int, combine func([]float32) float32, post epilogue) {
	if w.DType() == F32 {
		matmulBlock(fastX, out, x, w.f32, 0, K, N, m0, m1, n0, n1, bounds, combine, post)
		return
	}
	buf := make([]float32, min(widenBlock, n1-n0)*K)
	for nc := n0; nc < n1; nc += widenBlock {
		nce := min(n1, nc+widenBlock)
		wb := buf[:(nce-nc)*K]
		w.Widen(wb, nc*K)
		matmulBlock(fastX, out, x, wb, nc, K, N, m0, m1, nc, nce, bounds, combine, post)
	}
}

// matmulBlock computes outputs [m0, m1) × [n0, n1); w holds weight rows from wb on (row n at w[(n-wb)*K:]).
// fastX says x passed exactProducts. For each block of
// columns, the first row runs tile1x4Checked, which also checks the block's weights (they are read anyway, so
// decode at M = 1 makes a single pass over the weights); when they pass, the other rows run the float32
// multiply-add tiles, otherwise everything in the block runs FMA32 (the same bits either way).
func matmulBlock(fastX bool, out, x, w []float32, wb, K, N, m0, m1, n0, n1 int, bounds []int, combine func([]float32) float32, post epilogue) {
	S := len(bounds) - 1
	part := make([]float32, 8*S) // partials of one micro-tile: part[o*S+s]
	tmp := make([]float32, S)
	emit := func(m, n, o int) {
		out[m*N+n] = post.apply(n, combine(part[o*S:(o+1)*S])) // combine may overwrite: the next tile rewrites part
	}
	wr := func(n int) []float32 { return w[(n-wb)*K : (n-wb+1)*K] }
	const colBlock = widenBlock // keep a few weight rows hot in L1/L2 while sweeping the rows
	for nc := n0; nc < n1; nc += colBlock {
		nce := min(n1, nc+colBlock)
		n4 := nc + (nce-nc)/4*4 // columns [nc, n4) in tiles of 4, [n4, nce) one by one (FMA32)
		m := m0
		fast := false
		if m < m1 {
			fast = fastX
			x0 := x[m*K : (m+1)*K]
			for n := nc; n < n4; n += 4 {
				if fast && !tile1x4Checked(part, S, bounds, x0, wr(n), wr(n+1), wr(n+2), wr(n+3)) {
					fast = false
					n = nc - 4 // weights outside the exact-product range: redo the row with FMA32
					continue
				}
				if !fast {
					tile1x4(false, part, S, bounds, x0, wr(n), wr(n+1), wr(n+2), wr(n+3))
				}
				for o := 0; o < 4; o++ {
					emit(m, n+o, o)
				}
			}
			for n := n4; n < nce; n++ {
				out[m*N+n] = post.apply(n, dot1(tmp, bounds, x0, wr(n), combine))
			}
			m++
		}
		for ; m+2 <= m1; m += 2 {
			x0 := x[m*K : (m+1)*K]
			x1 := x[(m+1)*K : (m+2)*K]
			for n := nc; n < n4; n += 4 {
				tile2x4(fast, part, S, bounds, x0, x1, wr(n), wr(n+1), wr(n+2), wr(n+3))
				for o := 0; o < 8; o++ {
					emit(m+o/4, n+o%4, o)
				}
			}
			for n := n4; n < nce; n++ {
				for r := 0; r < 2; r++ {
					out[(m+r)*N+n] = post.apply(n, dot1(tmp, bounds, x[(m+r)*K:(m+r+1)*K], wr(n), combine))
				}
			}
		}
		for ; m < m1; m++ {
			x0 := x[m*K : (m+1)*K]
			for n := nc; n < n4; n += 4 {
				tile1x4(fast, part, S, bounds, x0, wr(n), wr(n+1), wr(n+2), wr(n+3))
				for o := 0; o < 4; o++ {
					emit(m, n+o, o)
				}
			}
			for n := n4; n < nce; n++ {
				out[m*N+n] = post.apply(n, dot1(tmp, bounds, x0, wr(n), combine))
			}
		}
	}
}

// dot1 is one output: one FMA chain per segment, then combine.
func dot1(tmp []float32, bounds []int, x, w []float32, combine func([]float32) float32) float32 {
	for s := 0; s+1 < len(bounds); s++ {
		acc := float32(0)
		lo, hi := bounds[s], bounds[s+1]
		for k := lo; k < hi; k++ {
			acc = FMA32(x[k], w[k], acc)
		}
		tmp[s] = acc
	}
	return combine(tmp)
}

// segment2x4 is segment s (bounds[s]:bounds[s+1]) of two rows and four columns, every slice as long as the
// first (so the tile loops index them without bounds checks). Small enough to inline.
func segment2x4(bounds []int, s int, x0, x1, w0, w1, w2, w3 []float32) (a0, a1, b0, b1, b2, b3 []float32) {
	lo, hi := bounds[s], bounds[s+1]
	a0 = x0[lo:hi]
	n := len(a0)
	return a0, x1[lo:hi][:n], w0[lo:hi][:n], w1[lo:hi][:n], w2[lo:hi][:n], w3[lo:hi][:n]
}

// store4 writes segment s's partial sums of four columns: column j's at part[j*S+s].
func store4(part []float32, S, s int, c0, c1, c2, c3 float32) {
	part[0*S+s], part[1*S+s], part[2*S+s], part[3*S+s] = c0, c1, c2, c3
}

// tile2x4 runs the segment chains of 2 rows × 4 columns together: 8 independent accumulators, each in its own
// fixed order (unrolling across outputs never reorders one output's chain).
func tile2x4(fast bool, part []float32, S int, bounds []int, x0, x1, w0, w1, w2, w3 []float32) {
	if fast {
		tile2x4Exact(part, S, bounds, x0, x1, w0, w1, w2, w3)
		return
	}
	for s := 0; s < S; s++ {
		a0, a1, b0, b1, b2, b3 := segment2x4(bounds, s, x0, x1, w0, w1, w2, w3)
		var c00, c01, c02, c03, c10, c11, c12, c13 float32
		for k, u := range a0 {
			v := a1[k]
			p0, p1, p2, p3 := b0[k], b1[k], b2[k], b3[k]
			c00 = FMA32(u, p0, c00)
			c01 = FMA32(u, p1, c01)
			c02 = FMA32(u, p2, c02)
			c03 = FMA32(u, p3, c03)
			c10 = FMA32(v, p0, c10)
			c11 = FMA32(v, p1, c11)
			c12 = FMA32(v, p2, c12)
			c13 = FMA32(v, p3, c13)
		}
		store4(part, S, s, c00, c01, c02, c03)
		store4(part[4*S:], S, s, c10, c11, c12, c13)
	}
}

// tile1x4 is tile2x4 for one row.
func tile1x4(fast bool, part []float32, S int, bounds []int, x0, w0, w1, w2, w3 []float32) {
	if fast {
		tile1x4Exact(part, S, bounds, x0, w0, w1, w2, w3)
		return
	}
	for s := 0; s < S; s++ {
		a0, _, b0, b1, b2, b3 := segment2x4(bounds, s, x0, x0, w0, w1, w2, w3)
		var c0, c1, c2, c3 float32
		for k, u := range a0 {
			c0 = FMA32(u, b0[k], c0)
			c1 = FMA32(u, b1[k], c1)
			c2 = FMA32(u, b2[k], c2)
			c3 = FMA32(u, b3[k], c3)
		}
		store4(part, S, s, c0, c1, c2, c3)
	}
}

// tile2x4Exact is tile2x4 when every product is exact in float32: fma(u, p, c) = RN(RN(u·p) + c).
func tile2x4Exact(part []float32, S int, bounds []int, x0, x1, w0, w1, w2, w3 []float32) {
	for s := 0; s < S; s++ {
		a0, a1, b0, b1, b2, b3 := segment2x4(bounds, s, x0, x1, w0, w1, w2, w3)
		var c00, c01, c02, c03, c10, c11, c12, c13 float32
		for k, u := range a0 {
			v := a1[k]
			p0, p1, p2, p3 := b0[k], b1[k], b2[k], b3[k]
			c00 = float32(c00 + float32(u*p0))
			c01 = float32(c01 + float32(u*p1))
			c02 = float32(c02 + float32(u*p2))
			c03 = float32(c03 + float32(u*p3))
			c10 = float32(c10 + float32(v*p0))
			c11 = float32(c11 + float32(v*p1))
			c12 = float32(c12 + float32(v*p2))
			c13 = float32(c13 + float32(v*p3))
		}
		store4(part, S, s, c00, c01, c02, c03)
		store4(part[4*S:], S, s, c10, c11, c12, c13)
	}
}

// tile1x4Exact is tile1x4 when every product is exact in float32.
func tile1x4Exact(part []float32, S int, bounds []int, x0, w0, w1, w2, w3 []float32) {
	for s := 0; s < S; s++ {
		a0, _, b0, b1, b2, b3 := segment2x4(bounds, s, x0, x0, w0, w1, w2, w3)
		var c0, c1, c2, c3 float32
		for k, u := range a0 {
			c0 = float32(c0 + float32(u*b0[k]))
			c1 = float32(c1 + float32(u*b1[k]))
			c2 = float32(c2 + float32(u*b2[k]))
			c3 = float32(c3 + float32(u*b3[k]))
		}
		store4(part, S, s, c0, c1, c2, c3)
	}
}

// exactLo and exactSpan bound the magnitudes exactProducts accepts: bits (abs) in [67<<23, 188<<23), i.e.
// [2^-60, 2^61).
const (
	exactLo   = 67 << 23
	exactSpan = (188 - 67) << 23
)

// okBits reports whether one float32 (bits u) passes exactProducts: bf16, and 0 or in the magnitude range.
func okBits(u uint32) bool {
	t := u & 0x7FFFFFFF
	return u&0xFFFF == 0 && (t-exactLo < exactSpan || t == 0)
}

// tile1x4Checked is tile1x4Exact that also checks the four weight rows with okBits as it reads them; it
// returns false (and the partials are then meaningless) when one fails.
func tile1x4Checked(part []float32, S int, bounds []int, x0, w0, w1, w2, w3 []float32) bool {
	bad := false
	for s := 0; s < S; s++ {
		a0, _, b0, b1, b2, b3 := segment2x4(bounds, s, x0, x0, w0, w1, w2, w3)
		var c0, c1, c2, c3 float32
		for k, u := range a0 {
			p0, p1, p2, p3 := b0[k], b1[k], b2[k], b3[k]
			c0 = float32(c0 + float32(u*p0))
			c1 = float32(c1 + float32(u*p1))
			c2 = float32(c2 + float32(u*p2))
			c3 = float32(c3 + float32(u*p3))
			if !okBits(math.Float32bits(p0)) || !okBits(math.Float32bits(p1)) || !okBits(math.Float32bits(p2)) || !okBits(math.Float32bits(p3)) {
				bad = true
			}
		}
		store4(part, S, s, c0, c1, c2, c3)
	}
	return !bad
}
