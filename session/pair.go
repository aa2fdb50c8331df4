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
	// The comparison, computed once per pair (computeLevels) and handed to the TUI's heatmap as is:
	// Levels per element, Hist of levels (missing rows count as equal, NaN against a number in bucket 64),
	// Mismatched elements over rows both sides hold, the largest level, and the first largest ULP distance.
	Levels     []uint8
	Hist       [65]uint64
	Mismatched int64
	MaxLevel   int
	MaxULP     uint64
	MaxAt      int // element index of MaxULP (0 when all equal)
	MissingRow int // rows a side lacks
	// ULPDType is the dtype the distances are counted in: DType, except BF16 for an f32 op whose every value on
	// both sides is a bf16 value (the report's OpStat.ULPDType: bf16 logits widened to float32).
	ULPDType capture.DType

	f    *format
	cmpf *format // the format distances are counted in (f, or bf16 over the top halves of f32 values)
}

// Comparison levels (Pair.Levels, the report's mismatch maps).
const (
	LevelMissing = -1       // a side lacks the row (the maps' cells; Levels holds 0 there)
	LevelEqual   = 0        // bitwise identical
	LevelNaN     = levelNaN // NaN against a number; 1..64 are log2 ULP buckets: ULP in [2^(level−1), 2^level)
)

// computeLevels compares every element once (bands of rows in parallel, identical rows by bytes.Equal) and
// fills Levels, Hist, Mismatched, MaxLevel, MaxULP, MaxAt and MissingRow.
func (p *Pair) computeLevels() {
	if p.cmpf == nil {
		p.cmpf, p.ULPDType = p.f, p.DType
	}
	rb := p.Cols * p.f.size
	p.Levels = make([]uint8, p.Rows*p.Cols)
	p.Hist, p.Mismatched, p.MaxLevel, p.MaxULP, p.MaxAt, p.MissingRow = [65]uint64{}, 0, 0, 0, 0, 0
	type part struct {
		hist    [65]uint64
		mism    int64
		top     uint8
		max     uint64
		at      int
		missing int
	}
	const band = 16
	bands := (p.Rows + band - 1) / band
	parts := make([]part, bands)
	var wg sync.WaitGroup
	var next atomic.Int64
	for w := 0; w < min(runtime.GOMAXPROCS(0), bands); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			per := 8 / p.f.size
			for b := int(next.Add(1) - 1); b < bands; b = int(next.Add(1) - 1) {
				pt := &parts[b]
				for r := band * b; r < min(band*b+band, p.Rows); r++ {
					if !p.HasA[r] || !p.HasB[r] {
						pt.missing++
						pt.hist[0] += uint64(p.Cols)
						continue
					}
					a, bb := p.A[r*rb:(r+1)*rb], p.B[r*rb:(r+1)*rb]
					if bytes.Equal(a, bb) {
						pt.hist[0] += uint64(p.Cols)
						continue
					}
					lv := p.Levels[r*p.Cols : (r+1)*p.Cols]
					for c := 0; c < p.Cols; c++ {
						if c%per == 0 && c+per <= p.Cols && binary.LittleEndian.Uint64(a[c*p.f.size:]) == binary.LittleEndian.Uint64(bb[c*p.f.size:]) {
							pt.hist[0] += uint64(per)
							c += per - 1
							continue
						}
						x, y := p.f.load(a, c), p.f.load(bb, c)
						if x == y {
							pt.hist[0]++
							continue
						}
						if p.cmpf != p.f { // bf16 values widened to f32: their top halves are the bf16 patterns
							x, y = x>>16, y>>16
						}
						cls, d := p.cmpf.compare(x, y)
						l := uint8(bucket(d))
						if cls == ClassNaNNumber {
							l = LevelNaN
						}
						lv[c] = l
						pt.hist[bucket(d)]++
						pt.mism++
						pt.top = max(pt.top, l)
						if d > pt.max {
							pt.max, pt.at = d, r*p.Cols+c
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	for _, pt := range parts { // in row order, so the first of equal maxima wins as in a serial scan
		for b, n := range pt.hist {
			p.Hist[b] += n
		}
		p.Mismatched += pt.mism
		p.MaxLevel = max(p.MaxLevel, int(pt.top))
		p.MissingRow += pt.missing
		if pt.max > p.MaxULP {
			p.MaxULP, p.MaxAt = pt.max, pt.at
		}
	}
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
