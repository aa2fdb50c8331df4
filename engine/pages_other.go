//go:build !linux

package engine

// dropPages does nothing where madvise(MADV_DONTNEED) is not used (the pages stay resident).
func dropPages([]byte) error { return nil }
