package logprobs

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// perToken is a per-token record batch out of order: seq int32, pos int64, token int16, logprob float64.
func perToken(t *testing.T) arrow.RecordBatch {
	t.Helper()
	md := arrow.NewMetadata([]string{KeySide, KeyPositions}, []string{"sampler", "generated"})
	s := arrow.NewSchema([]arrow.Field{{Name: "seq", Type: arrow.PrimitiveTypes.Int32}, {Name: "pos", Type: arrow.PrimitiveTypes.Int64},
		{Name: "token", Type: arrow.PrimitiveTypes.Int16}, {Name: "logprob", Type: arrow.PrimitiveTypes.Float64}}, &md)
	b := array.NewRecordBuilder(memory.DefaultAllocator, s)
	defer b.Release()
	b.Field(0).(*array.Int32Builder).AppendValues([]int32{2, 1, 1, 2, 1}, nil)
	b.Field(1).(*array.Int64Builder).AppendValues([]int64{0, 2, 0, 1, 1}, nil)
	b.Field(2).(*array.Int16Builder).AppendValues([]int16{7, 6, 4, 8, 5}, nil)
	b.Field(3).(*array.Float64Builder).AppendValues([]float64{-0.7, -0.3, -0.1, -0.8, -0.2}, nil)
	return b.NewRecordBatch()
}

func checkPerToken(t *testing.T, tab *Table) {
	t.Helper()
	if len(tab.Seqs) != 2 || tab.Tokens() != 5 || tab.Side != "sampler" || tab.Positions != Generated || !tab.Declared {
		t.Fatalf("table: %d seqs, %d tokens, side %q, positions %v", len(tab.Seqs), tab.Tokens(), tab.Side, tab.Positions)
	}
	q := tab.Seqs[0]
	if q.ID != 1 || q.Len() != 3 || q.TokenAt(0) != 4 || q.TokenAt(2) != 6 || q.Logprob[1] != float32(-0.2) || q.PosAt(2) != 2 {
		t.Errorf("seq 1: %+v", q)
	}
}

// TestReadArrowFileAndStream: one row per token, rows out of order, narrow and wide integer columns, float64
// log-probabilities rounded to float32; the metadata's side and numbering.
func TestReadArrowFileAndStream(t *testing.T) {
	dir := t.TempDir()
	rec := perToken(t)
	defer rec.Release()
	for _, stream := range []bool{false, true} {
		path := filepath.Join(dir, map[bool]string{false: "t.arrow", true: "t.stream"}[stream])
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if stream {
			w := ipc.NewWriter(f, ipc.WithSchema(rec.Schema()))
			w.Write(rec)
			w.Close()
		} else {
			w, err := ipc.NewFileWriter(f, ipc.WithSchema(rec.Schema()))
			if err != nil {
				t.Fatal(err)
			}
			w.Write(rec)
			w.Close()
		}
		f.Close()
		k, err := Sniff(path)
		if err != nil || k != map[bool]Kind{false: KindArrowFile, true: KindArrowStream}[stream] {
			t.Fatalf("Sniff %s: %v %v", path, k, err)
		}
		tab, err := Read(context.Background(), path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		checkPerToken(t, tab)
	}
}

// TestReadParquetLargeList: a per-sequence Parquet file whose lists are large lists of int64 ids and float64
// values: the pqarrow path (not the fast one) reads it alike.
func TestReadParquetLargeList(t *testing.T) {
	s := arrow.NewSchema([]arrow.Field{{Name: "seq", Type: arrow.PrimitiveTypes.Int64}, {Name: "start", Type: arrow.PrimitiveTypes.Int32},
		{Name: "tokens", Type: arrow.LargeListOf(arrow.PrimitiveTypes.Int64)}, {Name: "logprobs", Type: arrow.LargeListOf(arrow.PrimitiveTypes.Float64)}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, s)
	defer b.Release()
	for _, q := range []struct {
		seq   int64
		start int32
		toks  []int64
		lps   []float64
	}{{9, 4, []int64{1, 2}, []float64{-1, -2}}, {3, 0, []int64{5}, []float64{math.Inf(-1)}}} {
		b.Field(0).(*array.Int64Builder).Append(q.seq)
		b.Field(1).(*array.Int32Builder).Append(q.start)
		b.Field(2).(*array.LargeListBuilder).Append(true)
		b.Field(2).(*array.LargeListBuilder).ValueBuilder().(*array.Int64Builder).AppendValues(q.toks, nil)
		b.Field(3).(*array.LargeListBuilder).Append(true)
		b.Field(3).(*array.LargeListBuilder).ValueBuilder().(*array.Float64Builder).AppendValues(q.lps, nil)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	path := filepath.Join(t.TempDir(), "l.parquet")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pqarrow.NewFileWriter(s, f, nil, pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	w.Close()
	tab, err := Read(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(tab.Seqs) != 2 || tab.Seqs[0].ID != 3 || !math.IsInf(float64(tab.Seqs[0].Logprob[0]), -1) ||
		tab.Seqs[1].Start != 4 || tab.Seqs[1].TokenAt(1) != 2 {
		t.Errorf("table: %+v", tab.Seqs)
	}
}

func table(path string, n Numbering, seqs ...Seq) *Table {
	t := &Table{Path: path, Positions: n, Seqs: seqs}
	for _, q := range seqs {
		t.NTokens += q.Len()
	}
	return t
}

// TestCompareByHand: small cases whose figures are worked out by hand (Δ = A − B).
func TestCompareByHand(t *testing.T) {
	one := float32(math.Log(0.5))
	a := table("a", Absolute, Seq{ID: 1, Start: 3, Logprob: []float32{-1, one, -2, -3}, Prompt: 3, Token: []int32{5, 6, 7, 8}})
	b := table("b", Generated, Seq{ID: 1, Start: 0, Logprob: []float32{-1, one - float32(math.Ln2), float32(math.NaN())}, Prompt: -1, Token: []int32{5, 6, 7}})
	s, err := Compare(context.Background(), a, b, DefaultThresholds)
	if err != nil {
		t.Fatal(err)
	}
	q := &s.Seqs[0]
	d := float64(one) - float64(one-float32(math.Ln2)) // ≈ ln 2: r ≈ 2, just inside [0.5, 2] or not by rounding
	if q.Tokens != 3 || q.Equal != 1 || q.NonFinite != 1 || q.Finite != 2 || q.OnlyA != 1 || q.FirstDiff != 1 {
		t.Errorf("counts: %+v", q.Stats)
	}
	if q.MaxAbs != d || q.MeanAbs != d/2 || q.K1 != -d/2 || q.K3 != (math.Exp(d)-1-d)/2 || q.ISMax != math.Exp(d) || q.ISMin != 1 {
		t.Errorf("figures: max %v mean %v k1 %v k3 %v IS %v..%v (Δ %v)", q.MaxAbs, q.MeanAbs, q.K1, q.K3, q.ISMin, q.ISMax, d)
	}
	if s.Positions != Generated || q.PosLo != 0 {
		t.Errorf("numbering %v, positions from %d", s.Positions, q.PosLo)
	}
	// a sequence without a prompt length cannot be placed on the generated numbering
	a.Seqs[0].Prompt = -1
	if _, err := Compare(context.Background(), a, b, DefaultThresholds); err == nil || !strings.Contains(err.Error(), "--positions") {
		t.Errorf("unknown prompt: %v", err)
	}
}
