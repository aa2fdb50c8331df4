package testrank

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
)

func TestEach(t *testing.T) {
	var calls atomic.Int32
	errs := Each(4, func(r int) error {
		calls.Add(1)
		if r == 2 {
			return errors.New("two")
		}
		return nil
	})
	if calls.Load() != 4 || len(errs) != 4 || fmt.Sprint(errs) != "[<nil> <nil> two <nil>]" {
		t.Fatalf("%d calls, errs %v", calls.Load(), errs)
	}
	if len(Each(0, func(int) error { return nil })) != 0 {
		t.Fatal("Each(0) returned errors")
	}
	// the ranks run at once: each waits for the next, so run one by one they would never finish
	chans := make([]chan struct{}, 3)
	for i := range chans {
		chans[i] = make(chan struct{})
	}
	Each(3, func(r int) error {
		if r+1 < len(chans) {
			<-chans[r+1]
		}
		close(chans[r])
		return nil
	})
}
