package capture

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
)

var arrowMagic = []byte("ARROW1")

// indexArrow reads the schema, metadata and per-tensor index of a mapped Arrow IPC file.
func indexArrow(data []byte, file int, cfg openConfig) (Meta, []Entry, error) {
	if len(data) < 2*8+4 || string(data[len(data)-6:]) != string(arrowMagic) {
		return Meta{}, nil, errors.New("truncated Arrow file (no trailing ARROW1 magic)")
	}
	if err := verifyFooter(data); err != nil {
		return Meta{}, nil, fmt.Errorf("not a valid Arrow IPC file: %v", err)
	}
	r, err := ipc.NewMappedFileReader(data, ipc.WithAllocator(cfg.mem), ipc.WithEnsureNativeEndian(false))
	if err != nil {
		return Meta{}, nil, fmt.Errorf("not a valid Arrow IPC file: %v", err)
	}
	defer r.Close()
	meta, err := readMeta(r.Schema())
	if err != nil {
		return Meta{}, nil, err
	}
	cols, err := findColumns(r.Schema())
	if err != nil {
		return Meta{}, nil, err
	}
	var entries []Entry
	err = errNoFastPath
	if !cfg.genericOnly {
		entries, err = indexFast(data, file, r.Schema(), cols)
	}
	if errors.Is(err, errNoFastPath) {
		entries, err = indexGeneric(r, data, file, cols)
	}
	if err != nil {
		return Meta{}, nil, err
	}
	return meta, entries, nil
}

// readMeta checks the schema-level keys and decodes bitalign.meta.
func readMeta(s *arrow.Schema) (Meta, error) {
	md := s.Metadata()
	format, ok := md.GetValue(KeyFormat)
	if !ok || format != FormatName {
		return Meta{}, fmt.Errorf("not a bitalign capture (schema metadata %s = %q, want %q)", KeyFormat, truncate(format, 40), FormatName)
	}
	vs, ok := md.GetValue(KeyVersion)
	if !ok {
		return Meta{}, fmt.Errorf("no %s in schema metadata", KeyVersion)
	}
	v, err := strconv.Atoi(vs)
	if err != nil || v != FormatVersion {
		return Meta{}, fmt.Errorf("unknown format version %q (this build reads %d)", truncate(vs, 20), FormatVersion)
	}
	var meta Meta
	if mj, ok := md.GetValue(KeyMeta); ok {
		if err := json.Unmarshal([]byte(mj), &meta); err != nil {
			return Meta{}, fmt.Errorf("bad %s JSON: %v", KeyMeta, err)
		}
	}
	meta.FormatVersion = v
	if err := checkMeta(meta); err != nil {
		return Meta{}, err
	}
	return meta, nil
}

// columnKind is the physical layout family a column may have; readers accept the compatible Arrow types
// other writers choose (int32 or int64 integers, string or large_string, list or large_list).
type columnKind int

const (
	kindBinary  columnKind = iota // binary or large_binary
	kindInt                       // any signed integer, or uint8/16/32
	kindString                    // utf8 or large_utf8
	kindIntList                   // list or large_list of int64 or int32
)

var columnKinds = []struct {
	name     string
	kind     columnKind
	required bool
}{
	{colData, kindBinary, true},
	{colStep, kindInt, true}, {colSeq, kindInt, true}, {colPos, kindInt, true}, {colNTok, kindInt, true},
	{colOp, kindString, true}, {colIndex, kindInt, true}, {colRole, kindString, true}, {colDType, kindString, true},
	{colShape, kindIntList, true}, {colRank, kindInt, true},
	{colShardDim, kindInt, false}, {colShardStart, kindInt, false}, {colFullShape, kindIntList, false},
}

// Positions of the columns in columnKinds, columns and the fast path's plan.
const (
	ciData = iota
	ciStep
	ciSeq
	ciPos
	ciNTok
	ciOp
	ciIndex
	ciRole
	ciDType
	ciShape
	ciRank
	ciShardDim
	ciShardStart
	ciFullShape
)

// columns maps each known column to its field index (-1: absent, allowed for the shard columns).
type columns [14]int

