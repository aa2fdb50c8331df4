package session

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/bits"
	"sync/atomic"

	"bitalign/capture"
)

// piece is a run of aligned rows of one (op, role, step, seq): row r of a and of b hold position pos+r, and
// the two are compared element by element. a and b are views into the captures (or reassembled shards).
type piece struct {
	step, seq, pos int64
	rows, rowLen   int64
	a, b           []byte
	// rowMism has bit r set when row r holds a mismatch (set atomically by the workers).
	rowMism []uint64
}

// job is the unit of parallel work: elements [lo, hi) of one piece, at most blockBytes long.
type job struct {
	piece  int32
	lo, hi int64
}

// blockBytes is the size of a job and of the identical-bytes fast path: big enough to amortise scheduling,
// small enough to stay in L2 between bytes.Equal and the NaN/Inf scan (64 KiB measured best of 8–256 KiB in
// BenchmarkBlockSize). A variable only so that the benchmark can try other sizes.
var blockBytes = 64 << 10

// hit is one mismatched element: where it is (piece and element within the piece) and what it is.
type hit struct {
	ok    bool
	piece int32
	elem  int64
	a, b  uint64
	ulp   uint64 // in the op's dtype (in bf16 for the bf16 twins of acc)
	class Class
}

// f32Low16 covers the low 16 bits of both f32 lanes of an eight-byte word: a bf16 value widened to f32 has
// them zero, so an f32 op whose values all have them zero on both sides is measured in bf16 ULPs.
const f32Low16 = 0x0000ffff_0000ffff

// bf16ULP turns the f32 ULP distance of two bf16 values widened to f32 into their bf16 distance. The f32
// ordered integer of a widened value is its bf16 ordered integer << 16, with 0xffff or'd in for negative
// values, so the f32 distance is d·2^16 for a pair of one sign and d·2^16 − 0xffff across signs (d ≥ 1):
// rounding up recovers d in both cases.
func bf16ULP(d uint64) uint64 {
	if d == ULPNaNNumber {
		return d
	}
	return (d + 0xffff) >> 16
}

// before orders hits by piece, then element: execution order within an op.
func (h hit) before(o hit) bool {
	if !o.ok {
		return h.ok
	}
	return h.ok && (h.piece < o.piece || h.piece == o.piece && h.elem < o.elem)
}

// levelNaN is the heatmap level of a NaN against a number (levels 1..64 are log2 ULP buckets, 0 is equal).
const levelNaN = 65

// opWork is one aligned (op, role): its pieces, split into jobs.
type opWork struct {
	f       *format
	lowMask uint64 // f32Low16 for f32 ops (the bf16 test), else 0
	pieces  []piece
	jobs    []job
	sums    []float64 // Σ|a−b| per job, summed in job order at the end so the mean does not depend on scheduling
	done    []int64   // bytes (both sides) of the jobs before each job, for progress
	// mismatch map over positions × features (see OpStat.Map)
	posLo, posSpan     int64
	rowLen             int64
	gridRows, gridCols int
	colCell            []int32 // feature → map column
}

// acc is one worker's accumulator for the op being compared; the hot loop only touches it.
type acc struct {
	mismatched, nanNumber, nanPayload int64
	nanA, nanB, infA, infB            int64
	infMismatched                     int64 // numeric mismatches with ±Inf on a side
	hist                              [65]uint64
	first, max                        hit
	maxAbs, maxRel                    float64
	grid                              []uint8
	// f32 ops only: low is the OR of the low 16 bits of every compared value (both sides); while it is 0 the
	// op may be bf16 widened to f32, and hist16, max16 and grid16 are its histogram, max and map in bf16 ULPs.
	low       uint64
	hist16    [65]uint64
	max16     hit
	grid16    []uint8
	gridRow16 []uint8
	// finiteRun's counts of hist and hist16, split by lane (one increment chain per lane), added to them by fold
	histL, hist16L [4][65]uint64
	// the row of the last mismatch: its piece, first element and map row
	rowPiece int32
	rowLo    int64
	gridRow  []uint8
}

