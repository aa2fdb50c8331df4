package logprobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// Columns names a table's columns (bitalign diff --seq-col, --pos-col, ...).
type Columns struct {
	Seq, Pos, Token, Logprob string // one row per token
	Tokens, Logprobs, Start  string // one row per sequence: lists, and the first listed token's position
}

// DefaultColumns are the names used unless a flag says otherwise.
var DefaultColumns = Columns{Seq: "seq", Pos: "pos", Token: "token", Logprob: "logprob", Tokens: "tokens",
	Logprobs: "logprobs", Start: "start"}

// Options say how to read a table.
type Options struct {
	Columns   Columns   // zero fields take DefaultColumns' names
	Positions Numbering // what the table's positions count, unless the file says (KeyPositions)
	// PositionsSet: Positions was asked for explicitly (--positions), so it overrides the file's metadata.
	PositionsSet bool
}

// Schema metadata a logprob table may carry (bitalign_capture.write_logprobs writes both).
const (
	KeySide      = "bitalign.logprobs.side"      // "trainer", "sampler", ...
	KeyPositions = "bitalign.logprobs.positions" // "absolute" or "generated"
)

func (o Options) columns() Columns {
	c, d := o.Columns, DefaultColumns
	for _, f := range []struct {
		p *string
		d string
	}{{&c.Seq, d.Seq}, {&c.Pos, d.Pos}, {&c.Token, d.Token},
		{&c.Logprob, d.Logprob}, {&c.Tokens, d.Tokens}, {&c.Logprobs, d.Logprobs}, {&c.Start, d.Start}} {
		if *f.p == "" {
			*f.p = f.d
		}
	}
	return c
}

// Read reads the logprob table at path, its format told by Sniff. Every error names the file.
func Read(ctx context.Context, path string, o Options) (t *Table, err error) {
	k, err := Sniff(path)
	if err != nil {
		return nil, err
	}
	// A corrupt file must give an error, never a panic, whatever the decoder does with it.
	defer func() {
		if r := recover(); r != nil {
			t, err = nil, fmt.Errorf("logprobs: %s: corrupt %s file (%v)", path, k, r)
		}
	}()
	switch k {
	case KindParquet:
		return readParquet(ctx, path, o)
	case KindArrowFile:
		return readArrowFile(ctx, path, o)
	case KindArrowStream:
		return readArrowStream(ctx, path, o)
	case KindJSONL:
		return readJSONL(ctx, path, o)
	case KindCapture:
		return nil, fmt.Errorf("logprobs: %s: a bitalign capture, not a logprob table", path)
	}
	return nil, fmt.Errorf("logprobs: %s: not a logprob table", path)
}

// MaxExpansion bounds how many values a Parquet file may decode to per byte of file: a column chunk that
// claims more (corrupt metadata, or a pathological run-length encoding) is refused before anything is
// allocated for it. Real log-probabilities and token ids take at least a byte per value.
const MaxExpansion = 64

// maxValues is the most values a Parquet file of size bytes is allowed to hold.
func maxValues(size int64) int64 { return min(MaxTokens, MaxExpansion*size+1<<16) }

// layout is a schema's columns resolved to one of the two layouts.
type layout struct {
	perSeq              bool
	seq, pos, token, lp int // per token (pos, token may be −1: absent)
	tokens, lps, start  int // per sequence (tokens, start may be −1)
	names               Columns
	path, format        string
	side, positions     string // the schema metadata's KeySide and KeyPositions
	size                int64  // the file's size in bytes
}