func findColumns(s *arrow.Schema) (columns, error) {
	var c columns
	for i, ck := range columnKinds {
		idx := s.FieldIndices(ck.name)
		switch {
		case len(idx) > 1:
			return c, fmt.Errorf("column %q appears %d times", ck.name, len(idx))
		case len(idx) == 0 && ck.required:
			return c, fmt.Errorf("no %q column", ck.name)
		case len(idx) == 0:
			c[i] = -1
			continue
		}
		c[i] = idx[0]
		if !kindAccepts(ck.kind, s.Field(idx[0]).Type) {
			return c, fmt.Errorf("column %q has type %s", ck.name, s.Field(idx[0]).Type)
		}
	}
	return c, nil
}

func kindAccepts(k columnKind, t arrow.DataType) bool {
	switch k {
	case kindBinary:
		return t.ID() == arrow.BINARY || t.ID() == arrow.LARGE_BINARY
	case kindString:
		return t.ID() == arrow.STRING || t.ID() == arrow.LARGE_STRING
	case kindInt:
		switch t.ID() {
		case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64, arrow.UINT8, arrow.UINT16, arrow.UINT32:
			return true
		}
	case kindIntList:
		var elem arrow.DataType
		switch lt := t.(type) {
		case *arrow.ListType:
			elem = lt.Elem()
		case *arrow.LargeListType:
			elem = lt.Elem()
		default:
			return false
		}
		return elem.ID() == arrow.INT64 || elem.ID() == arrow.INT32
	}
	return false
}

// indexGeneric decodes every record batch with arrow-go (any row count, column order and compatible types).
// Tensor bytes must lie in the mapping (uncompressed bodies); their offsets are recovered from the slices.
func indexGeneric(r *ipc.FileReader, data []byte, file int, cols columns) ([]Entry, error) {
	var entries []Entry
	in := internTable{}
	blocks := footerBlocks(data)
	if len(blocks) != r.NumRecords() {
		return nil, fmt.Errorf("footer lists %d record batches, arrow-go sees %d", len(blocks), r.NumRecords())
	}
	for b := 0; b < r.NumRecords(); b++ {
		if err := verifyMessage(data, blocks[b][0], blocks[b][1]); err != nil {
			return nil, fmt.Errorf("record batch %d: %v", b, err)
		}
		rec, err := r.RecordBatchAt(b)
		if err != nil {
			return nil, fmt.Errorf("record batch %d: %v", b, err)
		}
		es, err := entriesOfBatch(rec, data, file, cols, in)
		rec.Release()
		if err != nil {
			return nil, fmt.Errorf("record batch %d: %v", b, err)
		}
		entries = append(entries, es...)
	}
	return entries, nil
}

