package session

import (
	"bytes"
	"encoding/binary"
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"bitalign/capture"
)

// Pair is both sides' tensors of one (op, role, step, seq) as Rows × Cols matrices: row r is token position
// Pos0+r, column c is feature c of the per-token shape Feat flattened. A and B are little-endian elements of
// DType (views of the captures where possible: read only). A row a side lacks is zero there, with
// HasA[r]/HasB[r] false.
type Pair struct {
	Op, Role   string
	Index      int32
	Step, Seq  int64
	DType      capture.DType
	Pos0       int64
	Rows, Cols int
	Feat       []int64
	A, B       []byte
	HasA, HasB []bool
	// Mismatched counts differing elements over rows both sides hold; MaxLevel is the largest level.
	Mismatched int64
	MaxLevel   int

	f        *format
	pyr      []pyramidLevel // pyr[k]: max level per 4^k × 4^k block; pyr[0] is the elements (compared on demand)
	missing  []int32        // prefix count of rows missing on a side
	mu       sync.Mutex
	heatKey  [2]int
	heatLast [][]float32
}

// Heatmap cell and element levels.
const (
	LevelMissing = -1       // a row of the cell is missing on a side (and nothing in it differs)
	LevelEqual   = 0        // every element identical
	LevelNaN     = levelNaN // NaN against a number; 1..64 are log2 ULP buckets: ULP in [2^(level−1), 2^level)
)

// pyramidLevel is one level of the max pyramid: blocks of side `side` elements, rows × cols of them.
type pyramidLevel struct {
	side       int
	rows, cols int
	max        []uint8
}

// computeLevels compares every element once (bands of four rows in parallel, identical rows by bytes.Equal)
// and builds the max pyramid the heatmap reads. Element levels are not stored (a [T, vocab] logits pair would
// need a byte per element): the pyramid starts at 4×4 blocks and elements are re-compared where needed.
func (p *Pair) computeLevels() {
	rb := p.Cols * p.f.size
	l1 := pyramidLevel{side: 4, rows: (p.Rows + 3) / 4, cols: (p.Cols + 3) / 4}
	l1.max = make([]uint8, l1.rows*l1.cols)
	var mu sync.Mutex
	var wg sync.WaitGroup
	var next atomic.Int64
	for w := 0; w < min(runtime.GOMAXPROCS(0), l1.rows); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mism int64
			var top uint8
			per := 8 / p.f.size
			for band := int(next.Add(1) - 1); band < l1.rows; band = int(next.Add(1) - 1) {
				dst := l1.max[band*l1.cols : (band+1)*l1.cols]
				for r := 4 * band; r < min(4*band+4, p.Rows); r++ {
					if !p.HasA[r] || !p.HasB[r] {
						continue
					}
					a, b := p.A[r*rb:(r+1)*rb], p.B[r*rb:(r+1)*rb]
					if bytes.Equal(a, b) {
						continue
					}
					for c := 0; c < p.Cols; c++ {
						if c%per == 0 && c+per <= p.Cols && binary.LittleEndian.Uint64(a[c*p.f.size:]) == binary.LittleEndian.Uint64(b[c*p.f.size:]) {
							c += per - 1
							continue
						}
						l := p.level(p.f.load(a, c), p.f.load(b, c))
						if l == 0 {
							continue
						}
						dst[c/4] = max(dst[c/4], l)
						top = max(top, l)
						mism++
					}
				}
			}
			mu.Lock()
			p.Mismatched += mism
			p.MaxLevel = max(p.MaxLevel, int(top))
			mu.Unlock()
		}()
	}
	wg.Wait()
	p.pyr = []pyramidLevel{{side: 1, rows: p.Rows, cols: p.Cols}, l1} // level 0: elements, compared on demand
	for side := 16; side <= 256 && (side/4 < p.Rows || side/4 < p.Cols); side *= 4 {
		prev := p.pyr[len(p.pyr)-1]
		l := pyramidLevel{side: side, rows: (prev.rows + 3) / 4, cols: (prev.cols + 3) / 4}
		l.max = make([]uint8, l.rows*l.cols)
		for r := 0; r < prev.rows; r++ {
			dst := l.max[r/4*l.cols:][:l.cols]
			for c, v := range prev.max[r*prev.cols : (r+1)*prev.cols] {
				if v > dst[c/4] {
					dst[c/4] = v
				}
			}
		}
		p.pyr = append(p.pyr, l)
	}
	p.missing = make([]int32, p.Rows+1)
	for r := 0; r < p.Rows; r++ {
		p.missing[r+1] = p.missing[r]
		if !p.HasA[r] || !p.HasB[r] {
			p.missing[r+1]++
		}
	}
}

