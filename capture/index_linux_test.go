package capture

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// fadviseDontNeed drops a clean file's pages from the page cache.
func fadviseDontNeed(t *testing.T, path string) {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const posixFadvDontNeed = 4
	if _, _, e := syscall.Syscall6(syscall.SYS_FADVISE64, f.Fd(), 0, 0, posixFadvDontNeed, 0, 0); e != 0 {
		t.Skipf("fadvise: %v", e)
	}
}

// residentPages counts the resident pages of b[off:off+n] (page-aligned inward).
func residentPages(t *testing.T, b []byte, off, n int64) int {
	start := (off + pageSize - 1) &^ (pageSize - 1)
	end := (off + n) &^ (pageSize - 1)
	if end <= start {
		return 0
	}
	vec := make([]byte, (end-start)/pageSize)
	if !mincore(b[start:end], vec) {
		t.Skip("mincore failed")
	}
	r := 0
	for _, v := range vec {
		r += int(v & 1)
	}
	return r
}

// Open must read the index only: with the file evicted from the page cache, opening it (prefetch included)
// must not bring any page that lies wholly inside tensor data into memory. Data then brings it in.
func TestOpenReadsIndexOnly(t *testing.T) {
	// a file per case: read-ahead from one case's Data call must not land in the next one's measurement
	t.Run("fast", func(t *testing.T) { openIndexOnly(t) })
	t.Run("generic", func(t *testing.T) { openIndexOnly(t, withGenericIndex()) })
}

func openIndexOnly(t *testing.T, opts ...OpenOption) {
	path := filepath.Join(t.TempDir(), "big.arrow")
	manyTensors(t, path, 100, 256<<10)
	fadviseDontNeed(t, path)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	probe, unmap, err := mapFile(f, st.Size())
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	r := residentPages(t, probe, 0, int64(len(probe)))
	unmap()
	if r > 0 {
		t.Skipf("%d pages still resident after fadvise: cannot test", r)
	}
	c := openCapture(t, path, opts...)
	data := c.files[0].data
	for i := 0; i < c.Len(); i++ {
		e := c.Entry(i)
		if r := residentPages(t, data, e.Offset+pageSize, e.NBytes-2*pageSize); r != 0 {
			t.Fatalf("tensor %d: %d data pages read by Open", i, r)
		}
	}
	d, err := c.Data(50)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0
	for j := 0; j < len(d); j += pageSize {
		sum += int(d[j])
	}
	e := c.Entry(50)
	if r := residentPages(t, data, e.Offset+pageSize, e.NBytes-2*pageSize); r == 0 {
		t.Fatalf("reading tensor 50 left its pages non-resident (sum %d): the residency probe does not work", sum)
	}
}
