package logprobs

import (
	"context"
	"fmt"
	"runtime"
	"sync"

	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/schema"
)

// The per-sequence layout's fast path: Parquet lists of int32 token ids and float32 log-probabilities, the
// shape RL batches have. The column chunks are decoded with the low-level readers straight into one buffer
// per chunk, row groups in parallel, and the sequences are slices of those buffers (zero-copy), instead of
// building Arrow list arrays first (about half the decoding time went into that). Any other shape takes the
// pqarrow path.

// listLeaf is a list column's leaf: its index, max levels, and whether elements may be null.
type listLeaf struct {
	col        int
	maxDef     int16
	elemOpt    bool
	emptyLevel int16 // the definition level of an empty list; lower: a null list
}

func leafOf(sc *schema.Schema, col int, want parquet.Type) (listLeaf, bool) {
	c := sc.Column(col)
	if c.PhysicalType() != want || c.MaxRepetitionLevel() != 1 {
		return listLeaf{}, false
	}
	l := listLeaf{col: col, maxDef: c.MaxDefinitionLevel(), elemOpt: c.SchemaNode().RepetitionType() == parquet.Repetitions.Optional}
	l.emptyLevel = l.maxDef - 1
	if l.elemOpt {
		l.emptyLevel--
	}
	return l, l.emptyLevel >= 0
}

// flatLeaf checks a non-repeated integer column (seq, start).
func flatLeaf(sc *schema.Schema, col int) bool {
	c := sc.Column(col)
	t := c.PhysicalType()
	return c.MaxRepetitionLevel() == 0 && (t == parquet.Types.Int32 || t == parquet.Types.Int64)
}

// rowGroupLists is one row group's decoded sequences.
type rowGroupLists struct {
	seq, start []int64
	ends       []int // per sequence: one past its last value in toks/lps
	toks       []int32
	lps        []float32
}

// readParquetLists reads the per-sequence layout through the fast path; ok false when the file's shape is
// not one it takes (then nothing was read).
func readParquetLists(ctx context.Context, pf *file.Reader, l *layout, leaves map[int][]int, b *Builder) (ok bool, err error) {
	sc := pf.MetaData().Schema
	one := func(field int) int {
		if field < 0 || len(leaves[field]) != 1 {
			return -1
		}
		return leaves[field][0]
	}
	seqCol, startCol, tokCol, lpCol := one(l.seq), one(l.start), one(l.tokens), one(l.lps)
	if seqCol < 0 || lpCol < 0 || !flatLeaf(sc, seqCol) || l.start >= 0 && (startCol < 0 || !flatLeaf(sc, startCol)) {
		return false, nil
	}
	lpLeaf, okLp := leafOf(sc, lpCol, parquet.Types.Float)
	var tokLeaf listLeaf
	okTok := true
	if l.tokens >= 0 {
		tokLeaf, okTok = leafOf(sc, tokCol, parquet.Types.Int32)
	}
	if !okLp || !okTok || l.tokens >= 0 && tokCol < 0 {
		return false, nil
	}
	n := pf.NumRowGroups()
	groups := make([]rowGroupLists, n)
	errs := make([]error, n)
	var next int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lv levels // this worker's level buffers, reused over its row groups
			for {
				mu.Lock()
				g := next
				next++
				mu.Unlock()
				if g >= n || ctx.Err() != nil {
					return
				}
				func() {
					// a corrupt file must give an error, never a panic (this goroutine is not Read's)
					defer func() {
						if r := recover(); r != nil {
							errs[g] = fmt.Errorf("logprobs: %s: corrupt Parquet file (row group %d: %v)", l.path, g, r)
						}
					}()
					rg := pf.RowGroup(g)
					gl := &groups[g]
					if errs[g] = l.readInts(rg, seqCol, l.names.Seq, &gl.seq); errs[g] != nil {
						return
					}
					if startCol >= 0 {
						if errs[g] = l.readInts(rg, startCol, l.names.Start, &gl.start); errs[g] != nil {
							return
						}
					}
					var lpEnds []int
					if lpEnds, errs[g] = readList(l, rg, lpLeaf, l.names.Logprobs, &gl.lps, &lv); errs[g] != nil {
						return
					}
					gl.ends = lpEnds
					if tokCol >= 0 {
						tokEnds, err := readList(l, rg, tokLeaf, l.names.Tokens, &gl.toks, &lv)
						if err != nil {
							errs[g] = err
							return
						}
						for i := range max(len(tokEnds), len(lpEnds)) {
							if i >= len(lpEnds) || i >= len(tokEnds) || tokEnds[i] != lpEnds[i] {
								errs[g] = fmt.Errorf("logprobs: %s: row group %d: the %s and %s lists differ in length", l.path, g, l.names.Tokens, l.names.Logprobs)
								break
							}
						}
					}
					if errs[g] == nil && (len(gl.ends) != len(gl.seq) || gl.start != nil && len(gl.start) != len(gl.seq)) {
						errs[g] = fmt.Errorf("logprobs: %s: row group %d: %d sequence ids for %d lists", l.path, g, len(gl.seq), len(gl.ends))
					}
				}()
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return true, err
	}
	for _, err := range errs {
		if err != nil {
			return true, err
		}
	}
	for g := range groups {
		gl := &groups[g]
		lo := 0
		for i, id := range gl.seq {
			hi := gl.ends[i]
			var start int64
			if gl.start != nil {
				start = gl.start[i]
			}
			var toks []int32
			if gl.toks != nil {
				toks = gl.toks[lo:hi:hi]
			}
			if err := b.AddSeq(id, start, toks, gl.lps[lo:hi:hi]); err != nil {
				return true, err
			}
			lo = hi
		}
	}
	return true, nil
}

