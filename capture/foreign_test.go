package capture

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// writeForeign writes ts as a capture with arrow-go's generic builders (not our Writer), laid out per
// docs/capture-format.md but with the given fields (any order, compatible types), rowsPerBatch rows per batch.
func writeForeign(t *testing.T, path string, meta Meta, fields []arrow.Field, rowsPerBatch int, ts []Tensor, opts ...ipc.Option) {
	t.Helper()
	mj, err := json.Marshal(meta)
	if err != nil {
		t.Fatal(err)
	}
	md := arrow.NewMetadata([]string{KeyFormat, KeyVersion, KeyMeta}, []string{FormatName, "1", string(mj)})
	writeArrow(t, path, md, fields, rowsPerBatch, ts, opts...)
}

// writeArrow writes ts with arrow-go's builders under the given schema metadata.
func writeArrow(t *testing.T, path string, md arrow.Metadata, fields []arrow.Field, rowsPerBatch int, ts []Tensor, opts ...ipc.Option) {
	t.Helper()
	schema := arrow.NewSchema(fields, &md)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := ipc.NewFileWriter(f, append([]ipc.Option{ipc.WithSchema(schema)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	mem := memory.NewGoAllocator()
	for start := 0; start < len(ts); start += rowsPerBatch {
		b := array.NewRecordBuilder(mem, schema)
		for _, tn := range ts[start:min(start+rowsPerBatch, len(ts))] {
			for i, fl := range schema.Fields() {
				appendValue(t, b.Field(i), fl.Name, tn)
			}
		}
		rec := b.NewRecordBatch()
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
		b.Release()
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func appendValue(t *testing.T, b array.Builder, name string, tn Tensor) {
	t.Helper()
	ints := map[string]int64{colStep: tn.Step, colSeq: tn.Seq, colPos: tn.Pos, colNTok: tn.NTok,
		colIndex: int64(tn.Index), colRank: int64(tn.Rank), colShardDim: int64(tn.Shard.Dim), colShardStart: tn.Shard.Start}
	strs := map[string]string{colOp: tn.Op, colRole: tn.Role, colDType: tn.DType.String()}
	lists := map[string][]int64{colShape: tn.Shape, colFullShape: tn.Shard.FullShape}
	switch b := b.(type) {
	case *array.BinaryBuilder: // binary and large_binary
		b.Append(tn.Data)
	case *array.StringBuilder:
		b.Append(strs[name])
	case *array.LargeStringBuilder:
		b.Append(strs[name])
	case *array.Int64Builder:
		b.Append(ints[name])
	case *array.Int32Builder:
		b.Append(int32(ints[name]))
	case *array.Int16Builder:
		b.Append(int16(ints[name]))
	case *array.Float64Builder: // an extra column readers ignore
		b.Append(1.5)
	case *array.ListBuilder:
		b.Append(true)
		appendInts(b.ValueBuilder(), lists[name])
	case *array.LargeListBuilder:
		b.Append(true)
		appendInts(b.ValueBuilder(), lists[name])
	default:
		t.Fatalf("no appender for %T (%s)", b, name)
	}
}

func appendInts(b array.Builder, vs []int64) {
	for _, v := range vs {
		switch b := b.(type) {
		case *array.Int64Builder:
			b.Append(v)
		case *array.Int32Builder:
			b.Append(int32(v))
		}
	}
}

func openEntries(t *testing.T, path string, opts ...OpenOption) []Tensor {
	t.Helper()
	c := openCapture(t, path, opts...)
	var out []Tensor
	for i := 0; i < c.Len(); i++ {
		tn, err := c.Tensor(i)
		if err != nil {
			t.Fatal(err)
		}
		tn.Data = append([]byte(nil), tn.Data...)
		out = append(out, tn)
	}
	return out
}

func TestForeignWriterReads(t *testing.T) {
	ts := allDTypeTensors(3, 4)
	meta := testMeta("trainer", 0)
	meta.FormatVersion = 1
	i64, i32 := arrow.PrimitiveTypes.Int64, arrow.PrimitiveTypes.Int32
	cases := []struct {
		name   string
		fields []arrow.Field
		rows   int
	}{
		{"spec layout", schemaFields(), 1},
		{"spec layout, 5 rows per batch", schemaFields(), 5},
		{"all rows in one batch", schemaFields(), len(ts)},
		{"reordered, binary, large types, int32 shapes, extra column", []arrow.Field{
			{Name: "op", Type: arrow.BinaryTypes.LargeString, Nullable: true},
			{Name: "note", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
			{Name: "shape", Type: arrow.LargeListOf(i32), Nullable: true},
			{Name: "dtype", Type: arrow.BinaryTypes.String},
			{Name: "step", Type: i64}, {Name: "seq", Type: i32}, {Name: "pos", Type: i64}, {Name: "ntok", Type: i64},
			{Name: "index", Type: arrow.PrimitiveTypes.Int16}, {Name: "role", Type: arrow.BinaryTypes.String},
			{Name: "rank", Type: i64}, {Name: "shard_dim", Type: i64}, {Name: "shard_start", Type: i64},
			{Name: "full_shape", Type: arrow.ListOf(i64)},
			{Name: "data", Type: arrow.BinaryTypes.Binary},
		}, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "foreign.arrow")
			writeForeign(t, path, meta, tc.fields, tc.rows, ts)
			for _, opts := range [][]OpenOption{nil, {withGenericIndex()}} {
				got := openEntries(t, path, opts...)
				if len(got) != len(ts) {
					t.Fatalf("%d tensors, want %d", len(got), len(ts))
				}
				for i := range ts {
					sameTensor(t, i, got[i], ts[i])
				}
			}
			c := openCapture(t, path)
			if !reflect.DeepEqual(c.Meta(), meta) {
				t.Fatalf("meta %+v", c.Meta())
			}
		})
	}
}

// The fast index and arrow-go's decoder must agree entry for entry (offsets included) on our own files.
func TestFastIndexMatchesGeneric(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.arrow")
	if err := WriteAll(path, testMeta("trainer", 0), allDTypeTensors(4, 10)); err != nil {
		t.Fatal(err)
	}
	a, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(path, withGenericIndex())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if len(a.entries) != len(b.entries) {
		t.Fatalf("fast index has %d entries, generic %d", len(a.entries), len(b.entries))
	}
	for i := range a.entries {
		if !reflect.DeepEqual(a.entries[i], b.entries[i]) {
			t.Fatalf("entry %d: fast %+v, generic %+v", i, a.entries[i], b.entries[i])
		}
	}
}

func TestCompressedRejected(t *testing.T) {
	path := filepath.Join(t.TempDir(), "z.arrow")
	writeForeign(t, path, testMeta("trainer", 0), schemaFields(), 2, allDTypeTensors(5, 2), ipc.WithZstd())
	for _, opts := range [][]OpenOption{nil, {withGenericIndex()}} {
		_, err := Open(path, opts...)
		wantErr(t, err, path, "compressed")
	}
}