func resolve(path, format string, s *arrow.Schema, c Columns) (layout, error) {
	// A name may list alternatives ("old_log_prob,logprob"): the first the table has is used, so one flag
	// serves two tables that name a column differently.
	idx := func(names *string) int {
		for _, n := range strings.Split(*names, ",") {
			if is := s.FieldIndices(strings.TrimSpace(n)); len(is) > 0 {
				*names = strings.TrimSpace(n)
				return is[0]
			}
		}
		return -1
	}
	l := layout{path: path, format: format}
	l.seq, l.pos, l.token, l.lp = idx(&c.Seq), idx(&c.Pos), idx(&c.Token), idx(&c.Logprob)
	l.tokens, l.lps, l.start = idx(&c.Tokens), idx(&c.Logprobs), idx(&c.Start)
	l.names = c
	md := s.Metadata()
	if i := md.FindKey(KeySide); i >= 0 {
		l.side = md.Values()[i]
	}
	if i := md.FindKey(KeyPositions); i >= 0 {
		l.positions = md.Values()[i]
		if _, err := ParseNumbering(l.positions); err != nil {
			return l, fmt.Errorf("logprobs: %s: metadata %s = %q: want absolute or generated", path, KeyPositions, l.positions)
		}
	}
	var have []string
	for _, f := range s.Fields() {
		have = append(have, f.Name+" "+f.Type.String())
	}
	missing := func(want string) error {
		return fmt.Errorf("logprobs: %s: no column %s (the %s holds: %s); name the columns with --seq-col, --pos-col, --token-col, --logprob-col (one row per token) or --tokens-col, --logprobs-col, --start-col (one row per sequence)",
			path, want, format, strings.Join(have, ", "))
	}
	switch {
	case l.seq < 0:
		return l, missing(fmt.Sprintf("%q (sequence ids)", c.Seq))
	case l.lps >= 0:
		l.perSeq = true
		if err := checkList(path, s.Field(l.lps), true); err != nil {
			return l, err
		}
		if l.tokens >= 0 {
			if err := checkList(path, s.Field(l.tokens), false); err != nil {
				return l, err
			}
		}
	case l.lp < 0:
		return l, missing(fmt.Sprintf("%q (one log-probability per token) or %q (a list per sequence)", c.Logprob, c.Logprobs))
	case l.pos < 0:
		return l, missing(fmt.Sprintf("%q (each token's position)", c.Pos))
	}
	return l, nil
}

func checkList(path string, f arrow.Field, float bool) error {
	var elem arrow.DataType
	switch t := f.Type.(type) {
	case *arrow.ListType:
		elem = t.Elem()
	case *arrow.LargeListType:
		elem = t.Elem()
	case *arrow.FixedSizeListType:
		elem = t.Elem()
	default:
		return fmt.Errorf("logprobs: %s: column %q is %s, want a list of %s per sequence", path, f.Name, f.Type, map[bool]string{true: "floats", false: "token ids"}[float])
	}
	if float && !isFloat(elem) || !float && !isInt(elem) {
		return fmt.Errorf("logprobs: %s: column %q holds %s, want %s", path, f.Name, elem, map[bool]string{true: "floats", false: "integers"}[float])
	}
	return nil
}

func isFloat(t arrow.DataType) bool {
	switch t.ID() {
	case arrow.FLOAT16, arrow.FLOAT32, arrow.FLOAT64:
		return true
	}
	return false
}

func isInt(t arrow.DataType) bool {
	switch t.ID() {
	case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64, arrow.UINT8, arrow.UINT16, arrow.UINT32, arrow.UINT64:
		return true
	}
	return false
}

// ints reads an integer column (any width, no nulls).
func (l *layout) ints(col int, name string, a arrow.Array) (func(i int) int64, error) {
	if a.NullN() > 0 {
		return nil, fmt.Errorf("logprobs: %s: column %q has %d nulls", l.path, name, a.NullN())
	}
	switch a := a.(type) {
	case *array.Int64:
		v := a.Int64Values()
		return func(i int) int64 { return v[i] }, nil
	case *array.Int32:
		v := a.Int32Values()
		return func(i int) int64 { return int64(v[i]) }, nil
	case *array.Int16:
		return func(i int) int64 { return int64(a.Value(i)) }, nil
	case *array.Int8:
		return func(i int) int64 { return int64(a.Value(i)) }, nil
	case *array.Uint64:
		v := a.Uint64Values()
		return func(i int) int64 {
			if v[i] > 1<<62 {
				return -1 // out of every range: refused by the builder
			}
			return int64(v[i])
		}, nil
	case *array.Uint32:
		return func(i int) int64 { return int64(a.Value(i)) }, nil
	case *array.Uint16:
		return func(i int) int64 { return int64(a.Value(i)) }, nil
	case *array.Uint8:
		return func(i int) int64 { return int64(a.Value(i)) }, nil
	}
	return nil, fmt.Errorf("logprobs: %s: column %q is %s, want integers", l.path, name, a.DataType())
}