// reset empties w for an op with a map of cells cells (and a bf16 twin of the map when bf16 is set).
func (w *acc) reset(cells int, bf16 bool) {
	g, g16 := w.grid, w.grid16
	*w = acc{rowPiece: -1}
	w.grid = resize(g, cells)
	if bf16 {
		w.grid16 = resize(g16, cells)
	} else {
		w.grid16 = g16[:0]
	}
}

func resize(g []uint8, n int) []uint8 {
	if cap(g) < n {
		g = make([]uint8, n)
	}
	g = g[:n]
	clear(g)
	return g
}

// fold adds finiteRun's lane-split counts to the histograms; opWork.run calls it once the jobs are done.
func (w *acc) fold() {
	for l := range w.histL {
		for i := range w.hist {
			w.hist[i] += w.histL[l][i]
			w.hist16[i] += w.hist16L[l][i]
		}
	}
	w.histL, w.hist16L = [4][65]uint64{}, [4][65]uint64{}
}

// merge folds o into w; the result does not depend on the order of merges.
func (w *acc) merge(o *acc) {
	w.mismatched += o.mismatched
	w.nanNumber += o.nanNumber
	w.nanPayload += o.nanPayload
	w.nanA += o.nanA
	w.nanB += o.nanB
	w.infA += o.infA
	w.infB += o.infB
	w.infMismatched += o.infMismatched
	w.low |= o.low
	for i := range w.hist {
		w.hist[i] += o.hist[i]
		w.hist16[i] += o.hist16[i]
	}
	if o.first.before(w.first) {
		w.first = o.first
	}
	w.max = maxHit(w.max, o.max)
	w.max16 = maxHit(w.max16, o.max16)
	w.maxAbs = math.Max(w.maxAbs, o.maxAbs)
	w.maxRel = math.Max(w.maxRel, o.maxRel)
	for i, v := range o.grid {
		w.grid[i] = max(w.grid[i], v)
	}
	for i, v := range o.grid16 {
		w.grid16[i] = max(w.grid16[i], v)
	}
}

// maxHit is the hit with the larger distance, the earlier one on ties.
func maxHit(x, y hit) hit {
	if y.ok && (!x.ok || y.ulp > x.ulp || y.ulp == x.ulp && y.before(x)) {
		return y
	}
	return x
}

// run compares one job and returns its Σ|a−b|.
func (w *acc) run(o *opWork, ji int) float64 {
	j := o.jobs[ji]
	p := &o.pieces[j.piece]
	sz := int64(o.f.size)
	a, b := p.a[j.lo*sz:j.hi*sz], p.b[j.lo*sz:j.hi*sz]
	if bytes.Equal(a, b) {
		if o.f.kind == kindFloat {
			nan, inf, low := o.f.countSpecials(a)
			w.nanA += nan
			w.nanB += nan
			w.infA += inf
			w.infB += inf
			w.low |= low & o.lowMask
		}
		return 0
	}
	return w.diff(o, j.piece, p, a, b, j.lo)
}

// countSpecials counts NaNs and infinities in data and ORs all its bits (low, for the bf16 test of f32 ops).
// A SWAR test over four eight-byte words at a time rejects the (usual) stretches holding no special value.
func (f *format) countSpecials(data []byte) (nan, inf int64, low uint64) {
	M, L, H := f.swM, f.swL, f.swH
	for len(data) >= 32 {
		w0 := binary.LittleEndian.Uint64(data)
		w1 := binary.LittleEndian.Uint64(data[8:])
		w2 := binary.LittleEndian.Uint64(data[16:])
		w3 := binary.LittleEndian.Uint64(data[24:])
		low |= w0 | w1 | w2 | w3
		if (((w0&M)+L)|((w1&M)+L)|((w2&M)+L)|((w3&M)+L))&H != 0 {
			n, k := f.countSlow(data[:32])
			nan += n
			inf += k
		}
		data = data[32:]
	}
	for e := 0; e < len(data)/f.size; e++ {
		low |= f.load(data, e)
	}
	n, k := f.countSlow(data)
	return nan + n, inf + k, low
}

