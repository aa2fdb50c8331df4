// Package heatmap draws a tensor pair's mismatch map over tokens × features: cells coloured by log2 ULP (an
// integer tensor's by equal or differ), two cells per character (half blocks), downsampled to the panel by
// taking each block's worst element, with a cursor, axis rulers, a legend and the slice's difference histogram.
package heatmap

import (
	"fmt"
	"runtime"
	"sync"

	"bitalign/internal/fp"
	"bitalign/session/view"
)

// Data is a pair's per-element ULP buckets, computed once per pair (in the background) and downsampled to
// the panel on every resize.
type Data struct {
	Pair    *view.Pair
	Format  fp.Format
	Bucket  []uint8 // per element: fp.Bucket(ULP), view.LevelNaN for a NaN against a number
	Hist    [65]uint64
	MaxULP  uint64
	MaxAt   int // element index of the largest ULP (0 when all equal)
	Diff    int64
	Missing int // rows one side did not capture (compared as equal, shown in the bit view)
}

// Prepare takes the element levels the core computed for p (view.Pair.Levels), or, for a source that gives
// none, computes them. A side that is missing leaves every bucket 0.
func Prepare(p *view.Pair) (*Data, error) {
	f, err := fp.Parse(p.DType)
	if err != nil {
		return nil, err
	}
	n := p.Rows * p.Cols
	if p.Levels != nil && len(p.Levels) == n {
		d := &Data{Pair: p, Format: f, Bucket: p.Levels, Hist: p.Hist, MaxULP: p.MaxULP, MaxAt: p.MaxAt,
			Missing: p.MissingRow}
		d.Diff = int64(n) - int64(d.Hist[0])
		return d, nil
	}
	d := &Data{Pair: p, Format: f, Bucket: make([]uint8, n)}
	if p.A == nil || p.B == nil {
		d.Hist[0] = uint64(n)
		return d, nil
	}
	if len(p.A) < n*f.Size || len(p.B) < n*f.Size {
		return nil, fmt.Errorf("heatmap: %s: %d×%d %s needs %d bytes a side, have %d and %d", p.Key, p.Rows, p.Cols,
			p.DType, n*f.Size, len(p.A), len(p.B))
	}
	// rows are split between the CPUs; each worker keeps its own histogram and maximum
	workers := max(1, min(runtime.GOMAXPROCS(0), p.Rows/64))
	type part struct {
		hist    [65]uint64
		max     uint64
		at      int
		missing int
	}
	parts := make([]part, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			pt := &parts[w]
			for r := w * p.Rows / workers; r < (w+1)*p.Rows/workers; r++ {
				if !p.Has(0, r) || !p.Has(1, r) {
					pt.missing++
					pt.hist[0] += uint64(p.Cols)
					continue
				}
				for i := r * p.Cols; i < (r+1)*p.Cols; i++ {
					a, b := f.Bits(p.A, i), f.Bits(p.B, i)
					if a == b {
						pt.hist[0]++
						continue
					}
					u := f.ULP(a, b)
					bk := fp.Bucket(u)
					d.Bucket[i] = bk
					pt.hist[bk]++
					if u > pt.max {
						pt.max, pt.at = u, i
					}
				}
			}
		}(w)
	}
	wg.Wait()
	for _, pt := range parts { // in row order, so the first of equal maxima wins as in a serial scan
		for b, c := range pt.hist {
			d.Hist[b] += c
		}
		d.Missing += pt.missing
		if pt.max > d.MaxULP {
			d.MaxULP, d.MaxAt = pt.max, pt.at
		}
	}
	d.Diff = int64(n) - int64(d.Hist[0])
	return d, nil
}

// Grid is Data downsampled to CR×CC cells: each cell holds its block's worst bucket and where that element is.
type Grid struct {
	Rows, Cols int // data: tokens × features
	CR, CC     int // cells
	Bucket     []uint8
	Arg        []int // element index of each cell's worst element (its first element when all are equal)
}

// RowOf is the cell row holding data row r.
func (g *Grid) RowOf(r int) int { return min(r*g.CR/max(g.Rows, 1), g.CR-1) }

// ColOf is the cell column holding data column c.
func (g *Grid) ColOf(c int) int { return min(c*g.CC/max(g.Cols, 1), g.CC-1) }

// RowSpan is the data rows [lo, hi) of cell row r.
func (g *Grid) RowSpan(r int) (int, int) { return r * g.Rows / g.CR, (r + 1) * g.Rows / g.CR }

// ColSpan is the data columns [lo, hi) of cell column c.
func (g *Grid) ColSpan(c int) (int, int) { return c * g.Cols / g.CC, (c + 1) * g.Cols / g.CC }

// Downsample bins d into at most maxR×maxC cells (never more cells than elements).
func Downsample(d *Data, maxR, maxC int) *Grid {
	p := d.Pair
	g := &Grid{Rows: p.Rows, Cols: p.Cols, CR: max(1, min(p.Rows, maxR)), CC: max(1, min(p.Cols, maxC))}
	g.Bucket = make([]uint8, g.CR*g.CC)
	g.Arg = make([]int, g.CR*g.CC)
	// column → cell map, so the inner loop is a table lookup
	colCell := make([]int32, p.Cols)
	for c := range colCell {
		colCell[c] = int32(g.ColOf(c))
	}
	binRows := func(from, to int) {
		for cr := from; cr < to; cr++ {
			lo, hi := g.RowSpan(cr)
			base := cr * g.CC
			for cc := 0; cc < g.CC; cc++ {
				c0, _ := g.ColSpan(cc)
				g.Arg[base+cc] = lo*p.Cols + c0
			}
			for r := lo; r < hi; r++ {
				row := d.Bucket[r*p.Cols : (r+1)*p.Cols]
				for c, bk := range row {
					if bk == 0 {
						continue
					}
					cell := base + int(colCell[c])
					if bk > g.Bucket[cell] {
						g.Bucket[cell] = bk
						g.Arg[cell] = r*p.Cols + c
					}
				}
			}
		}
	}
	// cell rows are independent: big tensors are binned on every CPU (this runs on resize)
	workers := 1
	if p.Rows*p.Cols >= 1<<20 {
		workers = min(runtime.GOMAXPROCS(0), g.CR)
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			binRows(w*g.CR/workers, (w+1)*g.CR/workers)
		}(w)
	}
	wg.Wait()
	return g
}
