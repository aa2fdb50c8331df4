package capture

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fingerprintRef is the definition of docs/capture-format.md written as plainly as possible (one word at a
// time, constants computed afresh): the fast path must agree with it.
func fingerprintRef(row []byte) uint64 {
	var h uint64
	for i := 0; 4*i < len(row); i++ {
		var w [4]byte
		copy(w[:], row[4*i:])
		z := uint64(i+1) * 0x9E3779B97F4A7C15
		z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
		z = (z ^ (z >> 27)) * 0x94D049BB133111EB
		k := (z ^ (z >> 31)) | 1
		h += uint64(binary.LittleEndian.Uint32(w[:])) * k
	}
	z := h + uint64(len(row))*0x9E3779B97F4A7C15
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

func TestFingerprintMatchesDefinition(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for l := 0; l < 300; l++ {
		row := make([]byte, l)
		for i := range row {
			row[i] = byte(r.Uint32())
		}
		if got, want := Fingerprint(row), fingerprintRef(row); got != want {
			t.Fatalf("%d bytes: Fingerprint %#x, definition %#x", l, got, want)
		}
	}
	// K_0 is the first splitmix64 output of seed 0 (0xe220a8397b1dcdaf), made odd
	if k := FingerprintConst(0); k != 0xe220a8397b1dcdaf {
		t.Errorf("K_0 = %#x", k)
	}
}

// Every single-bit flip of a row changes its fingerprint (the linear form's constants are odd), at every bit
// of rows of several lengths; and appending a zero byte changes it too (the length is mixed in).
func TestFingerprintEveryBitFlip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, l := range []int{1, 2, 3, 6, 8, 13, 64, 258} {
		row := make([]byte, l)
		for i := range row {
			row[i] = byte(r.Uint32())
		}
		fp := Fingerprint(row)
		for bit := 0; bit < 8*l; bit++ {
			row[bit/8] ^= 1 << (bit % 8)
			if Fingerprint(row) == fp {
				t.Fatalf("%d-byte row: flipping bit %d leaves the fingerprint %#x", l, bit, fp)
			}
			row[bit/8] ^= 1 << (bit % 8)
		}
		if Fingerprint(append(row, 0)) == fp {
			t.Errorf("%d-byte row and the same with a zero byte appended share a fingerprint", l)
		}
	}
}

// The test vectors the Python library's tests read (capture/python/tests/test_fingerprint.py): rows given as
// hex with their fingerprints as unsigned and signed (torch int64) decimals.
func TestFingerprintVectors(t *testing.T) {
	type vec struct {
		Name     string `json:"name"`
		DType    string `json:"dtype"`
		Hex      string `json:"hex"`
		FP       string `json:"fp"`
		FPSigned string `json:"fp_int64"`
	}
	var vs []vec
	r := rand.New(rand.NewPCG(5, 6))
	add := func(name string, dt DType, row []byte) {
		fp := Fingerprint(row)
		vs = append(vs, vec{name, dt.String(), hex.EncodeToString(row), strconv.FormatUint(fp, 10), strconv.FormatInt(int64(fp), 10)})
	}
	add("empty", U8, nil)
	for _, l := range []int{1, 2, 3, 4, 5, 7, 8, 9} {
		row := make([]byte, l)
		for i := range row {
			row[i] = byte(r.Uint32())
		}
		add(fmt.Sprintf("u8 × %d", l), U8, row)
	}
	for _, n := range []int{1, 3, 64, 1536} {
		row := make([]byte, 2*n)
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint16(row[2*i:], uint16(r.Uint32()))
		}
		add(fmt.Sprintf("bf16 × %d", n), BF16, row)
	}
	row := make([]byte, 4*257)
	for i := range row {
		row[i] = 0xff
	}
	add("f32 × 257, all bits set", F32, row)
	row = make([]byte, 4*8)
	binary.LittleEndian.PutUint32(row[12:], 1<<31)
	add("f32 × 8, one sign bit", F32, row)
	b, err := json.MarshalIndent(map[string]any{
		"about":       "bitalign fingerprint test vectors (docs/capture-format.md); written by go test ./capture -run TestFingerprintVectors -update",
		"vectors":     vs,
		"always_full": FullAlways,
	}, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	// this package has its own -update flag (fuzz_test.go), so it cannot use internal/golden
	path := filepath.Join("..", "testdata", "capture", "fingerprint_vectors.json")
	b = append(b, '\n')
	if *update {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (regenerate: go test ./capture -run TestFingerprintVectors -update)", err)
	}
	if !bytes.Equal(want, b) {
		t.Errorf("%s is stale: the definition changed? (regenerate on purpose: go test ./capture -run TestFingerprintVectors -update)", path)
	}
}

func fpMeta() Meta {
	m := testMeta("trainer", 0)
	m.TP = 1
	return m
}

func TestFingerprintTensorRoundTrip(t *testing.T) {
	src := Tensor{Step: 1, Seq: 2, Pos: 3, NTok: 4, Op: "layers.0.mlp", Index: 7, DType: BF16, Shape: []int64{4, 5},
		Data: bytes.Repeat([]byte{1, 2, 3, 4, 5}, 8)}
	fpt, err := FingerprintTensor(src)
	if err != nil {
		t.Fatal(err)
	}
	if fpt.Role != "fp.out" || fpt.DType != I64 || len(fpt.Shape) != 1 || fpt.Shape[0] != 4 {
		t.Fatalf("fingerprint tensor %+v", fpt)
	}
	for r := 0; r < 4; r++ {
		if got, want := binary.LittleEndian.Uint64(fpt.Data[8*r:]), Fingerprint(src.Data[10*r:10*(r+1)]); got != want {
			t.Errorf("row %d: %#x, want %#x", r, got, want)
		}
	}
	path := filepath.Join(t.TempDir(), "fp.arrow")
	w, err := Create(path, fpMeta())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(fpt); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	c, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := c.Tensor(0)
	if err != nil {
		t.Fatal(err)
	}
	if got.Role != "fp.out" || !bytes.Equal(got.Data, fpt.Data) {
		t.Errorf("read back %+v", got)
	}
	sh := src
	sh.Shard = Shard{Dim: 1, Start: 0, FullShape: []int64{4, 10}}
	if _, err := FingerprintTensor(sh); err == nil || !strings.Contains(err.Error(), "sharded") {
		t.Errorf("a sharded tensor's fingerprints: %v", err)
	}
}

// Bad fingerprint tensors are refused by the writer and, written by another writer, by the reader, naming the
// file and the problem.
func TestFingerprintTensorErrors(t *testing.T) {
	good := Tensor{Op: "embed", NTok: 3, Role: "fp.out", DType: I64, Shape: []int64{3}, Data: make([]byte, 24), Shard: NoShard}
	cases := []struct {
		name string
		edit func(*Tensor)
		want string
	}{
		{"dtype", func(t *Tensor) { t.DType, t.Shape, t.Data = I32, []int64{3}, make([]byte, 12) }, "has dtype i32 (want i64)"},
		{"rows", func(t *Tensor) { t.Shape, t.Data = []int64{2}, make([]byte, 16) }, "has shape [2] (want [3]"},
		{"2-d", func(t *Tensor) { t.Shape = []int64{3, 1} }, "has shape [3 1]"},
		{"not per token", func(t *Tensor) { t.NTok = 0 }, "(want [1]"},
		{"no base role", func(t *Tensor) { t.Role = "fp." }, "names no tensor role"},
		{"nested", func(t *Tensor) { t.Role = "fp.fp.out" }, "names no tensor role"},
		{"sharded", func(t *Tensor) {
			t.Shape, t.Data, t.Shard = []int64{3}, make([]byte, 24), Shard{Dim: 0, Start: 0, FullShape: []int64{3}}
		}, "is sharded"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bad := good
			tc.edit(&bad)
			dir := t.TempDir()
			w, err := Create(filepath.Join(dir, "w.arrow"), fpMeta())
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Write(bad); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("writer: %v, want %q", err, tc.want)
			}
			w.Abort()
			path := filepath.Join(dir, "foreign.arrow")
			writeForeign(t, path, fpMeta(), schemaFields(), 1, []Tensor{good, bad})
			c, err := Open(path)
			if err == nil {
				c.Close()
				t.Fatal("reader accepted it")
			}
			if !strings.Contains(err.Error(), "foreign.arrow") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("reader: %v, want the file and %q", err, tc.want)
			}
		})
	}
}