func (f *format) countSlow(data []byte) (nan, inf int64) {
	for e := 0; e < len(data)/f.size; e++ {
		x := f.load(data, e)
		if f.isNaN(x) {
			nan++
		} else if f.isInf(x) {
			inf++
		}
	}
	return
}

// diff is the path for a block whose bytes differ: one pass over eight-byte words counts NaN/Inf on both sides
// (SWAR pre-test) and sends differing words to record, element by element.
func (w *acc) diff(o *opWork, pi int32, p *piece, a, b []byte, elem0 int64) (sum float64) {
	f := o.f
	M, L, H := f.swM, f.swL, f.swH // all zero for integers: the pre-test never fires
	per := int64(8 / f.size)
	e := elem0
	b = b[:len(a)]
	// low ORs every word of A and every word's difference: B's bits are within A's | (A ^ B)
	var low uint64
	// runs of groups in the row of the last mismatch without NaN or Inf: finiteRun
	run := f.kind == kindFloat && recordFast && (f.dt == capture.BF16 || f.dt == capture.F32)
	// four words at a time: one branch for the common case of a group with no difference and no special
	for len(a) >= 32 {
		a4, b4 := a[:32:32], b[:32:32]
		wa0, wb0 := binary.LittleEndian.Uint64(a4), binary.LittleEndian.Uint64(b4)
		wa1, wb1 := binary.LittleEndian.Uint64(a4[8:]), binary.LittleEndian.Uint64(b4[8:])
		wa2, wb2 := binary.LittleEndian.Uint64(a4[16:]), binary.LittleEndian.Uint64(b4[16:])
		wa3, wb3 := binary.LittleEndian.Uint64(a4[24:]), binary.LittleEndian.Uint64(b4[24:])
		x := (wa0 ^ wb0) | (wa1 ^ wb1) | (wa2 ^ wb2) | (wa3 ^ wb3)
		low |= wa0 | wa1 | wa2 | wa3 | x
		// Only A's words need the special-value test here: where x == 0, B's words are A's (group tests both).
		sp := ((wa0 & M) + L) | ((wa1 & M) + L) | ((wa2 & M) + L) | ((wa3 & M) + L)
		if x|sp&H != 0 {
			if run && w.inRow(pi, p, e, 4*per) {
				n := min(int64(len(a)/32), (w.rowLo+p.rowLen-e)/(4*per)) // whole groups left in the row
				k, s, l := w.finiteRun(o, p, e, a[:32*n], b[:32*n], 4, sum, low)
				if k > 0 {
					sum, low = s, low|l
					a, b = a[8*k:], b[8*k:]
					e += int64(k) * per
					continue
				}
			}
			sum += w.group(o, pi, p, e, a4, b4)
		}
		a, b = a[32:], b[32:]
		e += 4 * per
	}
	for len(a) >= 8 {
		wa := binary.LittleEndian.Uint64(a)
		wb := binary.LittleEndian.Uint64(b)
		low |= wa | wb
		if (((wa&M)+L)|((wb&M)+L))&H != 0 {
			w.countWord(f, wa, wb)
		}
		if wa != wb {
			sum += w.lanes(o, pi, p, e, wa, wb)
		}
		a, b = a[8:], b[8:]
		e += per
	}
	for i := 0; i < len(a)/f.size; i++ {
		x, y := f.load(a, i), f.load(b, i)
		low |= x | y
		if f.isNaN(x) {
			w.nanA++
		} else if f.isInf(x) {
			w.infA++
		}
		if f.isNaN(y) {
			w.nanB++
		} else if f.isInf(y) {
			w.infB++
		}
		if x != y {
			sum += w.record(o, pi, p, e+int64(i), x, y)
		}
	}
	w.low |= low & o.lowMask
	return sum
}

