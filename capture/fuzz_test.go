package capture

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/ipc"
)

// fuzzOpen indexes data as Open would (both index paths) and checks the result: an error naming the file,
// or entries whose bytes lie in the data. The input must never be modified (it is a read-only mapping in
// real use).
func fuzzOpen(t *testing.T, name string, data []byte) {
	orig := append([]byte(nil), data...)
	if dump := os.Getenv("BITALIGN_FUZZ_HANG"); dump != "" {
		timer := time.AfterFunc(3*time.Second, func() {
			os.WriteFile(dump, orig, 0o644)
			panic("fuzz input takes over 3 s; written to " + dump)
		})
		defer timer.Stop()
	}
	for _, generic := range []bool{false, true} {
		c := &Capture{path: name, cfg: openConfig{mem: nil, genericOnly: generic}}
		c.cfg.mem = defaultAllocator()
		err := c.addData(name, data, nil)
		if err != nil {
			wantErr(t, err, name, "")
			continue
		}
		for i := 0; i < c.Len(); i++ {
			e := c.Entry(i)
			d, err := c.Data(i)
			if err != nil || int64(len(d)) != e.NBytes || e.Offset < 0 || e.Offset+e.NBytes > int64(len(data)) {
				t.Fatalf("tensor %d: entry %+v, %d bytes, err %v", i, e, len(d), err)
			}
			if err := e.check(); err != nil {
				t.Fatalf("tensor %d: %v", i, err)
			}
		}
	}
	if !bytes.Equal(orig, data) {
		t.Fatal("the reader modified its input")
	}
}

// smallTensors are a few tiny tensors (small seeds keep the fuzzer's minimization fast).
func smallTensors() []Tensor {
	return []Tensor{
		{Op: "embed", Role: "out", DType: BF16, Shape: []int64{1, 2}, NTok: 1, Shard: NoShard, Data: []byte{1, 2, 3, 4}},
		{Op: "logits", Index: 1, Role: "out", DType: F32, Shape: []int64{1, 1}, NTok: 1, Rank: 1,
			Shard: Shard{Dim: 1, Start: 1, FullShape: []int64{1, 2}}, Data: []byte{5, 6, 7, 8}},
		{Op: "sample", Index: 2, Role: "out", DType: I32, Shape: []int64{1}, NTok: 1, Shard: NoShard, Data: []byte{9, 0, 0, 0}},
	}
}

// arrowSeeds are valid captures in several layouts: our writer, arrow-go's builders with 2 rows per batch,
// and a compressed file.
func arrowSeeds(t *testing.T) [][]byte {
	dir := t.TempDir()
	var out [][]byte
	add := func(path string) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	meta := Meta{Side: "t", TP: 2, Created: time.Unix(0, 0).UTC()}
	p := filepath.Join(dir, "ours.arrow")
	if err := WriteAll(p, meta, smallTensors()); err != nil {
		t.Fatal(err)
	}
	add(p)
	p = filepath.Join(dir, "foreign.arrow")
	writeForeign(t, p, meta, schemaFields(), 2, smallTensors())
	add(p)
	p = filepath.Join(dir, "zstd.arrow")
	writeForeign(t, p, meta, schemaFields(), 1, smallTensors()[:1], ipc.WithZstd())
	add(p)
	return out
}

func safetensorsSeeds() [][]byte {
	return [][]byte{
		buildSafetensors(map[string]string{"side": "trainer", "tp": "2"}, []stTensor{
			{"a", "F32", []int64{2, 1}, seqBytes(8, 1)},
			{"b@pos=2,step=1,role=in", "BF16", []int64{2}, seqBytes(4, 2)},
			{"c@shard_dim=0,shard_start=2,full_shape=4,rank=1", "U8", []int64{2}, seqBytes(2, 3)}}),
		safetensorsFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{}}`, make([]byte, 8)),
		safetensorsFile(`{}`, nil),
	}
}

var update = flag.Bool("update", false, "rewrite testdata fixtures and fuzz seed corpora")

// TestSeedCorpora keeps the seed corpora in testdata/fuzz (run by every `go test`) in sync with the seeds.
func TestSeedCorpora(t *testing.T) {
	if !*update {
		t.Skip("run with -update to rewrite testdata/fuzz seed corpora")
	}
	write := func(target string, seeds [][]byte) {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, s := range seeds {
			body := "go test fuzz v1\n[]byte(" + strconv.Quote(string(s)) + ")\n"
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed%d", i)), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	var arrowCorpus [][]byte
	for _, s := range arrowSeeds(t) {
		arrowCorpus = append(arrowCorpus, s, s[:len(s)/2])
	}
	write("FuzzOpenArrow", arrowCorpus)
	write("FuzzOpenSafetensors", safetensorsSeeds())
}

// The seeds live in testdata/fuzz/FuzzOpenArrow (go test -run TestSeedCorpora -update rewrites them).
func FuzzOpenArrow(f *testing.F) {
	f.Add([]byte("ARROW1\x00\x00ARROW1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzOpen(t, "fuzz.arrow", data)
	})
}

// The seeds live in testdata/fuzz/FuzzOpenSafetensors.
func FuzzOpenSafetensors(f *testing.F) {
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzOpen(t, "fuzz.safetensors", data)
	})
}
