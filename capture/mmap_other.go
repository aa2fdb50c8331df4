//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package capture

import (
	"fmt"
	"io"
	"os"
)

// mapFile reads the whole file into memory where this package does not use mmap.
func mapFile(f *os.File, size int64) ([]byte, func() error, error) {
	if size <= 0 {
		return nil, nil, fmt.Errorf("empty file")
	}
	if int64(int(size)) != size {
		return nil, nil, fmt.Errorf("file of %d bytes too large to read", size)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, nil, err
	}
	return b, func() error { return nil }, nil
}