// level is the comparison level of two elements' bits.
func (p *Pair) level(x, y uint64) uint8 {
	if x == y {
		return LevelEqual
	}
	cls, d := p.f.compare(x, y)
	if cls == ClassNaNNumber {
		return LevelNaN
	}
	return uint8(bucket(d))
}

// elemLevel is element (row, col)'s level, 0 where a side lacks the row.
func (p *Pair) elemLevel(row, col int) uint8 {
	if !p.HasA[row] || !p.HasB[row] {
		return 0
	}
	i := row*p.Cols + col
	return p.level(p.f.load(p.A, i), p.f.load(p.B, i))
}

// Level is element (row, col)'s comparison level (LevelMissing when a side lacks the row).
func (p *Pair) Level(row, col int) int {
	if !p.HasA[row] || !p.HasB[row] {
		return LevelMissing
	}
	return int(p.elemLevel(row, col))
}

// CellRange gives the rows [r0, r1) and columns [c0, c1) that cell (i, j) of a rows × cols heatmap covers.
// Every element is in exactly one cell when the heatmap is no larger than the pair; a larger heatmap repeats
// elements.
func (p *Pair) CellRange(i, j, rows, cols int) (r0, r1, c0, c1 int) {
	r0, r1 = span1(i, rows, p.Rows)
	c0, c1 = span1(j, cols, p.Cols)
	return
}

func span1(i, cells, n int) (int, int) {
	lo := int(int64(i) * int64(n) / int64(cells))
	hi := int(int64(i+1) * int64(n) / int64(cells))
	return lo, max(hi, lo+1)
}

// Heatmap downsamples the pair to rows × cols cells, each the largest level of its elements (LevelMissing
// when nothing in it differs and a side lacks one of its rows). It reads a precomputed max pyramid (blocks
// of 4, 16, 64, 256 elements a side) and scans elements only at cell edges where a block could raise the
// cell's level; rows of cells are computed in parallel and the last result is cached.
func (p *Pair) Heatmap(rows, cols int) [][]float32 {
	if rows <= 0 || cols <= 0 || p.Rows == 0 || p.Cols == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.heatKey == [2]int{rows, cols} && p.heatLast != nil {
		return p.heatLast
	}
	out := make([][]float32, rows)
	flat := make([]float32, rows*cols)
	for i := range out {
		out[i] = flat[i*cols : (i+1)*cols]
	}
	// rows of cells are independent: share them among the cores
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < min(runtime.GOMAXPROCS(0), rows); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < rows; i = int(next.Add(1) - 1) {
				r0, r1 := span1(i, rows, p.Rows)
				for j := range out[i] {
					c0, c1 := span1(j, cols, p.Cols)
					m := p.maxIn(r0, r1, c0, c1)
					if m == 0 && p.missing[r1]-p.missing[r0] > 0 {
						out[i][j] = LevelMissing
					} else {
						out[i][j] = float32(m)
					}
				}
			}
		}()
	}
	wg.Wait()
	p.heatKey, p.heatLast = [2]int{rows, cols}, out
	return out
}

// maxIn is the largest level in rows [r0, r1) × columns [c0, c1). It starts at the coarsest pyramid level
// whose blocks fit in the cell, takes whole blocks, and descends into partial blocks only where they could
// raise the maximum found so far.
func (p *Pair) maxIn(r0, r1, c0, c1 int) uint8 {
	k := 0
	for k+1 < len(p.pyr) && p.pyr[k+1].side <= min(r1-r0, c1-c0) {
		k++
	}
	return p.query(k, r0, r1, c0, c1, 0)
}