func entriesOfBatch(rec arrow.RecordBatch, data []byte, file int, cols columns, in internTable) ([]Entry, error) {
	for _, ci := range cols {
		if ci >= 0 && rec.Column(ci).NullN() > 0 {
			return nil, fmt.Errorf("column %q has nulls", rec.Schema().Field(ci).Name)
		}
	}
	n := int(rec.NumRows())
	es := make([]Entry, 0, n)
	col := func(k int) arrow.Array {
		if cols[k] < 0 {
			return nil
		}
		return rec.Column(cols[k])
	}
	for row := 0; row < n; row++ {
		var e Entry
		var err error
		ints := [...]*int64{&e.Step, &e.Seq, &e.Pos, &e.NTok}
		for k, p := range ints {
			if *p, err = intAt(col(ciStep+k), row); err != nil {
				return nil, err
			}
		}
		idx, err := intAt(col(ciIndex), row)
		if err != nil {
			return nil, err
		}
		rank, err := intAt(col(ciRank), row)
		if err != nil {
			return nil, err
		}
		e.Index, e.Rank = int32(idx), int32(rank)
		if int64(e.Index) != idx || int64(e.Rank) != rank {
			return nil, fmt.Errorf("row %d: index or rank out of int32 range", row)
		}
		e.Op = in.intern(stringAt(col(ciOp), row))
		e.Role = in.intern(stringAt(col(ciRole), row))
		dt := stringAt(col(ciDType), row)
		if e.DType, err = ParseDType(dt); err != nil {
			return nil, fmt.Errorf("tensor %s: %v", truncate(e.Op, 80), err)
		}
		if e.Shape, err = intListAt(col(ciShape), row); err != nil {
			return nil, err
		}
		e.Shard = NoShard
		if c := col(ciShardDim); c != nil {
			dim, err := intAt(c, row)
			if err != nil {
				return nil, err
			}
			if dim < -1 || dim > MaxDims {
				return nil, fmt.Errorf("tensor %s: bad shard dim %d", truncate(e.Op, 80), dim)
			}
			e.Shard.Dim = int(dim)
		}
		if c := col(ciShardStart); c != nil {
			if e.Shard.Start, err = intAt(c, row); err != nil {
				return nil, err
			}
		}
		if c := col(ciFullShape); c != nil {
			if e.Shard.FullShape, err = intListAt(c, row); err != nil {
				return nil, err
			}
			if e.Shard.Dim < 0 && len(e.Shard.FullShape) == 0 {
				e.Shard.FullShape = nil
			}
		}
		v := binaryAt(col(ciData), row)
		e.NBytes = int64(len(v))
		if len(v) > 0 {
			off := uintptr(unsafe.Pointer(unsafe.SliceData(v))) - uintptr(unsafe.Pointer(unsafe.SliceData(data)))
			if off > uintptr(len(data)) || uintptr(len(v)) > uintptr(len(data))-off {
				return nil, errors.New("tensor data not in the file (compressed record batches are not supported)")
			}
			e.Offset = int64(off)
		}
		e.File = file
		if err := e.check(); err != nil {
			return nil, fmt.Errorf("tensor %d: %v", row, err)
		}
		es = append(es, e)
	}
	return es, nil
}

func intAt(a arrow.Array, i int) (int64, error) {
	switch a := a.(type) {
	case *array.Int64:
		return a.Value(i), nil
	case *array.Int32:
		return int64(a.Value(i)), nil
	case *array.Int16:
		return int64(a.Value(i)), nil
	case *array.Int8:
		return int64(a.Value(i)), nil
	case *array.Uint32:
		return int64(a.Value(i)), nil
	case *array.Uint16:
		return int64(a.Value(i)), nil
	case *array.Uint8:
		return int64(a.Value(i)), nil
	}
	return 0, fmt.Errorf("unexpected integer column type %s", a.DataType())
}

func stringAt(a arrow.Array, i int) string {
	switch a := a.(type) {
	case *array.String:
		return a.Value(i)
	case *array.LargeString:
		return a.Value(i)
	}
	return ""
}

func binaryAt(a arrow.Array, i int) []byte {
	switch a := a.(type) {
	case *array.Binary:
		return a.Value(i)
	case *array.LargeBinary:
		return a.Value(i)
	}
	return nil
}

func intListAt(a arrow.Array, i int) ([]int64, error) {
	var vals arrow.Array
	var beg, end int64
	switch a := a.(type) {
	case *array.List:
		b, e := a.ValueOffsets(i)
		beg, end, vals = b, e, a.ListValues()
	case *array.LargeList:
		b, e := a.ValueOffsets(i)
		beg, end, vals = b, e, a.ListValues()
	default:
		return nil, fmt.Errorf("unexpected list column type %s", a.DataType())
	}
	if end-beg > MaxDims {
		return nil, fmt.Errorf("shape with %d dimensions (at most %d)", end-beg, MaxDims)
	}
	if vals.NullN() > 0 {
		return nil, errors.New("shape with null dimensions")
	}
	out := make([]int64, 0, end-beg)
	for j := beg; j < end; j++ {
		v, err := intAt(vals, int(j))
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// internTable shares the strings that repeat over a capture (op, role) so an index of 50k tensors holds each
// op name once.
type internTable map[string]string

func (t internTable) intern(s string) string {
	if v, ok := t[s]; ok {
		return v
	}
	s = string([]byte(s)) // copy: s may point into the mapping
	t[s] = s
	return s
}

// internBytes is intern for bytes in the mapping: the lookup does not allocate.
func (t internTable) internBytes(b []byte) string {
	if v, ok := t[string(b)]; ok {
		return v
	}
	s := string(b)
	t[s] = s
	return s
}
