package capture

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// manyTensors writes n tensors of nbytes each (bf16 [nbytes/2]) spread over layers, positions and ops.
func manyTensors(tb testing.TB, path string, n, nbytes int) {
	tb.Helper()
	w := createCapture(tb, path, Meta{Side: "bench", Created: time.Unix(0, 0).UTC()}, WithOverwrite())
	data := make([]byte, nbytes)
	ops := []string{"attn_norm", "attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.o_proj", "mlp.down_proj"}
	for i := 0; i < n; i++ {
		data[0] = byte(i)
		op := ops[i%len(ops)]
		t := Tensor{Step: 0, Seq: int64(i / 4096), Pos: int64((i / len(ops)) % 4096), NTok: 1,
			Op: fmt.Sprintf("layers.%d.%s", (i/len(ops))%28, op), Index: int32(i % 200), Role: "out",
			DType: BF16, Shape: []int64{1, int64(nbytes / 2)}, Shard: NoShard, Data: data}
		if err := w.Write(t); err != nil {
			w.Abort()
			tb.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
}

func benchCapture(b *testing.B, n, nbytes int) string {
	p := filepath.Join(b.TempDir(), "many.arrow")
	manyTensors(b, p, n, nbytes)
	return p
}

// BenchmarkOpen opens a capture of 20,000 small tensors: the fast index versus arrow-go's record batch
// decoder (the generic path).
func BenchmarkOpen(b *testing.B) {
	path := benchCapture(b, 20000, 256)
	for _, tc := range []struct {
		name string
		opts []OpenOption
	}{{"fast", nil}, {"generic", []OpenOption{withGenericIndex()}}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c, err := Open(path, tc.opts...)
				if err != nil {
					b.Fatal(err)
				}
				if c.Len() != 20000 {
					b.Fatal(c.Len())
				}
				c.Close()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/20000, "ns/tensor")
		})
	}
}

// BenchmarkData measures Data, a bounds-checked zero-copy view of the mapping (one call per op).
func BenchmarkData(b *testing.B) {
	path := benchCapture(b, 2000, 64<<10)
	c := openCapture(b, path)
	b.ReportAllocs()
	var sum int
	i := 0
	for b.Loop() {
		d, err := c.Data(i)
		if err != nil {
			b.Fatal(err)
		}
		sum += len(d)
		if i++; i == c.Len() {
			i = 0
		}
	}
	_ = sum
}

// BenchmarkDataRead reads every tensor's bytes through Data (64 KiB each, from the page cache).
func BenchmarkDataRead(b *testing.B) {
	path := benchCapture(b, 2000, 64<<10)
	c := openCapture(b, path)
	b.SetBytes(int64(c.Len()) * 64 << 10)
	var sum uint64
	for b.Loop() {
		for i := 0; i < c.Len(); i++ {
			d, err := c.Data(i)
			if err != nil {
				b.Fatal(err)
			}
			for j := 0; j+8 <= len(d); j += 8 {
				sum += uint64(d[j])
			}
		}
	}
	_ = sum
}

// BenchmarkWrite streams 64 KiB tensors through the Writer.
func BenchmarkWrite(b *testing.B) {
	dir := b.TempDir()
	data := make([]byte, 64<<10)
	b.SetBytes(int64(len(data)))
	w := createCapture(b, filepath.Join(dir, "w.arrow"), Meta{Side: "bench"})
	i := 0
	for b.Loop() {
		t := Tensor{Pos: int64(i), NTok: 1, Op: "embed", Role: "out", DType: BF16, Shape: []int64{1, 32 << 10},
			Shard: NoShard, Data: data}
		if err := w.Write(t); err != nil {
			b.Fatal(err)
		}
		i++
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkOpenLarge opens the capture named by $BITALIGN_BIG_CAPTURE (e.g. a 10 GB file made by
// TestMakeBigCapture); it is skipped when the variable is unset.
func BenchmarkOpenLarge(b *testing.B) {
	path := os.Getenv("BITALIGN_BIG_CAPTURE")
	if path == "" {
		b.Skip("set BITALIGN_BIG_CAPTURE to a large capture (see TestMakeBigCapture)")
	}
	f0 := minorFaults()
	n := 0
	for b.Loop() {
		c, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		n = c.Len()
		c.Close()
	}
	b.ReportMetric(float64(minorFaults()-f0)/float64(b.N), "faults/op")
	b.ReportMetric(float64(n), "tensors")
}

// TestMakeBigCapture writes $BITALIGN_BIG_CAPTURE with $BITALIGN_BIG_N tensors of $BITALIGN_BIG_BYTES each
// (defaults 20000 × 512 KiB ≈ 10.5 GB) for BenchmarkOpenLarge; it is skipped when the variable is unset.
func TestMakeBigCapture(t *testing.T) {
	path := os.Getenv("BITALIGN_BIG_CAPTURE")
	if path == "" {
		t.Skip("set BITALIGN_BIG_CAPTURE to write a large capture")
	}
	n, nbytes := 20000, 512<<10
	if v, err := strconv.Atoi(os.Getenv("BITALIGN_BIG_N")); err == nil {
		n = v
	}
	if v, err := strconv.Atoi(os.Getenv("BITALIGN_BIG_BYTES")); err == nil {
		nbytes = v
	}
	start := time.Now()
	manyTensors(t, path, n, nbytes)
	t.Logf("wrote %d × %d bytes in %v", n, nbytes, time.Since(start))
	start = time.Now()
	c, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Open: %v for %d tensors", time.Since(start), c.Len())
	c.Close()
}