// BenchmarkFingerprintRows: fingerprints of bf16 rows of a 1.5B model's hidden size (1536) and of its MLP
// (8960), 1024 tokens: the rate at which Go fingerprints a full capture (bytes per second of tensor data).
func BenchmarkFingerprintRows(b *testing.B) {
	for _, feat := range []int{1536, 8960} {
		b.Run(fmt.Sprintf("bf16x%d", feat), func(b *testing.B) {
			data := make([]byte, 1024*2*feat)
			r := rand.New(rand.NewPCG(7, 8))
			for i := range data {
				data[i] = byte(r.Uint32())
			}
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := FingerprintRows(data, 1024); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestFingerprintCaptureSize: a fingerprint capture of every op of a Qwen2-1.5B-shaped model (hidden 1536,
// 28 layers, 12/2 heads of 128, intermediate 8960, V 151936, f32 logits) over 4 × 256 tokens, written by this
// package's writer, against the tensor bytes of the full capture (which its file exceeds): the goal is
// at most 1/500.
func TestFingerprintCaptureSize(t *testing.T) {
	const hidden, kv, inter, vocab, layers, seqs, T = 1536, 256, 8960, 151936, 28, 4, 256
	feat := map[string]int64{LayerKProj: kv, LayerVProj: kv, LayerKRope: kv, LayerGateProj: inter, LayerUpProj: inter, LayerAct: inter}
	type op struct {
		name string
		dt   DType
		n    int64
	}
	ops := []op{{OpTokens, I64, 1}, {OpEmbed, BF16, hidden}}
	for l := 0; l < layers; l++ {
		for _, s := range LayerOps(false) {
			n := feat[s]
			if n == 0 {
				n = hidden
			}
			ops = append(ops, op{LayerOp(l, s), BF16, n})
		}
	}
	ops = append(ops, op{OpFinalNorm, BF16, hidden}, op{OpLogits, F32, vocab})
	path := filepath.Join(t.TempDir(), "fp.arrow")
	w, err := Create(path, fpMeta())
	if err != nil {
		t.Fatal(err)
	}
	var full int64
	for seq := int64(0); seq < seqs; seq++ {
		for i, o := range ops {
			full += T * o.n * int64(o.dt.Size())
			fp := Tensor{Seq: seq, NTok: T, Op: o.name, Index: int32(i), Role: "fp.out", DType: I64, Shape: []int64{T},
				Shard: NoShard, Data: make([]byte, 8*T)}
			if err := w.Write(fp); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	ratio := float64(full) / float64(st.Size())
	t.Logf("1.5B-shaped, %d ops × %d sequences × %d tokens: full tensors %d bytes, fingerprint capture %d bytes: 1/%.0f",
		len(ops), seqs, T, full, st.Size(), ratio)
	if ratio < 500 {
		t.Errorf("the fingerprint capture is 1/%.0f of the full one (goal: at most 1/500)", ratio)
	}
}
