//go:build !linux

package capture

func adviseIndexing([]byte) {}
func adviseDone([]byte)     {}
func dropPages([]byte)      {}

const canPrefetch = false

type prefetcher struct{}

func newPrefetcher([]byte) *prefetcher { return nil }
func (*prefetcher) fetch(off, n int64) {}