// floats reads a float column as float32: float64 values are rounded to the nearest float32 (ties to even),
// float16 values widened exactly.
func (l *layout) floats(name string, a arrow.Array) (f32 []float32, at func(i int) float32, err error) {
	if a.NullN() > 0 {
		return nil, nil, fmt.Errorf("logprobs: %s: column %q has %d nulls (drop padding and masked tokens before export)", l.path, name, a.NullN())
	}
	switch a := a.(type) {
	case *array.Float32:
		v := a.Float32Values()
		return v, func(i int) float32 { return v[i] }, nil
	case *array.Float64:
		v := a.Float64Values()
		return nil, func(i int) float32 { return float32(v[i]) }, nil
	case *array.Float16:
		return nil, func(i int) float32 { return a.Value(i).Float32() }, nil
	}
	return nil, nil, fmt.Errorf("logprobs: %s: column %q is %s, want floats", l.path, name, a.DataType())
}

// list is a list column's offsets and values.
func (l *layout) list(name string, a arrow.Array) (off func(i int) (int64, int64), values arrow.Array, err error) {
	if a.NullN() > 0 {
		return nil, nil, fmt.Errorf("logprobs: %s: column %q has %d null lists", l.path, name, a.NullN())
	}
	switch a := a.(type) {
	case *array.List:
		o := a.Offsets()
		return func(i int) (int64, int64) { return int64(o[i]), int64(o[i+1]) }, a.ListValues(), nil
	case *array.LargeList:
		o := a.Offsets()
		return func(i int) (int64, int64) { return o[i], o[i+1] }, a.ListValues(), nil
	case *array.FixedSizeList:
		n := int64(a.DataType().(*arrow.FixedSizeListType).Len())
		return func(i int) (int64, int64) { return int64(a.Offset()+i) * n, int64(a.Offset()+i+1) * n }, a.ListValues(), nil
	}
	return nil, nil, fmt.Errorf("logprobs: %s: column %q is %s, want a list", l.path, name, a.DataType())
}

// add appends one record batch's rows.
func (l *layout) add(b *Builder, rec arrow.RecordBatch) error {
	n := int(rec.NumRows())
	seq, err := l.ints(l.seq, l.names.Seq, rec.Column(l.seq))
	if err != nil {
		return err
	}
	if !l.perSeq {
		if err := b.Grow(n); err != nil {
			return err
		}
		pos, err := l.ints(l.pos, l.names.Pos, rec.Column(l.pos))
		if err != nil {
			return err
		}
		tok := func(int) int64 { return int64(NoToken) }
		if l.token >= 0 {
			if tok, err = l.ints(l.token, l.names.Token, rec.Column(l.token)); err != nil {
				return err
			}
		}
		_, lp, err := l.floats(l.names.Logprob, rec.Column(l.lp))
		if err != nil {
			return err
		}
		for i := range n {
			if err := b.Add(seq(i), pos(i), tok(i), lp(i)); err != nil {
				return err
			}
		}
		return nil
	}
	lpOff, lpVals, err := l.list(l.names.Logprobs, rec.Column(l.lps))
	if err != nil {
		return err
	}
	lp32, lpAt, err := l.floats(l.names.Logprobs, lpVals)
	if err != nil {
		return err
	}
	var tokOff func(int) (int64, int64)
	var tok32 []int32
	var tokAt func(int) int64
	if l.tokens >= 0 {
		var vals arrow.Array
		if tokOff, vals, err = l.list(l.names.Tokens, rec.Column(l.tokens)); err != nil {
			return err
		}
		if tokAt, err = l.ints(l.tokens, l.names.Tokens, vals); err != nil {
			return err
		}
		if v, ok := vals.(*array.Int32); ok {
			tok32 = v.Int32Values()
		}
	}
	start := func(int) int64 { return 0 }
	if l.start >= 0 {
		if start, err = l.ints(l.start, l.names.Start, rec.Column(l.start)); err != nil {
			return err
		}
	}
	for i := range n {
		lo, hi := lpOff(i)
		var toks []int32
		if tokOff != nil {
			tlo, thi := tokOff(i)
			if thi-tlo != hi-lo {
				return fmt.Errorf("logprobs: %s: sequence %d: %d tokens but %d logprobs", l.path, seq(i), thi-tlo, hi-lo)
			}
			if tok32 != nil {
				toks = tok32[tlo:thi:thi] // zero-copy: the decoded column's memory
			} else {
				toks = make([]int32, 0, thi-tlo)
				for j := tlo; j < thi; j++ {
					v := tokAt(int(j))
					if v < 0 || v > 1<<31-1 {
						return fmt.Errorf("logprobs: %s: sequence %d: token id %d out of range", l.path, seq(i), v)
					}
					toks = append(toks, int32(v))
				}
			}
		}
		var lps []float32
		if lp32 != nil {
			lps = lp32[lo:hi:hi]
		} else {
			lps = make([]float32, 0, hi-lo)
			for j := lo; j < hi; j++ {
				lps = append(lps, lpAt(int(j)))
			}
		}
		if err := b.AddSeq(seq(i), start(i), toks, lps); err != nil {
			return err
		}
	}
	return nil
}

