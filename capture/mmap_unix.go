//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package capture

import (
	"fmt"
	"os"
	"syscall"
)

// mapFile maps the whole file read-only. A file of size 0 cannot be mapped and is reported as empty.
func mapFile(f *os.File, size int64) ([]byte, func() error, error) {
	if size <= 0 {
		return nil, nil, fmt.Errorf("empty file")
	}
	if int64(int(size)) != size {
		return nil, nil, fmt.Errorf("file of %d bytes too large to map", size)
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap: %v", err)
	}
	return b, func() error { return syscall.Munmap(b) }, nil
}