// group handles 32 bytes holding a difference or a special value, word by word and lane by lane.
func (w *acc) group(o *opWork, pi int32, p *piece, e int64, a, b []byte) (sum float64) {
	f := o.f
	M, L, H := f.swM, f.swL, f.swH
	nb, ls := uint(8*f.size), f.laneShift
	for k := 0; k < 32; k += 8 {
		wa, wb := binary.LittleEndian.Uint64(a[k:]), binary.LittleEndian.Uint64(b[k:])
		if (((wa&M)+L)|((wb&M)+L))&H != 0 {
			w.countWord(f, wa, wb)
		} else if f.kind == kindFloat && recordFast {
			// no NaN or Inf on either side: every differing lane is a finite numeric pair
			if wa == wb {
				e += int64(64 >> ls)
				continue
			}
			if (f.dt == capture.BF16 || f.dt == capture.F32) && w.inRow(pi, p, e, int64(64>>ls)) {
				_, sum, _ = w.finiteRun(o, p, e, a[k:k+8], b[k:k+8], 1, sum, 0)
				e += int64(64 >> ls)
				continue
			}
			for d := wa ^ wb; d != 0; {
				lane := uint(bits.TrailingZeros64(d)) >> ls
				sh := lane * nb
				sum += w.recordFinite(o, pi, p, e+int64(lane), (wa>>sh)&f.width, (wb>>sh)&f.width)
				d &^= f.width << sh
			}
			e += int64(64 >> ls)
			continue
		}
		for d := wa ^ wb; d != 0; {
			lane := uint(bits.TrailingZeros64(d)) >> ls // the lowest differing lane (a shift: no division)
			sh := lane * nb
			sum += w.record(o, pi, p, e+int64(lane), (wa>>sh)&f.width, (wb>>sh)&f.width)
			d &^= f.width << sh
		}
		e += int64(64 >> ls)
	}
	return sum
}

// lanes records the differing elements of one eight-byte word (e is its first element).
func (w *acc) lanes(o *opWork, pi int32, p *piece, e int64, wa, wb uint64) (sum float64) {
	f := o.f
	nb := uint(8 * f.size)
	for d := wa ^ wb; d != 0; {
		lane := uint(bits.TrailingZeros64(d)) >> f.laneShift
		sh := lane * nb
		sum += w.record(o, pi, p, e+int64(lane), (wa>>sh)&f.width, (wb>>sh)&f.width)
		d &^= f.width << sh
	}
	return sum
}

// countWord counts the NaNs and infinities of one eight-byte word per side, visiting only the lanes the SWAR
// test flags (a lane's sign bit is set in the mask when its exponent is all ones).
func (w *acc) countWord(f *format, wa, wb uint64) {
	nan, inf := f.wordSpecials(wa)
	w.nanA, w.infA = w.nanA+nan, w.infA+inf
	nan, inf = f.wordSpecials(wb)
	w.nanB, w.infB = w.nanB+nan, w.infB+inf
}

// wordSpecials counts the NaNs and infinities among the lanes of one eight-byte word that the SWAR test flags.
func (f *format) wordSpecials(v uint64) (nan, inf int64) {
	lane := uint(8*f.size) - 1
	for m := ((v & f.swM) + f.swL) & f.swH; m != 0; m &= m - 1 {
		x := (v >> (uint(bits.TrailingZeros64(m)) &^ lane)) & f.width
		if f.isNaN(x) {
			nan++
		} else if f.isInf(x) {
			inf++
		}
	}
	return nan, inf
}

