//go:build !unix

package engine

import (
	"fmt"
	"os"
)

// mapFile reads the whole file where there is no mmap (the same bytes, held in memory).
func mapFile(path string, f *os.File, size int64) ([]byte, func() error, error) {
	if size <= 0 || int64(int(size)) != size {
		return nil, nil, fmt.Errorf("engine: %s: cannot read %d bytes", path, size)
	}
	data := make([]byte, size)
	if _, err := f.ReadAt(data, 0); err != nil {
		return nil, nil, fmt.Errorf("engine: %s: %v", path, err)
	}
	return data, func() error { return nil }, nil
}
