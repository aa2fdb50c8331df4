package par

import (
	"sync/atomic"
	"testing"
)

// TestEachCallsEveryIndexOnce: every index exactly once, for any worker count, n = 0 included.
func TestEachCallsEveryIndexOnce(t *testing.T) {
	for _, n := range []int{0, 1, 7, 1000} {
		for _, w := range []int{-1, 0, 1, 3, 64} {
			seen := make([]atomic.Int32, n)
			Each(n, w, nil, func(i int) { seen[i].Add(1) })
			for i := range seen {
				if c := seen[i].Load(); c != 1 {
					t.Fatalf("n %d, workers %d: index %d called %d times", n, w, i, c)
				}
			}
		}
	}
}

// TestEachStops: once stop reports true no new index starts (at most one in flight per worker finishes).
func TestEachStops(t *testing.T) {
	for _, w := range []int{1, 4} {
		var calls atomic.Int32
		Each(10000, w, func() bool { return calls.Load() >= 10 }, func(int) { calls.Add(1) })
		if c := calls.Load(); c < 10 || c > int32(10+w) {
			t.Errorf("workers %d: %d calls after stop at 10", w, c)
		}
	}
}