// record accounts one mismatched element (e is its index within the piece) and returns |a−b| (0 unless both
// values are finite).
func (w *acc) record(o *opWork, pi int32, p *piece, e int64, x, y uint64) float64 {
	f := o.f
	cls, d := f.compare(x, y)
	w.mismatched++
	if !w.first.ok { // a worker takes jobs, and elements within them, in increasing order
		w.first = hit{ok: true, piece: pi, elem: e, a: x, b: y, ulp: d, class: cls}
	}
	level := uint8(levelNaN)
	if cls == ClassNaNNumber {
		w.nanNumber++
	} else {
		if cls == ClassNaNPayload {
			w.nanPayload++
		}
		b := bucket(d)
		w.hist[b]++
		level = uint8(b)
		if !w.max.ok || d > w.max.ulp { // ties keep the earliest
			w.max = hit{ok: true, piece: pi, elem: e, a: x, b: y, ulp: d, class: cls}
		}
	}
	level16 := uint8(levelNaN)
	if o.lowMask != 0 && cls != ClassNaNNumber { // f32: the same in bf16 ULPs, kept while the op may be bf16
		d16 := bf16ULP(d)
		b16 := bucket(d16)
		w.hist16[b16]++
		level16 = uint8(b16)
		if !w.max16.ok || d16 > w.max16.ulp {
			w.max16 = hit{ok: true, piece: pi, elem: e, a: x, b: y, ulp: d16, class: cls}
		}
	}
	w.mark(o, pi, p, e, level, level16)
	if cls != ClassNumeric {
		return 0
	}
	va, vb := f.value(x), f.value(y)
	if math.IsInf(va, 0) || math.IsInf(vb, 0) {
		w.infMismatched++
		return 0
	}
	ad := math.Abs(va - vb)
	if ad > w.maxAbs {
		w.maxAbs = ad
	}
	den := max(math.Abs(va), math.Abs(vb)) // finite and non-negative: no NaN or −0 subtleties
	if den > 0 && ad > w.maxRel*den {
		w.maxRel = ad / den
	}
	return ad
}

// mark sets the row bit of a mismatch at element e of piece pi and raises its map cells to level (level16 in
// the bf16 twin of an f32 op's map).
func (w *acc) mark(o *opWork, pi int32, p *piece, e int64, level, level16 uint8) {
	if pi != w.rowPiece || e < w.rowLo || e >= w.rowLo+p.rowLen { // a new row: one division per row
		row := e / p.rowLen
		w.rowPiece, w.rowLo = pi, row*p.rowLen
		bit := uint64(1) << (row % 64)
		if m := &p.rowMism[row/64]; atomic.LoadUint64(m)&bit == 0 {
			atomic.OrUint64(m, bit)
		}
		if len(w.grid) > 0 {
			off := (p.pos + row - o.posLo) * int64(o.gridRows) / o.posSpan * int64(o.gridCols)
			w.gridRow = w.grid[off:][:o.gridCols]
			if len(w.grid16) > 0 {
				w.gridRow16 = w.grid16[off:][:o.gridCols]
			}
		}
	}
	if len(w.grid) > 0 {
		var gc int64
		if o.colCell != nil {
			gc = int64(o.colCell[e-w.rowLo])
		} else {
			gc = (e - w.rowLo) * int64(o.gridCols) / o.rowLen
		}
		if c := &w.gridRow[gc]; *c < level {
			*c = level
		}
		if len(w.gridRow16) > 0 {
			if c := &w.gridRow16[gc]; *c < level16 {
				*c = level16
			}
		}
	}
}

// recordFast turns on recordFinite for words without a NaN or Inf (a variable only so that
// TestRecordFiniteMatchesRecord can compare it with record).
var recordFast = true

