package capture

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The fixtures in ../testdata/capture are small captures for other packages' tests and for people reading
// the format: a trainer capture, a TP=2 directory and a safetensors dump. TestFixtures checks that our writer
// still produces them byte for byte (a format change must be deliberate: go test ./capture -run TestFixtures
// -args -update rewrites them).

const fixtureDir = "../testdata/capture"

func bf16Bytes(vals ...float32) []byte {
	var b []byte
	for _, v := range vals {
		b = binary.LittleEndian.AppendUint16(b, uint16(math.Float32bits(v)>>16)) // exact for these values
	}
	return b
}

func f32Bytes(vals ...float32) []byte {
	var b []byte
	for _, v := range vals {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

func fixtureMeta(rank, tp int) Meta {
	return Meta{Side: "trainer", Model: []byte(`{"architecture":"llama","config":{"hidden":4,"vocab":6}}`),
		TP: tp, PP: 1, DP: 1, Rank: rank, KernelProfile: "canonical", BatchSize: 1, Seed: 42,
		Producer: "bitalign capture fixtures", Created: time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)}
}

// fixtureTensors is one sequence of two positions through tokens, embed, logits (sharded over tp ranks).
func fixtureTensors(rank, tp int) []Tensor {
	v := 6 / tp
	logits := make([]float32, 2*v)
	for i := range logits {
		logits[i] = float32(rank*v+i%v) - 2.5 + float32(i/v)
	}
	shard := NoShard
	if tp > 1 {
		shard = Shard{Dim: 1, Start: int64(rank * v), FullShape: []int64{2, 6}}
	}
	return []Tensor{
		{NTok: 2, Op: "tokens", Index: 0, Role: "out", DType: I32, Shape: []int64{2}, Rank: int32(rank), Shard: NoShard,
			Data: []byte{3, 0, 0, 0, 5, 0, 0, 0}},
		{NTok: 2, Op: "embed", Index: 1, Role: "out", DType: BF16, Shape: []int64{2, 4}, Rank: int32(rank), Shard: NoShard,
			Data: bf16Bytes(0.5, -1, 2, 0.25, 1, 1.5, -0.75, 3)},
		{NTok: 2, Op: "logits", Index: 2, Role: "out", DType: F32, Shape: []int64{2, int64(v)}, Rank: int32(rank),
			Shard: shard, Data: f32Bytes(logits...)},
	}
}

func fixtureSafetensors() []byte {
	return buildSafetensors(map[string]string{"side": "sampler", "producer": "torch hooks"}, []stTensor{
		{"embed@seq=0,pos=0", "BF16", []int64{2, 4}, bf16Bytes(0.5, -1, 2, 0.25, 1, 1.5, -0.75, 3)},
		{"logits@seq=0,pos=0", "F32", []int64{2, 6}, f32Bytes(-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5)},
	})
}

// writeFixtures writes every fixture under dir.
func writeFixtures(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "tp2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteAll(filepath.Join(dir, "trainer.arrow"), fixtureMeta(0, 1), fixtureTensors(0, 1), WithOverwrite()); err != nil {
		t.Fatal(err)
	}
	for r := 0; r < 2; r++ {
		p := filepath.Join(dir, "tp2", "rank"+string(rune('0'+r))+".arrow")
		if err := WriteAll(p, fixtureMeta(r, 2), fixtureTensors(r, 2), WithOverwrite()); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "acts.safetensors"), fixtureSafetensors(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFixtures(t *testing.T) {
	if *update {
		writeFixtures(t, fixtureDir)
	}
	fresh := t.TempDir()
	writeFixtures(t, fresh)
	for _, name := range []string{"trainer.arrow", "tp2/rank0.arrow", "tp2/rank1.arrow", "acts.safetensors"} {
		want, err := os.ReadFile(filepath.Join(fresh, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(fixtureDir, name))
		if err != nil {
			t.Fatalf("%v (go test ./capture -run TestFixtures -args -update writes it)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: the writer's output changed; if deliberate, bump the format version if needed and run "+
				"go test ./capture -run TestFixtures -args -update", name)
		}
	}
	for _, name := range []string{"trainer.arrow", "tp2", "acts.safetensors"} {
		c, err := Open(filepath.Join(fixtureDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if c.Len() == 0 {
			t.Errorf("%s: empty", name)
		}
		c.Close()
	}
}
