package capture

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, de := range des {
		out = append(out, de.Name())
	}
	return out
}

func TestAtomicWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.arrow")
	w := createCapture(t, path, testMeta("trainer", 0))
	for _, tn := range allDTypeTensors(6, 3) {
		if err := w.Write(tn); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(path); !os.IsNotExist(err) {
			t.Fatalf("file under the final name before Close (err %v)", err)
		}
	}
	if names := dirNames(t, dir); len(names) != 1 || names[0][0] != '.' {
		t.Fatalf("while writing, dir holds %v, want one hidden temp file", names)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if names := dirNames(t, dir); len(names) != 1 || names[0] != "c.arrow" {
		t.Fatalf("after Close, dir holds %v", names)
	}
	if err := w.Write(allDTypeTensors(6, 1)[0]); err == nil {
		t.Fatal("Write after Close succeeded")
	}
	w.Abort() // after Close: nothing happens
	if _, err := os.Stat(path); err != nil {
		t.Fatal("Abort after Close removed the file")
	}
}

func TestAbortLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.arrow")
	w := createCapture(t, path, testMeta("trainer", 0))
	if err := w.Write(allDTypeTensors(7, 1)[0]); err != nil {
		t.Fatal(err)
	}
	w.Abort()
	w.Abort()
	if names := dirNames(t, dir); len(names) != 0 {
		t.Fatalf("after Abort, dir holds %v", names)
	}
	if err := w.Close(); err == nil {
		t.Fatal("Close after Abort succeeded")
	}
}

func TestCreateRefusesOverwrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.arrow")
	if err := os.WriteFile(path, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Create(path, testMeta("trainer", 0))
	wantErr(t, err, path, "file exists")

	// the file appears between Create and Close: Close must not replace it either
	path2 := filepath.Join(dir, "d.arrow")
	w := createCapture(t, path2, testMeta("trainer", 0))
	if err := os.WriteFile(path2, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantErr(t, w.Close(), path2, "file exists")
	if b, _ := os.ReadFile(path2); string(b) != "precious" {
		t.Fatal("Close replaced an existing file")
	}
	if names := dirNames(t, dir); len(names) != 2 {
		t.Fatalf("temp file left behind: %v", names)
	}

	if err := WriteAll(path, testMeta("trainer", 0), allDTypeTensors(8, 1), WithOverwrite()); err != nil {
		t.Fatal(err)
	}
	c := openCapture(t, path)
	if c.Len() != len(allDTypeTensors(8, 1)) {
		t.Fatalf("overwritten capture has %d tensors", c.Len())
	}
}

func TestWriteValidates(t *testing.T) {
	good := Tensor{Op: "embed", Role: "out", DType: BF16, Shape: []int64{2, 3}, Shard: NoShard, Data: make([]byte, 12)}
	cases := []struct {
		name string
		mod  func(*Tensor)
		want string
	}{
		{"short data", func(t *Tensor) { t.Data = t.Data[:11] }, "needs 12 bytes, has 11"},
		{"unknown dtype", func(t *Tensor) { t.DType = 99 }, "invalid dtype"},
		{"zero dtype", func(t *Tensor) { t.DType = InvalidDType }, "invalid dtype"},
		{"negative dim", func(t *Tensor) { t.Shape = []int64{-2, -3} }, "negative dimension"},
		{"overflow", func(t *Tensor) { t.Shape = []int64{1 << 40, 1 << 40} }, "overflows"},
		{"no op", func(t *Tensor) { t.Op = "" }, "op name"},
		{"shard dim out of range", func(t *Tensor) { t.Shard = Shard{Dim: 2, FullShape: []int64{2, 6}} }, "out of range"},
		{"shard full shape rank", func(t *Tensor) { t.Shard = Shard{Dim: 1, FullShape: []int64{6}} }, "does not match"},
		{"shard other dim", func(t *Tensor) { t.Shard = Shard{Dim: 1, FullShape: []int64{4, 6}} }, "outside shard dim"},
		{"shard past end", func(t *Tensor) { t.Shard = Shard{Dim: 1, Start: 4, FullShape: []int64{2, 6}} }, "outside full dim"},
		{"unsharded with start", func(t *Tensor) { t.Shard = Shard{Dim: -1, Start: 1} }, "unsharded"},
		{"shard dim -2", func(t *Tensor) { t.Shard = Shard{Dim: -2} }, "shard dim"},
		{"negative ntok", func(t *Tensor) { t.NTok = -1 }, "ntok"},
	}
	path := filepath.Join(t.TempDir(), "c.arrow")
	w := createCapture(t, path, testMeta("trainer", 0))
	defer w.Abort()
	for _, tc := range cases {
		tn := good
		tn.Shape = append([]int64(nil), good.Shape...)
		tc.mod(&tn)
		wantErr(t, w.Write(tn), path, tc.want)
	}
	// a refused tensor leaves the writer usable; the zero Shard means not sharded
	if err := w.Write(good); err != nil {
		t.Fatal(err)
	}
	zero := good
	zero.Op, zero.Shard = "zero-shard", Shard{}
	if err := w.Write(zero); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	c := openCapture(t, path)
	if c.Len() != 2 || c.Entry(1).Shard.Dim != -1 {
		t.Fatalf("%d tensors, second has shard %+v", c.Len(), c.Entry(1).Shard)
	}
	if _, err := Create(filepath.Join(t.TempDir(), "m.arrow"), Meta{TP: 2, Rank: 2}); err == nil {
		t.Fatal("Create accepted rank 2 of tp 2")
	}
}

// Every allocation arrow-go makes while writing and reading is released.
func TestNoArrowLeaks(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	path := filepath.Join(t.TempDir(), "c.arrow")
	if err := WriteAll(path, testMeta("trainer", 0), allDTypeTensors(9, 3), WithAllocator(mem)); err != nil {
		t.Fatal(err)
	}
	for _, opts := range [][]OpenOption{{WithReadAllocator(mem)}, {WithReadAllocator(mem), withGenericIndex()}} {
		c, err := Open(path, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Tensor(c.Len() - 1); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	// an aborted writer releases too
	w := createCapture(t, filepath.Join(t.TempDir(), "a.arrow"), testMeta("trainer", 0), WithAllocator(mem))
	if err := w.Write(allDTypeTensors(9, 1)[0]); err != nil {
		t.Fatal(err)
	}
	w.Abort()
}