// recordFinite is record for a float pair known to hold no NaN or Inf (group's SWAR test found none in
// either word): the class is numeric, the distance the difference of the ordered images, and bf16 and f32
// decode by a shift, without record's class and infinity tests. TestRecordFiniteMatchesRecord checks that
// both give the same report.
func (w *acc) recordFinite(o *opWork, pi int32, p *piece, e int64, x, y uint64) float64 {
	f := o.f
	d := absDiff(f.ordered(x), f.ordered(y))
	w.mismatched++
	if !w.first.ok {
		w.first = hit{ok: true, piece: pi, elem: e, a: x, b: y, ulp: d, class: ClassNumeric}
	}
	b := bucket(d)
	w.hist[b]++
	if !w.max.ok || d > w.max.ulp {
		w.max = hit{ok: true, piece: pi, elem: e, a: x, b: y, ulp: d, class: ClassNumeric}
	}
	level16 := uint8(levelNaN)
	if o.lowMask != 0 {
		d16 := bf16ULP(d)
		b16 := bucket(d16)
		w.hist16[b16]++
		level16 = uint8(b16)
		if !w.max16.ok || d16 > w.max16.ulp {
			w.max16 = hit{ok: true, piece: pi, elem: e, a: x, b: y, ulp: d16, class: ClassNumeric}
		}
	}
	w.mark(o, pi, p, e, uint8(b), level16)
	var va, vb float64
	switch f.dt {
	case capture.BF16:
		va, vb = float64(math.Float32frombits(uint32(x)<<16)), float64(math.Float32frombits(uint32(y)<<16))
	case capture.F32:
		va, vb = float64(math.Float32frombits(uint32(x))), float64(math.Float32frombits(uint32(y)))
	default:
		va, vb = f.value(x), f.value(y)
	}
	ad := math.Abs(va - vb)
	if ad > w.maxAbs {
		w.maxAbs = ad
	}
	// the larger magnitude by a compare, not max (finite and non-negative: max's NaN and −0 handling costs
	// several instructions for nothing)
	den := math.Abs(va)
	if m := math.Abs(vb); m > den {
		den = m
	}
	if den > 0 && ad > w.maxRel*den {
		w.maxRel = ad / den
	}
	return ad
}

// inRow reports whether elements [e, e+n) of piece pi lie in the row of the last mismatch (whose row bit and
// map row are set: finiteRun needs no row bookkeeping).
func (w *acc) inRow(pi int32, p *piece, e, n int64) bool {
	return pi == w.rowPiece && e >= w.rowLo && e+n <= w.rowLo+p.rowLen
}