func (p *Pair) query(k, r0, r1, c0, c1 int, m uint8) uint8 {
	l := &p.pyr[k]
	if k == 0 {
		for r := r0; r < r1; r++ {
			for c := c0; c < c1; c++ {
				m = max(m, p.elemLevel(r, c))
			}
		}
		return m
	}
	s := l.side
	br0, br1 := r0/s, (r1+s-1)/s
	bc0, bc1 := c0/s, (c1+s-1)/s
	full := func(b, lo, hi, n int) bool { return b*s >= lo && min((b+1)*s, n) <= hi }
	for bi := br0; bi < br1; bi++ {
		if !full(bi, r0, r1, p.Rows) {
			continue
		}
		row := l.max[bi*l.cols:]
		for bj := bc0; bj < bc1; bj++ {
			if full(bj, c0, c1, p.Cols) {
				m = max(m, row[bj])
			}
		}
	}
	for bi := br0; bi < br1; bi++ {
		rowFull := full(bi, r0, r1, p.Rows)
		row := l.max[bi*l.cols:]
		for bj := bc0; bj < bc1; bj++ {
			if row[bj] <= m || rowFull && full(bj, c0, c1, p.Cols) {
				continue
			}
			m = p.query(k-1, max(r0, bi*s), min(r1, (bi+1)*s), max(c0, bj*s), min(c1, (bj+1)*s), m)
		}
	}
	return m
}

// Worst returns the first element with the largest level in rows [r0, r1) × columns [c0, c1) (row-major
// order), for moving a cursor from a heatmap cell to an element.
func (p *Pair) Worst(r0, r1, c0, c1 int) (row, col int) {
	row, col = r0, c0
	best := -1
	for r := r0; r < min(r1, p.Rows); r++ {
		for c := c0; c < min(c1, p.Cols); c++ {
			if l := int(p.elemLevel(r, c)); l > best {
				best, row, col = l, r, c
			}
		}
	}
	return row, col
}

// Element is one element of a pair on both sides.
type Element struct {
	Row, Col   int
	Pos        int64   // token position
	Index      []int64 // coordinates in Feat
	DType      capture.DType
	A, B       Value // zero when the side lacks the row
	HasA, HasB bool
	Class      Class
	ULP        uint64
	Abs, Rel   float64 // |a−b| and |a−b|/max(|a|,|b|), NaN unless both are finite
	ValueA     float64
	ValueB     float64
}

// Element returns element (row, col) of both sides.
func (p *Pair) Element(row, col int) Element {
	e := Element{Row: row, Col: col, Pos: p.Pos0 + int64(row), Index: unravel(int64(col), p.Feat), DType: p.DType,
		HasA: p.HasA[row], HasB: p.HasB[row], Abs: math.NaN(), Rel: math.NaN()}
	i := row*p.Cols + col
	x, y := p.f.load(p.A, i), p.f.load(p.B, i)
	if e.HasA {
		e.A, e.ValueA = valueOf(p.f, x), p.f.value(x)
	}
	if e.HasB {
		e.B, e.ValueB = valueOf(p.f, y), p.f.value(y)
	}
	if e.HasA && e.HasB {
		e.Class, e.ULP = p.f.compare(x, y)
		if !math.IsInf(e.ValueA, 0) && !math.IsInf(e.ValueB, 0) && !math.IsNaN(e.ValueA) && !math.IsNaN(e.ValueB) {
			e.Abs = math.Abs(e.ValueA - e.ValueB)
			e.Rel = 0
			if den := math.Max(math.Abs(e.ValueA), math.Abs(e.ValueB)); den > 0 {
				e.Rel = e.Abs / den
			}
		}
	}
	return e
}

// Layout gives a dtype's bit fields for a bit view: sign bits (1 for floats and signed integers), exponent
// and mantissa bits (0 for integers), total bits.
func Layout(dt capture.DType) (sign, exponent, mantissa, total int) {
	f, err := formatOf(dt)
	if err != nil {
		return 0, 0, 0, 8 * dt.Size()
	}
	total = 8 * f.size
	switch f.kind {
	case kindFloat:
		return 1, int(f.expBits), int(f.mantBits), total
	case kindSigned:
		return 1, 0, 0, total
	}
	return 0, 0, 0, total
}
