package capture

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// rssFile is this process's resident file-backed and shared memory (RssFile + RssShmem in /proc/self/status: a
// file on tmpfs counts as shared), in bytes.
func rssFile(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	var total int64
	found := 0
	for _, l := range strings.Split(string(b), "\n") {
		for _, key := range []string{"RssFile:", "RssShmem:"} {
			if v, ok := strings.CutPrefix(l, key); ok {
				kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				total += kb << 10
				found++
			}
		}
	}
	if found != 2 {
		t.Skip("no RssFile and RssShmem in /proc/self/status")
	}
	return total
}

// TestDropPages: after reading two 16 MiB tensors, DropPages of one takes its pages out of the resident set
// (RssFile + RssShmem falls by about its size, the other's stay), and its Data still reads the same bytes.
func TestDropPages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.arrow")
	w := createCapture(t, path, Meta{Side: "trainer", TP: 1, PP: 1, DP: 1})
	r := rand.New(rand.NewPCG(3, 4))
	const n = 16 << 20
	var want [][]byte
	for i := range 2 {
		d := make([]byte, n)
		for j := range d {
			d[j] = byte(r.Uint32())
		}
		want = append(want, d)
		if err := w.Write(Tensor{Op: "x", Seq: int64(i), Role: "out", DType: BF16, Shape: []int64{n / 2}, Shard: NoShard, Data: d}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	c := openCapture(t, path)
	for i := range 2 {
		d, err := c.Data(i)
		if err != nil {
			t.Fatal(err)
		}
		for j := 0; j < len(d); j += 4096 { // fault every page in
			pageSink += d[j]
		}
	}
	before := rssFile(t)
	c.DropPages([]int{0, -1, 7})
	after := rssFile(t)
	if drop := before - after; drop < n-(1<<20) || drop > n+(1<<20) {
		t.Errorf("RssFile+RssShmem %d → %d bytes: dropped %d, want about %d (one tensor)", before, after, drop, n)
	}
	for i := range 2 {
		d, err := c.Data(i)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(d, want[i]) {
			t.Fatalf("tensor %d reads other bytes after DropPages", i)
		}
	}
}

var pageSink byte // the reads that fault pages in are kept
