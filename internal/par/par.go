// Package par runs independent jobs on a bounded number of goroutines: the one work queue the loader, the
// oracle and other bulk passes share.
package par

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Each calls f(i) for every i in [0, n) on at most workers goroutines (GOMAXPROCS when workers <= 0), each
// taking the next index, and returns when all calls have returned. Once stop (nil: never) reports true, no
// further index is handed out. With one worker the calls run in order on the caller's goroutine.
func Each(n, workers int, stop func() bool, f func(i int)) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, n)
	if workers <= 1 {
		for i := 0; i < n && (stop == nil || !stop()); i++ {
			f(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || stop != nil && stop() {
					return
				}
				f(i)
			}
		}()
	}
	wg.Wait()
}
