//go:build unix

package engine

import (
	"fmt"
	"os"
	"syscall"
)

// mapFile maps size bytes of f read-only (shared: the page cache's pages, no copy). On Linux the mapping is
// populated at once (MAP_POPULATE: the kernel reads ahead and maps every page in one call instead of one fault
// per page later). The file's descriptor may be closed afterwards.
func mapFile(path string, f *os.File, size int64) ([]byte, func() error, error) {
	if size <= 0 || int64(int(size)) != size {
		return nil, nil, fmt.Errorf("engine: %s: cannot map %d bytes", path, size)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED|mapPopulate)
	if err != nil {
		return nil, nil, fmt.Errorf("engine: %s: mmap: %v", path, err)
	}
	return data, func() error { return syscall.Munmap(data) }, nil
}