// finiteRun is recordFinite over every lane of the eight-byte words of a and b (elements e..., a bf16 or f32
// op, all in the row of the last mismatch: inRow), k words at a time (1 or 4: group's one word, diff's group
// of four), while a chunk of k words holds no NaN or Inf on either side; it returns how many words it took,
// sum with each chunk's Σ|a−b| added (each word's lanes summed from 0, a chunk's words from 0: the sums group
// and diff form, so Σ|a−b| keeps its bits) and the OR of the words taken (diff's low). It visits every lane
// in order, equal ones too, without a branch on whether a lane differs (half the lanes of a replay against
// another stack's forward differ, at random, and such a branch mispredicted at every other lane): an equal
// lane has distance 0, so it adds 0 to the counts, bucket 0 to nothing, 0 to Σ|a−b|, and cannot raise the
// maximum, the map or the relative error. Every update is recordFinite's, in the same element order, so the
// OpStat is the same bit for bit (TestRecordFiniteMatchesRecord); but the counters and extremes live in
// locals, and the histograms are split by lane (histL: one increment chain per lane, not one store-to-load
// chain through hist[1] at every lane), added up by fold. first is set already (the row of the last
// mismatch holds one). The f32 twin in bf16 ULPs is skipped once this worker has seen a low bit (low0 is
// diff's OR so far): fill reads the twin only when no worker has.
func (w *acc) finiteRun(o *opWork, p *piece, e int64, a, b []byte, k int, sum float64, low0 uint64) (int, float64, uint64) {
	f := o.f
	nb := uint(8 * f.size)
	up := 64 - nb        // a lane's shift to the top of a word
	vs := 32 - nb        // to an f32's bits: a bf16 is the top half of an f32
	half := f.width >> 1 // the magnitude bits
	M, L, H := f.swM, f.swL, f.swH
	var cells []int32
	row, row16 := w.gridRow, w.gridRow16
	if len(w.grid) == 0 {
		row, row16 = nil, nil
	} else if o.colCell != nil {
		cells = o.colCell[e-w.rowLo:]
	}
	twin := o.lowMask != 0 && (w.low|low0)&o.lowMask == 0
	if !twin {
		row16 = nil
	}
	hist, hist16 := &w.histL, &w.hist16L
	mism, maxULP, max16 := w.mismatched, w.max.ulp, w.max16.ulp
	maxAbs, maxRel := w.maxAbs, w.maxRel
	var low uint64
	words := 0
	el := int64(0) // the lane's element, from e
	b = b[:len(a)]
	for ; len(a) >= 8*k; a, b = a[8*k:], b[8*k:] {
		var sp uint64
		for j := 0; j < 8*k; j += 8 {
			wa, wb := binary.LittleEndian.Uint64(a[j:]), binary.LittleEndian.Uint64(b[j:])
			sp |= ((wa & M) + L) | ((wb & M) + L)
		}
		if sp&H != 0 { // a NaN or Inf in the chunk: group's
			break
		}
		var cs float64 // the chunk's Σ|a−b|
		for j := 0; j < 8*k; j += 8 {
			wa, wb := binary.LittleEndian.Uint64(a[j:]), binary.LittleEndian.Uint64(b[j:])
			low |= wa | wb
			var ws float64 // the word's
			for sh := uint(0); sh < 64; sh, el = sh+nb, el+1 {
				// the lanes sign-extended, then their ordered keys without a branch on the sign: the magnitude
				// for +, −magnitude − 1 for − (−0 just below +0); |kx − ky| is Format.Ordered's distance
				// (shift counts masked: Go's guard for a count ≥ 64 costs more than the shift)
				sx, sy := int64(wa<<((up-sh)&63))>>(up&63), int64(wb<<((up-sh)&63))>>(up&63)
				kx, ky := sx^(sx>>63)&int64(half), sy^(sy>>63)&int64(half)
				t := kx - ky
				m := t >> 63
				d := uint64((t ^ m) - m)
				ne := (d | -d) >> 63 // 1 when the lane differs
				bk := bits.Len64(d)  // bucket: 0 for an equal lane
				mism += int64(ne)
				hist[el&3][bk] += ne
				x, y := uint32(wa>>(sh&63))<<(vs&31), uint32(wb>>(sh&63))<<(vs&31) // as f32 bits
				// an empty max has ulp 0: any mismatch takes it; ties keep the earliest
				if d > maxULP {
					maxULP = d
					w.max = hit{ok: true, piece: w.rowPiece, elem: e + el, a: uint64(x >> (vs & 31)), b: uint64(y >> (vs & 31)), ulp: d, class: ClassNumeric}
				}
				var gc int64
				if row != nil {
					if cells != nil {
						gc = int64(cells[el])
					} else {
						gc = (e + el - w.rowLo) * int64(o.gridCols) / o.rowLen
					}
					if c := &row[gc]; *c < uint8(bk) {
						*c = uint8(bk)
					}
				}
				if twin { // f32 that may be bf16: the same in bf16 ULPs (bf16ULP; no NaN here)
					d16 := (d + 0xffff) >> 16
					b16 := bits.Len64(d16)
					hist16[el&3][b16] += ne
					if d16 > max16 {
						max16 = d16
						w.max16 = hit{ok: true, piece: w.rowPiece, elem: e + el, a: uint64(x), b: uint64(y), ulp: d16, class: ClassNumeric}
					}
					if row16 != nil {
						if c := &row16[gc]; *c < uint8(b16) {
							*c = uint8(b16)
						}
					}
				}
				va, vb := float64(math.Float32frombits(x)), float64(math.Float32frombits(y))
				ad := math.Abs(va - vb)
				if ad > maxAbs {
					maxAbs = ad
				}
				// ad > maxRel·max(|va|, |vb|) as two compares (maxRel ≥ 0: the product of the larger is the
				// larger product), so the larger magnitude is found only when the maximum moves
				if A, B := math.Abs(va), math.Abs(vb); ad > maxRel*A && ad > maxRel*B {
					if den := max(A, B); den > 0 {
						maxRel = ad / den
					}
				}
				ws += ad
			}
			cs += ws
		}
		sum += cs
		words += k
	}
	w.mismatched, w.maxAbs, w.maxRel = mism, maxAbs, maxRel
	return words, sum, low
}

// absDiff is |a − b| of two ordered images.
func absDiff(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return b - a
}
