package session

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"bitalign/capture"
)

const benchBytes = 64 << 20 // per side

var benchData = map[float64][2][]byte{}
var benchMu sync.Mutex

// benchPair returns 64 MiB of bf16 per side; rate of the elements differ (single flipped bits spread
// uniformly, with the planted specials of plant).
func benchPair(rate float64) (a, b []byte) {
	benchMu.Lock()
	defer benchMu.Unlock()
	if d, ok := benchData[rate]; ok {
		return d[0], d[1]
	}
	a, b = plant(rand.New(rand.NewPCG(7, uint64(rate*1e6))), formats[capture.BF16], benchBytes/2, rate)
	benchData[rate] = [2][]byte{a, b}
	return a, b
}

// BenchmarkCompareVsBytesEqual times bytes.Equal and the chunk comparator (every core, as Diff runs it) over
// the same two 64 MiB bf16 buffers in the same iteration and reports both throughputs (bytes of one side per
// second) and their ratio.
func BenchmarkCompareVsBytesEqual(b *testing.B) {
	for _, bc := range []struct {
		name    string
		rate    float64
		workers int // 0: GOMAXPROCS
	}{{"identical", 0, 0}, {"mismatch1pct", 0.01, 0}, {"identical-1worker", 0, 1}, {"mismatch1pct-1worker", 0.01, 1}} {
		b.Run(bc.name, func(b *testing.B) {
			x, y := benchPair(bc.rate)
			x2 := bytes.Clone(x) // bytes.Equal's baseline: a full pass over equal data of the same size
			f := formats[capture.BF16]
			// rows of 4096 features, as a [T, H] activation
			pieces := []piece{{rows: int64(len(x) / 2 / 4096), rowLen: 4096, a: x, b: y}}
			nw := bc.workers
			if nw == 0 {
				nw = runtime.GOMAXPROCS(0)
			}
			accs := make([]*acc, nw)
			for i := range accs {
				accs[i] = &acc{}
			}
			var tEq, tDiff time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if !bytes.Equal(x, x2) {
					b.Fatal("bytes.Equal disagrees with the data")
				}
				t1 := time.Now()
				o := newOpWork(f, pieces, 64, 256)
				w, err := o.run(context.Background(), accs, nil)
				if err != nil {
					b.Fatal(err)
				}
				tDiff += time.Since(t1)
				tEq += t1.Sub(t0)
				if (w.mismatched == 0) != (bc.rate == 0) {
					b.Fatal("comparator disagrees with the data")
				}
			}
			n := float64(len(x)) * float64(b.N)
			b.ReportMetric(n/tEq.Seconds()/1e9, "equal-GB/s")
			b.ReportMetric(n/tDiff.Seconds()/1e9, "diff-GB/s")
			b.ReportMetric(tEq.Seconds()/tDiff.Seconds(), "x-bytes.Equal")
		})
	}
}

// BenchmarkDiffCapture runs the whole Diff (index, alignment, comparison, report) over two 64 MiB captures
// of 256 [64, 2048] bf16 tensors and compares with bytes.Equal over the same tensors' mapped bytes.
func BenchmarkDiffCapture(b *testing.B) {
	for _, bc := range []struct {
		name string
		rate float64
	}{{"identical", 0}, {"mismatch1pct", 0.01}} {
		b.Run(bc.name, func(b *testing.B) {
			x, y := benchPair(bc.rate)
			dir := b.TempDir()
			ca := benchCapture(b, dir+"/a.arrow", "trainer", x)
			cb := benchCapture(b, dir+"/b.arrow", "sampler", y)
			ca2 := benchCapture(b, dir+"/a2.arrow", "trainer", x) // bytes.Equal's baseline: A against a copy
			var tEq, tDiff time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				for j := 0; j < ca.Len(); j++ {
					da, _ := ca.Data(j)
					db, _ := ca2.Data(j)
					if !bytes.Equal(da, db) {
						b.Fatal("copies differ")
					}
				}
				t1 := time.Now()
				rep, err := Diff(context.Background(), ca, cb)
				if err != nil {
					b.Fatal(err)
				}
				tDiff += time.Since(t1)
				tEq += t1.Sub(t0)
				if rep.Identical != (bc.rate == 0) {
					b.Fatal("diff disagrees with the data")
				}
			}
			n := float64(len(x)) * float64(b.N)
			b.ReportMetric(n/tEq.Seconds()/1e9, "equal-GB/s")
			b.ReportMetric(n/tDiff.Seconds()/1e9, "diff-GB/s")
			b.ReportMetric(tEq.Seconds()/tDiff.Seconds(), "x-bytes.Equal")
		})
	}
}

