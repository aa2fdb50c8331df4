package capture

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// writeRanks writes one file per rank of a TP capture into dir, each with its own shard of "logits".
func writeRanks(t *testing.T, dir string, metas []Meta) {
	t.Helper()
	for _, m := range metas {
		ts := []Tensor{
			{Op: "embed", Role: "out", DType: BF16, Shape: []int64{2, 4}, NTok: 2, Rank: int32(m.Rank), Shard: NoShard,
				Data: make([]byte, 16)},
			{Op: "logits", Index: 1, Role: "out", DType: F32, Shape: []int64{2, 3}, NTok: 2, Rank: int32(m.Rank),
				Shard: Shard{Dim: 1, Start: int64(3 * m.Rank), FullShape: []int64{2, 3 * int64(m.TP)}}, Data: make([]byte, 24)},
		}
		ts[1].Data[0] = byte(m.Rank + 1)
		if err := WriteAll(filepath.Join(dir, fmt.Sprintf("rank%d.arrow", m.Rank)), m, ts); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDirectoryOfRanks(t *testing.T) {
	dir := t.TempDir()
	m0, m1, m2 := testMeta("trainer", 0), testMeta("trainer", 1), testMeta("trainer", 2)
	for _, m := range []*Meta{&m0, &m1, &m2} {
		m.TP = 3
	}
	writeRanks(t, dir, []Meta{m2, m0, m1})
	// a writer's leftover temp file is ignored
	if err := os.WriteFile(filepath.Join(dir, ".rank3.arrow.tmp-1"), []byte("junk"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := openCapture(t, dir)
	if c.Len() != 6 || len(c.Ranks()) != 3 || c.Meta().Rank != 0 || c.Path() != dir {
		t.Fatalf("Len %d, %d ranks, Meta().Rank %d", c.Len(), len(c.Ranks()), c.Meta().Rank)
	}
	for i := 0; i < c.Len(); i++ {
		e := c.Entry(i)
		if e.File != i/2 || c.Ranks()[e.File].Rank != e.File || e.Rank != int32(e.File) {
			t.Fatalf("entry %d: file %d rank %d", i, e.File, e.Rank)
		}
		if e.Op == "logits" {
			d, err := c.Data(i)
			if err != nil {
				t.Fatal(err)
			}
			if d[0] != byte(e.Rank+1) || e.Shard.Start != 3*int64(e.Rank) {
				t.Fatalf("rank %d logits: first byte %d, shard start %d", e.Rank, d[0], e.Shard.Start)
			}
		}
	}
}

func TestDirectoryErrors(t *testing.T) {
	tp2 := func(side string, rank int) Meta {
		m := testMeta(side, rank)
		m.TP = 2
		return m
	}
	stepped := tp2("trainer", 1)
	stepped.Step = 9
	cases := []struct {
		name  string
		metas []Meta
		want  string
	}{
		{"missing rank", []Meta{tp2("trainer", 0)}, "rank files missing: ranks [1]"},
		{"mixed sides", []Meta{tp2("trainer", 0), tp2("sampler", 1)}, "mixed captures"},
		{"mixed steps", []Meta{tp2("trainer", 0), stepped}, "mixed captures"},
		{"empty", nil, "no .arrow files"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeRanks(t, dir, tc.metas)
			_, err := Open(dir)
			wantErr(t, err, dir, tc.want)
		})
	}
	t.Run("duplicate rank", func(t *testing.T) {
		dir := t.TempDir()
		writeRanks(t, dir, []Meta{tp2("trainer", 0)})
		if err := os.Rename(filepath.Join(dir, "rank0.arrow"), filepath.Join(dir, "a.arrow")); err != nil {
			t.Fatal(err)
		}
		writeRanks(t, dir, []Meta{tp2("trainer", 0)})
		_, err := Open(dir)
		wantErr(t, err, dir, "rank 0 appears twice")
	})
	t.Run("bad file inside", func(t *testing.T) {
		dir := t.TempDir()
		writeRanks(t, dir, []Meta{tp2("trainer", 0)})
		bad := filepath.Join(dir, "rank1.arrow")
		if err := os.WriteFile(bad, []byte("not arrow at all"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Open(dir)
		wantErr(t, err, bad, "wrong magic")
	})
}