// readInts reads a flat integer column chunk (no nulls).
func (l *layout) readInts(rg *file.RowGroupReader, col int, name string, out *[]int64) error {
	cr, err := rg.Column(col)
	if err != nil {
		return fmt.Errorf("logprobs: %s: column %q: %v", l.path, name, err)
	}
	rows := rg.NumRows()
	if rows < 0 || rows > maxValues(l.size) {
		return fmt.Errorf("logprobs: %s: a row group claims %d rows in a %d-byte file", l.path, rows, l.size)
	}
	maxDef := cr.Descriptor().MaxDefinitionLevel()
	def := make([]int16, rows)
	vals := make([]int64, rows)
	got := int64(0)
	nv := 0
	for got < rows {
		var total int64
		var read int
		switch r := cr.(type) {
		case *file.Int64ColumnChunkReader:
			total, read, err = r.ReadBatch(rows-got, vals[nv:], def[got:], nil)
		case *file.Int32ColumnChunkReader:
			buf := make([]int32, rows-got)
			total, read, err = r.ReadBatch(rows-got, buf, def[got:], nil)
			for i := range read {
				vals[nv+i] = int64(buf[i])
			}
		default:
			return fmt.Errorf("logprobs: %s: column %q is not an integer column", l.path, name)
		}
		if err != nil {
			return fmt.Errorf("logprobs: %s: column %q: %v", l.path, name, err)
		}
		if total == 0 {
			break
		}
		got += total
		nv += read
	}
	if got != rows || nv != int(rows) {
		return fmt.Errorf("logprobs: %s: column %q has %d values (%d nulls) for %d rows", l.path, name, nv, got-int64(nv), rows)
	}
	for _, d := range def {
		if d < maxDef {
			return fmt.Errorf("logprobs: %s: column %q has nulls", l.path, name)
		}
	}
	*out = vals
	return nil
}

// levels are a worker's scratch definition and repetition levels.
type levels struct{ def, rep []int16 }

// readList reads a list column chunk's values into out and returns, per row, one past its last value.
func readList[T int32 | float32](l *layout, rg *file.RowGroupReader, leaf listLeaf, name string, out *[]T, lv *levels) ([]int, error) {
	cr, err := rg.Column(leaf.col)
	if err != nil {
		return nil, fmt.Errorf("logprobs: %s: column %q: %v", l.path, name, err)
	}
	meta, err := rg.MetaData().ColumnChunk(leaf.col)
	if err != nil {
		return nil, fmt.Errorf("logprobs: %s: column %q: %v", l.path, name, err)
	}
	nlev := meta.NumValues() // levels: values, empty and null lists
	if nlev < 0 || nlev > maxValues(l.size) {
		return nil, fmt.Errorf("logprobs: %s: column %q claims %d values in a row group of a %d-byte file (at most %d)", l.path, name, nlev, l.size, maxValues(l.size))
	}
	vals := make([]T, nlev)
	if int64(cap(lv.def)) < nlev {
		lv.def, lv.rep = make([]int16, nlev), make([]int16, nlev)
	}
	def, rep := lv.def[:nlev], lv.rep[:nlev]
	var got int64
	nv := 0
	for got < nlev {
		var total int64
		var read int
		switch r := any(cr).(type) {
		case *file.Float32ColumnChunkReader:
			total, read, err = r.ReadBatch(nlev-got, any(vals[nv:]).([]float32), def[got:], rep[got:])
		case *file.Int32ColumnChunkReader:
			total, read, err = r.ReadBatch(nlev-got, any(vals[nv:]).([]int32), def[got:], rep[got:])
		default:
			return nil, fmt.Errorf("logprobs: %s: column %q: unexpected physical type", l.path, name)
		}
		if err != nil {
			return nil, fmt.Errorf("logprobs: %s: column %q: %v", l.path, name, err)
		}
		if total == 0 {
			break
		}
		got += total
		nv += read
	}
	if got != nlev {
		return nil, fmt.Errorf("logprobs: %s: column %q: %d of %d values", l.path, name, got, nlev)
	}
	ends := make([]int, 0, rg.NumRows())
	v := 0
	for i := range def {
		if rep[i] == 0 && i > 0 {
			ends = append(ends, v)
		}
		switch d := def[i]; {
		case d == leaf.maxDef:
			v++
		case leaf.elemOpt && d == leaf.maxDef-1:
			return nil, fmt.Errorf("logprobs: %s: column %q has null elements (drop padding and masked tokens before export)", l.path, name)
		case d < leaf.emptyLevel:
			return nil, fmt.Errorf("logprobs: %s: column %q has null lists", l.path, name)
		}
	}
	if nlev > 0 {
		ends = append(ends, v)
	}
	if v != nv {
		return nil, fmt.Errorf("logprobs: %s: column %q: nlev give %d values, the pages %d", l.path, name, v, nv)
	}
	*out = vals[:nv:nv]
	return ends, nil
}
