package session_test

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"bitalign/session"
)

// writeLogprobPair writes a trainer and a sampler logprob table (one row per sequence, as verl's batches
// are) of seqs sequences of n tokens: the sampler's log-probabilities differ from the trainer's by a few
// float32 ULPs at a fifth of the tokens, and by 1e-3 from the middle of every 97th sequence.
func writeLogprobPair(tb testing.TB, dir string, seqs, n int) (string, string) {
	tb.Helper()
	rng := rand.New(rand.NewPCG(17, 1))
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "seq", Type: arrow.PrimitiveTypes.Int64},
		{Name: "tokens", Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Int32)},
		{Name: "logprobs", Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Float32)},
	}, nil)
	paths := [2]string{filepath.Join(dir, "trainer.parquet"), filepath.Join(dir, "sampler.parquet")}
	var ws [2]*pqarrow.FileWriter
	for i, p := range paths {
		f, err := os.Create(p)
		if err != nil {
			tb.Fatal(err)
		}
		props := parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Snappy), parquet.WithDictionaryDefault(false))
		w, err := pqarrow.NewFileWriter(schema, f, props, pqarrow.DefaultWriterProps())
		if err != nil {
			tb.Fatal(err)
		}
		ws[i] = w
	}
	const group = 2000
	for lo := 0; lo < seqs; lo += group {
		hi := min(lo+group, seqs)
		var bs [2]*array.RecordBuilder
		for i := range bs {
			bs[i] = array.NewRecordBuilder(memory.DefaultAllocator, schema)
		}
		for s := lo; s < hi; s++ {
			toks := make([]int32, n)
			lpA := make([]float32, n)
			lpB := make([]float32, n)
			for p := range n {
				toks[p] = int32(rng.IntN(150000))
				lpA[p] = float32(-rng.ExpFloat64() * 2)
				lpB[p] = lpA[p]
				if rng.IntN(5) == 0 {
					lpB[p] = math.Float32frombits(math.Float32bits(lpA[p]) + uint32(1+rng.IntN(4)))
				}
				if s%97 == 0 && p >= n/2 {
					lpB[p] = lpA[p] + 1e-3
				}
			}
			for i, lp := range [][]float32{lpA, lpB} {
				b := bs[i]
				b.Field(0).(*array.Int64Builder).Append(int64(s))
				lt := b.Field(1).(*array.ListBuilder)
				lt.Append(true)
				lt.ValueBuilder().(*array.Int32Builder).AppendValues(toks, nil)
				ll := b.Field(2).(*array.ListBuilder)
				ll.Append(true)
				ll.ValueBuilder().(*array.Float32Builder).AppendValues(lp, nil)
			}
		}
		for i := range bs {
			rec := bs[i].NewRecordBatch()
			if err := ws[i].Write(rec); err != nil {
				tb.Fatal(err)
			}
			rec.Release()
			bs[i].Release()
		}
	}
	for _, w := range ws {
		if err := w.Close(); err != nil {
			tb.Fatal(err)
		}
	}
	return paths[0], paths[1]
}

var (
	benchPairOnce sync.Once
	benchPairA    string
	benchPairB    string
)

// BenchmarkLogprobPair100k reads a 100k-sequence × 1k-token Parquet pair and summarises it (session.Load, as
// `bitalign diff trainer.parquet sampler.parquet` does). The pair is generated once into a temporary directory
// (BITALIGN_BENCH_DIR keeps it between runs). Goal (issue #17): ≤ 5 s on 2 cores.
func BenchmarkLogprobPair100k(b *testing.B) {
	seqs, n := 100_000, 1000
	if s := os.Getenv("BITALIGN_BENCH_SEQS"); s != "" {
		seqs, _ = strconv.Atoi(s)
	}
	benchPairOnce.Do(func() {
		dir := os.Getenv("BITALIGN_BENCH_DIR")
		if dir == "" {
			var err error
			if dir, err = os.MkdirTemp("", "bitalign-bench-"); err != nil {
				b.Fatal(err)
			}
		}
		benchPairA, benchPairB = filepath.Join(dir, "trainer.parquet"), filepath.Join(dir, "sampler.parquet")
		if _, err := os.Stat(benchPairB); err != nil {
			writeLogprobPair(b, dir, seqs, n)
		}
	})
	b.ResetTimer()
	for b.Loop() {
		l, err := session.Load(context.Background(), session.Inputs{A: benchPairA, B: benchPairB, Device: "cpu"}, nil)
		if err != nil {
			b.Fatal(err)
		}
		rl := l.Report.RL
		if rl == nil || rl.Overall.Tokens != int64(seqs*n) || rl.Seqs[0].MaxAbs < 1e-4 {
			b.Fatalf("summary: %+v", rl.Overall)
		}
		l.Close()
	}
	b.ReportMetric(float64(seqs*n)/b.Elapsed().Seconds()*float64(b.N), "tokens/s")
}