// builder starts the table with the numbering and side the file's metadata gives (unless asked otherwise).
func (l *layout) builder(format string, o Options) *Builder {
	pos := o.Positions
	if l.positions != "" && !o.PositionsSet {
		pos, _ = ParseNumbering(l.positions)
	}
	b := NewBuilder(l.path, format, layoutName(l.perSeq), pos)
	b.t.Side = l.side
	b.t.Declared = l.positions != "" && !o.PositionsSet
	return b
}

func layoutName(perSeq bool) string {
	if perSeq {
		return "per-sequence"
	}
	return "per-token"
}

// arrowSchemaKey is the Parquet metadata key under which Arrow writers store their schema.
const arrowSchemaKey = "ARROW:schema"

func readParquet(ctx context.Context, path string, o Options) (*Table, error) {
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		return nil, fmt.Errorf("logprobs: %s: not a valid Parquet file (%v)", path, err)
	}
	defer pf.Close()
	// The Arrow schema a writer may store in the file's metadata ("ARROW:schema") is decoded by arrow-go
	// without bounds: a corrupt one asks for any number of fields (FuzzRead found 300 GB). The Parquet schema
	// alone gives every column bitalign reads (lists and large lists alike), so the stored one is set aside.
	for _, kv := range pf.MetaData().KeyValueMetadata() {
		if kv != nil && kv.Key == arrowSchemaKey {
			kv.Key = arrowSchemaKey + " (ignored)"
		}
	}
	// Parallel off: pqarrow's column goroutines are not Read's, so a panic on a corrupt file there could not
	// be turned into an error (the fast path, readParquetLists, runs its own goroutines and recovers).
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 1 << 16}, memory.DefaultAllocator)
	if err != nil {
		return nil, fmt.Errorf("logprobs: %s: %v", path, err)
	}
	s, err := fr.Schema()
	if err != nil {
		return nil, fmt.Errorf("logprobs: %s: %v", path, err)
	}
	// Without the stored Arrow schema pqarrow gives no schema metadata: the file's key-value metadata, where
	// Arrow writers put the same keys (bitalign.logprobs.side, ...), takes its place.
	var keys, vals []string
	for _, kv := range pf.MetaData().KeyValueMetadata() {
		if kv == nil || strings.HasPrefix(kv.Key, arrowSchemaKey) {
			continue
		}
		v := ""
		if kv.Value != nil {
			v = *kv.Value
		}
		keys, vals = append(keys, kv.Key), append(vals, v)
	}
	md := arrow.NewMetadata(keys, vals)
	s = arrow.NewSchema(s.Fields(), &md)
	l, err := resolve(path, "Parquet file", s, o.columns())
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(path); err == nil {
		l.size = st.Size()
	}
	var cols []int
	for _, c := range []int{l.seq, l.pos, l.token, l.lp, l.tokens, l.lps, l.start} {
		if c >= 0 {
			cols = append(cols, pqColumns(fr, s, c)...)
		}
	}
	b := l.builder("parquet", o)
	if l.perSeq {
		leaves := map[int][]int{}
		for _, c := range []int{l.seq, l.tokens, l.lps, l.start} {
			if c >= 0 {
				leaves[c] = pqColumns(fr, s, c)
			}
		}
		if ok, err := readParquetLists(ctx, pf, &l, leaves, b); ok {
			if err != nil {
				return nil, err
			}
			return b.Finish()
		}
	}
	if !l.perSeq {
		// room for every row at once, but never more than the file's bytes can hold (metadata may lie)
		if err := b.Grow(int(min(pf.NumRows(), maxValues(l.size)))); err != nil {
			return nil, err
		}
	}
	for rg := 0; rg < pf.NumRowGroups(); rg++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		tbl, err := fr.ReadRowGroups(ctx, cols, []int{rg})
		if err != nil {
			return nil, fmt.Errorf("logprobs: %s: row group %d: %v", path, rg, err)
		}
		err = addTable(&l, b, tbl)
		tbl.Release()
		if err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

