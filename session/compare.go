package session

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/bits"
	"sync/atomic"
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
	ulp   uint64
	class Class
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
	f      *format
	pieces []piece
	jobs   []job
	sums   []float64 // Σ|a−b| per job, summed in job order at the end so the mean does not depend on scheduling
	done   []int64   // bytes (both sides) of the jobs before each job, for progress
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
	hist                              [65]uint64
	first, max                        hit
	maxAbs, maxRel                    float64
	grid                              []uint8
	// the row of the last mismatch: its piece, first element and map row
	rowPiece int32
	rowLo    int64
	gridRow  []uint8
}

func (w *acc) reset(cells int) {
	g := w.grid
	*w = acc{rowPiece: -1}
	if cap(g) < cells {
		g = make([]uint8, cells)
	}
	g = g[:cells]
	clear(g)
	w.grid = g
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
	for i := range w.hist {
		w.hist[i] += o.hist[i]
	}
	if o.first.before(w.first) {
		w.first = o.first
	}
	if o.max.ok && (!w.max.ok || o.max.ulp > w.max.ulp || o.max.ulp == w.max.ulp && o.max.before(w.max)) {
		w.max = o.max
	}
	w.maxAbs = math.Max(w.maxAbs, o.maxAbs)
	w.maxRel = math.Max(w.maxRel, o.maxRel)
	for i, v := range o.grid {
		w.grid[i] = max(w.grid[i], v)
	}
}

// run compares one job and returns its Σ|a−b|.
func (w *acc) run(o *opWork, ji int) float64 {
	j := o.jobs[ji]
	p := &o.pieces[j.piece]
	sz := int64(o.f.size)
	a, b := p.a[j.lo*sz:j.hi*sz], p.b[j.lo*sz:j.hi*sz]
	if bytes.Equal(a, b) {
		if o.f.kind == kindFloat {
			nan, inf := o.f.countSpecials(a)
			w.nanA += nan
			w.nanB += nan
			w.infA += inf
			w.infB += inf
		}
		return 0
	}
	return w.diff(o, j.piece, p, a, b, j.lo)
}

// countSpecials counts NaNs and infinities in data. A SWAR test over four eight-byte words at a time rejects
// the (usual) stretches holding no special value.
func (f *format) countSpecials(data []byte) (nan, inf int64) {
	M, L, H := f.swM, f.swL, f.swH
	for len(data) >= 32 {
		w0 := binary.LittleEndian.Uint64(data)
		w1 := binary.LittleEndian.Uint64(data[8:])
		w2 := binary.LittleEndian.Uint64(data[16:])
		w3 := binary.LittleEndian.Uint64(data[24:])
		if (((w0&M)+L)|((w1&M)+L)|((w2&M)+L)|((w3&M)+L))&H != 0 {
			n, k := f.countSlow(data[:32])
			nan += n
			inf += k
		}
		data = data[32:]
	}
	n, k := f.countSlow(data)
	return nan + n, inf + k
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
	// four words at a time: one branch for the common case of a group with no difference and no special
	for len(a) >= 32 {
		a4, b4 := a[:32:32], b[:32:32]
		wa0, wb0 := binary.LittleEndian.Uint64(a4), binary.LittleEndian.Uint64(b4)
		wa1, wb1 := binary.LittleEndian.Uint64(a4[8:]), binary.LittleEndian.Uint64(b4[8:])
		wa2, wb2 := binary.LittleEndian.Uint64(a4[16:]), binary.LittleEndian.Uint64(b4[16:])
		wa3, wb3 := binary.LittleEndian.Uint64(a4[24:]), binary.LittleEndian.Uint64(b4[24:])
		x := (wa0 ^ wb0) | (wa1 ^ wb1) | (wa2 ^ wb2) | (wa3 ^ wb3)
		// Only A's words need the special-value test here: where x == 0, B's words are A's (group tests both).
		sp := ((wa0 & M) + L) | ((wa1 & M) + L) | ((wa2 & M) + L) | ((wa3 & M) + L)
		if x|sp&H != 0 {
			sum += w.group(o, pi, p, e, a4, b4)
		}
		a, b = a[32:], b[32:]
		e += 4 * per
	}
	for len(a) >= 8 {
		wa := binary.LittleEndian.Uint64(a)
		wb := binary.LittleEndian.Uint64(b)
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
	lane := uint(8*f.size) - 1
	for m := ((wa & f.swM) + f.swL) & f.swH; m != 0; m &= m - 1 {
		x := (wa >> (uint(bits.TrailingZeros64(m)) &^ lane)) & f.width
		if f.isNaN(x) {
			w.nanA++
		} else if f.isInf(x) {
			w.infA++
		}
	}
	for m := ((wb & f.swM) + f.swL) & f.swH; m != 0; m &= m - 1 {
		y := (wb >> (uint(bits.TrailingZeros64(m)) &^ lane)) & f.width
		if f.isNaN(y) {
			w.nanB++
		} else if f.isInf(y) {
			w.infB++
		}
	}
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
	if pi != w.rowPiece || e < w.rowLo || e >= w.rowLo+p.rowLen { // a new row: one division per row
		row := e / p.rowLen
		w.rowPiece, w.rowLo = pi, row*p.rowLen
		bit := uint64(1) << (row % 64)
		if m := &p.rowMism[row/64]; atomic.LoadUint64(m)&bit == 0 {
			atomic.OrUint64(m, bit)
		}
		if len(w.grid) > 0 {
			w.gridRow = w.grid[(p.pos+row-o.posLo)*int64(o.gridRows)/o.posSpan*int64(o.gridCols):][:o.gridCols]
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
	}
	if cls != ClassNumeric {
		return 0
	}
	va, vb := f.value(x), f.value(y)
	if math.IsInf(va, 0) || math.IsInf(vb, 0) {
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