func benchCapture(b *testing.B, path, side string, data []byte) *capture.Capture {
	const rows, cols = 64, 2048
	per := rows * cols * 2
	var ts []capture.Tensor
	for i := 0; i*per < len(data); i++ {
		ts = append(ts, capture.Tensor{Step: 0, Seq: int64(i % 16), Pos: int64(i/16) * rows, NTok: rows,
			Op: "layers.0.mlp.act", Index: 5, Role: "out", DType: capture.BF16, Shape: []int64{rows, cols},
			Shard: capture.NoShard, Data: data[i*per : (i+1)*per]})
	}
	if err := capture.WriteAll(path, capture.Meta{FormatVersion: 1, Side: side, TP: 1, PP: 1, DP: 1}, ts); err != nil {
		b.Fatal(err)
	}
	return openTestCapture(b, path)
}

// BenchmarkBlock compares the parts of the identical-block path on one cached block: bytes.Equal of the two
// sides and the NaN/Inf scan of one side.
func BenchmarkBlock(b *testing.B) {
	x, _ := benchPair(0)
	x = x[:blockBytes]
	y := bytes.Clone(x)
	f := formats[capture.BF16]
	b.Run("bytes.Equal", func(b *testing.B) {
		b.SetBytes(int64(blockBytes))
		for i := 0; i < b.N; i++ {
			bytes.Equal(x, y)
		}
	})
	b.Run("countSpecials", func(b *testing.B) {
		b.SetBytes(int64(blockBytes))
		for i := 0; i < b.N; i++ {
			f.countSpecials(x)
		}
	})
}

// BenchmarkBlockSize runs the comparator over the 64 MiB pairs with other job sizes.
func BenchmarkBlockSize(b *testing.B) {
	defer func(v int) { blockBytes = v }(blockBytes)
	for _, rate := range []float64{0, 0.01} {
		x, y := benchPair(rate)
		pieces := []piece{{rows: int64(len(x) / 2 / 4096), rowLen: 4096, a: x, b: y}}
		accs := make([]*acc, runtime.GOMAXPROCS(0))
		for i := range accs {
			accs[i] = &acc{}
		}
		for _, kb := range []int{8, 16, 32, 64, 256} {
			b.Run(fmt.Sprintf("rate%g/%dK", rate, kb), func(b *testing.B) {
				blockBytes = kb << 10
				b.SetBytes(int64(len(x)))
				for i := 0; i < b.N; i++ {
					o := newOpWork(formats[capture.BF16], pieces, 64, 256)
					if _, err := o.run(context.Background(), accs, nil); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkCompareDivergent: the comparator (acc, one worker) over a pair where about half the elements
// differ by one ULP at random, as in a replay against another stack's forward (the size pair's "all"
// variant), in rows of 1536 with the map on; ns/element is per element pair, the rowScale pass excluded.
func BenchmarkCompareDivergent(b *testing.B) {
	for _, dt := range []capture.DType{capture.BF16, capture.F32} {
		f := formats[dt]
		const n, rowLen = 1 << 20, 1536
		r := rand.New(rand.NewPCG(3, 4))
		x := make([]byte, n*f.size)
		for i := 0; i < n; i++ {
			v := math.Float32bits(float32(r.NormFloat64()))
			if dt == capture.BF16 {
				putElem(f, x, i, uint64(v>>16))
			} else {
				putElem(f, x, i, uint64(v))
			}
		}
		y := bytes.Clone(x)
		for i := 0; i < n; i++ {
			if r.IntN(2) == 0 {
				putElem(f, y, i, f.load(x, i)^1)
			}
		}
		rows := int64(n / rowLen)
		p := piece{rows: rows, rowLen: rowLen, a: x[:rows*rowLen*int64(f.size)], b: y[:rows*rowLen*int64(f.size)]}
		b.Run(dt.String(), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				p.rowMism = nil
				o := newOpWork(f, []piece{p}, 64, 64)
				if _, err := o.run(context.Background(), []*acc{{}}, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(rows*rowLen), "ns/element")
		})
		b.Run(dt.String()+"/rowScale", func(b *testing.B) {
			o := newOpWork(f, []piece{p}, 64, 64)
			var sink float64
			for i := 0; i < b.N; i++ {
				for r := int64(0); r < rows; r++ {
					rms, m := o.rowScale(&o.pieces[0], r)
					sink += rms + m
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(rows*rowLen), "ns/element")
			_ = sink
		})
	}
}
