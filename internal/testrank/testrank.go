// Package testrank runs a test's tensor-parallel ranks, one goroutine each, as the collectives' and kernels'
// tests do. Only tests import it.
package testrank

import (
	"sync"
	"testing"
)

// Each runs f for every rank 0..n-1 on its own goroutine, waits for all of them and returns their errors by
// rank.
func Each(n int, f func(r int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(r)
		}()
	}
	wg.Wait()
	return errs
}

// NoErrors fails the test at the first rank whose error is not nil, naming the rank.
func NoErrors(tb testing.TB, errs []error) {
	tb.Helper()
	for r, err := range errs {
		if err != nil {
			tb.Fatalf("rank %d: %v", r, err)
		}
	}
}
