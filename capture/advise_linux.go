package capture

import (
	"syscall"
	"unsafe"
)

// adviseIndexing tells the kernel that the next accesses to the mapping are scattered (index pages only),
// which turns off read-ahead and fault-around; adviseDone restores normal (sequential-friendly) behaviour for
// tensor reads.
func adviseIndexing(b []byte) { _ = syscall.Madvise(b, syscall.MADV_RANDOM) }
func adviseDone(b []byte)     { _ = syscall.Madvise(b, syscall.MADV_NORMAL) }

// dropPages takes b's pages out of this process's resident set (MADV_DONTNEED on the shared, read-only file
// mapping: the page cache keeps them, a later read faults them back in).
func dropPages(b []byte) { _ = syscall.Madvise(b, syscall.MADV_DONTNEED) }

// canPrefetch reports whether prefetcher does anything on this platform.
const canPrefetch = true

const (
	pageSize   = 4096
	chunkPages = 1 << 16 // residency is queried 256 MiB of mapping at a time
)

// prefetcher asks the kernel to read ranges of a mapping in the background, skipping ranges whose pages are
// already in memory (so a warm page cache costs one mincore per 256 MiB, not a syscall per range).
type prefetcher struct {
	b     []byte
	vec   []byte
	chunk int64 // chunk whose residency is in vec; -1: none
}

func newPrefetcher(b []byte) *prefetcher {
	return &prefetcher{b: b, vec: make([]byte, chunkPages), chunk: -1}
}

// fetch starts reading b[off:off+n] unless all its pages are resident.
func (p *prefetcher) fetch(off, n int64) {
	start := off &^ (pageSize - 1)
	end := min(off+n, int64(len(p.b)))
	if start < 0 || start >= end {
		return
	}
	for pg := start; pg < end; pg += pageSize {
		c := pg / (pageSize * chunkPages)
		if c != p.chunk {
			lo := c * pageSize * chunkPages
			hi := min(lo+pageSize*chunkPages, int64(len(p.b)))
			if !mincore(p.b[lo:hi], p.vec) {
				p.chunk = -1
				break // unknown: fetch
			}
			p.chunk = c
		}
		if p.vec[(pg/pageSize)%chunkPages]&1 == 0 {
			_ = syscall.Madvise(p.b[start:end], syscall.MADV_WILLNEED)
			return
		}
	}
	if p.chunk == -1 {
		_ = syscall.Madvise(p.b[start:end], syscall.MADV_WILLNEED)
	}
}

// mincore fills vec with the residency of b's pages (bit 0 set: in memory); false when the call fails.
func mincore(b, vec []byte) bool {
	_, _, errno := syscall.Syscall(syscall.SYS_MINCORE, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)),
		uintptr(unsafe.Pointer(unsafe.SliceData(vec))))
	return errno == 0
}
