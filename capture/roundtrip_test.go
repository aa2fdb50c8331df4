package capture

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// testMeta is a complete Meta for tests.
func testMeta(side string, rank int) Meta {
	return Meta{
		Side: side, Model: json.RawMessage(`{"architecture":"llama","config":{"hidden":8}}`),
		TP: 2, PP: 1, DP: 1, Rank: rank, KernelProfile: "canonical", BatchSize: 4, Seed: 1<<63 + 5, Step: 3,
		Producer: "capture test", Created: time.Date(2026, 11, 29, 19, 0, 0, 0, time.UTC),
		Extra: json.RawMessage(`{"note":"x"}`),
	}
}

// randTensor makes a tensor of dtype dt with random bytes; the shape varies with i so sizes are odd too.
func randTensor(r *rand.Rand, i int, dt DType) Tensor {
	shape := []int64{int64(1 + i%5), int64(1 + r.IntN(37))}
	n := shape[0] * shape[1] * int64(dt.Size())
	data := make([]byte, n)
	for j := range data {
		data[j] = byte(r.Uint32())
	}
	if dt == Bool {
		for j := range data {
			data[j] &= 1
		}
	}
	return Tensor{Step: int64(i / 7), Seq: int64(i % 3), Pos: int64(i), NTok: shape[0], Op: "layers.0." + dt.String(),
		Index: int32(i), Role: "out", DType: dt, Shape: shape, Rank: 0, Shard: NoShard, Data: data}
}

func allDTypeTensors(seed uint64, n int) []Tensor {
	r := rand.New(rand.NewPCG(seed, 1))
	var ts []Tensor
	for i := 0; i < n; i++ {
		for _, dt := range DTypes() {
			ts = append(ts, randTensor(r, i, dt))
		}
	}
	// a sharded tensor, a scalar and an empty tensor
	ts = append(ts,
		Tensor{Op: "logits", Index: 30, Role: "out", DType: F32, Shape: []int64{2, 3}, Rank: 1, NTok: 2,
			Shard: Shard{Dim: 1, Start: 3, FullShape: []int64{2, 6}}, Data: make([]byte, 24)},
		Tensor{Op: "scalar", Role: "out", DType: F64, Shape: []int64{}, Shard: NoShard, Data: make([]byte, 8)},
		Tensor{Op: "empty", Role: "in.0", DType: BF16, Shape: []int64{0, 4}, Shard: NoShard, Data: []byte{}},
	)
	return ts
}

// createCapture starts a capture file at path (Create), failing the test when it cannot.
func createCapture(tb testing.TB, path string, meta Meta, opts ...WriterOption) *Writer {
	tb.Helper()
	w, err := Create(path, meta, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return w
}

// openCapture opens path (a capture file or directory), closed when the test ends.
func openCapture(tb testing.TB, path string, opts ...OpenOption) *Capture {
	tb.Helper()
	c, err := Open(path, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

func sameTensor(t *testing.T, i int, got, want Tensor) {
	t.Helper()
	if !bytes.Equal(got.Data, want.Data) {
		t.Fatalf("tensor %d (%s %s): data differs", i, want.Op, want.DType)
	}
	got.Data, want.Data = nil, nil
	if len(got.Shape) == 0 && len(want.Shape) == 0 {
		got.Shape, want.Shape = nil, nil
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("tensor %d:\n got %+v\nwant %+v", i, got, want)
	}
}

func TestRoundTripEveryDType(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.arrow")
	ts := allDTypeTensors(1, 6)
	meta := testMeta("trainer", 0)
	if err := WriteAll(path, meta, ts); err != nil {
		t.Fatal(err)
	}
	c := openCapture(t, path)
	if c.Len() != len(ts) {
		t.Fatalf("Len = %d, want %d", c.Len(), len(ts))
	}
	meta.FormatVersion = 1
	if got := c.Meta(); !reflect.DeepEqual(got, meta) {
		t.Fatalf("meta:\n got %+v\nwant %+v", got, meta)
	}
	for i := range ts {
		got, err := c.Tensor(i)
		if err != nil {
			t.Fatal(err)
		}
		sameTensor(t, i, got, ts[i])
		e := c.Entry(i)
		if e.NBytes != int64(len(ts[i].Data)) || e.File != 0 {
			t.Fatalf("entry %d: NBytes %d File %d", i, e.NBytes, e.File)
		}
	}
}

func TestDataAligned(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.arrow")
	ts := allDTypeTensors(2, 20)
	if err := WriteAll(path, testMeta("sampler", 0), ts); err != nil {
		t.Fatal(err)
	}
	c := openCapture(t, path)
	base := c.files[0].data
	for i := 0; i < c.Len(); i++ {
		e := c.Entry(i)
		if e.NBytes == 0 {
			continue
		}
		if e.Offset%Alignment != 0 {
			t.Fatalf("tensor %d (%d bytes): file offset %d %% %d = %d", i, e.NBytes, e.Offset, Alignment, e.Offset%Alignment)
		}
		d, _ := c.Data(i)
		if &d[0] != &base[e.Offset] {
			t.Fatalf("tensor %d: Data is not a view of the mapping at its offset", i)
		}
	}
}
