package engine

import (
	"fmt"
	"sync"
)

// ringAlloc hands out regions of a fixed-size buffer in FIFO order: a recorder's downloads in flight and
// waiting for the writer (the pinned copies of AsyncDownloader). take waits while the region does not fit
// behind the live ones (wrapping to the start when the end is too short); give frees a region, and the space
// is reused once every region taken before it is free too (the writer frees them in order; out of order is
// allowed and only delays reuse). Safe for concurrent use: one goroutine takes, another gives.
type ringAlloc struct {
	mu   sync.Mutex
	cond *sync.Cond
	size int64
	live []ringRegion // in the order taken
}

type ringRegion struct {
	off, n int64
	free   bool
}

func newRingAlloc(size int64) *ringAlloc {
	r := &ringAlloc{size: size}
	r.cond = sync.NewCond(&r.mu)
	return r
}

// take returns the offset of n bytes (0 < n ≤ size), waiting for give when they do not fit yet.
func (r *ringAlloc) take(n int64) (int64, error) {
	if n <= 0 || n > r.size {
		return 0, fmt.Errorf("engine: a %d-byte region of a %d-byte ring", n, r.size)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		if off, ok := r.fit(n); ok {
			r.live = append(r.live, ringRegion{off: off, n: n})
			return off, nil
		}
		r.cond.Wait()
	}
}

// fit is where n bytes go now, if anywhere: after the newest region, else (wrapping) before the oldest.
func (r *ringAlloc) fit(n int64) (int64, bool) {
	if len(r.live) == 0 {
		return 0, true
	}
	oldest, newest := r.live[0], r.live[len(r.live)-1]
	head, tail := newest.off+newest.n, oldest.off
	if newest.off >= oldest.off { // not wrapped: [tail, head) is in use
		if head+n <= r.size {
			return head, true
		}
		return 0, n <= tail
	}
	return head, head+n <= tail // wrapped: [tail, size) and [0, head) are in use
}

// give frees the region at off (from take).
func (r *ringAlloc) give(off int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.live {
		if r.live[i].off == off && !r.live[i].free {
			r.live[i].free = true
			break
		}
	}
	k := 0
	for k < len(r.live) && r.live[k].free {
		k++
	}
	if k > 0 {
		r.live = append(r.live[:0], r.live[k:]...)
		r.cond.Broadcast()
	}
}