// pqColumns are the Parquet leaf columns of Arrow field i (a list has one leaf).
func pqColumns(fr *pqarrow.FileReader, s *arrow.Schema, i int) []int {
	m := fr.Manifest
	if m == nil || i >= len(m.Fields) {
		return []int{i}
	}
	var leaves []int
	var walk func(f pqarrow.SchemaField)
	walk = func(f pqarrow.SchemaField) {
		if len(f.Children) == 0 {
			leaves = append(leaves, f.ColIndex)
			return
		}
		for _, c := range f.Children {
			walk(c)
		}
	}
	walk(m.Fields[i])
	return leaves
}

// addTable appends a table read from Parquet: its columns are in layout order, so l is remapped.
func addTable(l *layout, b *Builder, tbl arrow.Table) error {
	// ReadRowGroups returns the selected fields in file order: find each by name.
	sub, err := resolve(l.path, "Parquet file", tbl.Schema(), l.names)
	if err != nil {
		return err
	}
	tr := array.NewTableReader(tbl, 1<<20)
	defer tr.Release()
	for tr.Next() {
		if err := sub.add(b, tr.RecordBatch()); err != nil {
			return err
		}
	}
	return tr.Err()
}

func readArrowFile(ctx context.Context, path string, o Options) (*Table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("logprobs: %v", err)
	}
	defer f.Close()
	r, err := ipc.NewFileReader(f)
	if err != nil {
		return nil, fmt.Errorf("logprobs: %s: %v", path, err)
	}
	defer r.Close()
	l, err := resolve(path, "Arrow file", r.Schema(), o.columns())
	if err != nil {
		return nil, err
	}
	b := l.builder("arrow", o)
	for i := 0; i < r.NumRecords(); i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		rec, err := r.RecordBatch(i)
		if err != nil {
			return nil, fmt.Errorf("logprobs: %s: record batch %d: %v", path, i, err)
		}
		if err := l.add(b, rec); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

func readArrowStream(ctx context.Context, path string, o Options) (*Table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("logprobs: %v", err)
	}
	defer f.Close()
	r, err := ipc.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("logprobs: %s: %v", path, err)
	}
	defer r.Release()
	l, err := resolve(path, "Arrow stream", r.Schema(), o.columns())
	if err != nil {
		return nil, err
	}
	b := l.builder("arrow-stream", o)
	for r.Next() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := l.add(b, r.RecordBatch()); err != nil {
			return nil, err
		}
	}
	if err := r.Err(); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("logprobs: %s: %v", path, err)
	}
	return b.Finish()
}
