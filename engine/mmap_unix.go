//go:build unix

package engine

import (
	"fmt"
	"os"
	"syscall"
)

// mapFile maps size bytes of f read-only (shared: the page cache's pages, no copy). The file's descriptor may be
// closed afterwards. No MAP_POPULATE: Load's parallel NaN scan faults the pages in on every core, faster (measured:
// docs/benchmarks.md) than one thread populating the mapping and the scan reading it again.
func mapFile(path string, f *os.File, size int64) ([]byte, func() error, error) {
	if size <= 0 || int64(int(size)) != size {
		return nil, nil, fmt.Errorf("engine: %s: cannot map %d bytes", path, size)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("engine: %s: mmap: %v", path, err)
	}
	return data, func() error { return syscall.Munmap(data) }, nil
}
