package engine

import "syscall"

// dropPages removes a read-only file mapping's pages from this process's resident set (madvise MADV_DONTNEED):
// the bytes stay the file's and a later read faults them in again from the page cache.
func dropPages(data []byte) error { return syscall.Madvise(data, syscall.MADV_DONTNEED) }
