package cuda

import (
	"errors"
	"strings"
	"sync"
	"testing"
)

// serveQueue starts a device thread stand-in (no driver: the tasks ignore their Ctx) and returns its stop.
func serveQueue(t *testing.T) (*queue, func() error) {
	t.Helper()
	q := newQueue()
	done := make(chan struct{})
	go func() { q.serve(&Ctx{}); close(done) }()
	return q, func() error {
		err := q.close(func(*Ctx) error { return nil })
		<-done
		return err
	}
}

// TestQueueOrder: posted tasks run in order, and a do returns only after every task posted before it ran
// (the engine's ops are posted and its downloads done: a download must see every op before it).
func TestQueueOrder(t *testing.T) {
	q, stop := serveQueue(t)
	var got []int // touched only on the device thread, read after a do
	for i := 0; i < 3*queueDepth; i++ {
		if err := q.post(func(*Ctx) error { got = append(got, i); return nil }, nil); err != nil {
			t.Fatal(err)
		}
		if i%1000 == 999 {
			n := 0
			if err := q.do(func(*Ctx) error { n = len(got); return nil }); err != nil {
				t.Fatal(err)
			}
			if n != i+1 {
				t.Fatalf("do after %d posts saw %d of them run", i+1, n)
			}
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("task %d ran as the %d-th", v, i)
		}
	}
	if len(got) != 3*queueDepth {
		t.Fatalf("%d of %d posted tasks ran before close returned", len(got), 3*queueDepth)
	}
}

// TestQueueErrors: a posted task's error and panic reach its onErr (not a later do), a do's error is its own,
// and after close every call says ErrClosed.
func TestQueueErrors(t *testing.T) {
	q, stop := serveQueue(t)
	var mu sync.Mutex
	var errs []error
	onErr := func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }
	boom := errors.New("boom")
	q.post(func(*Ctx) error { return boom }, onErr)                 //nolint:errcheck
	q.post(func(*Ctx) error { panic("kernel wrapper bug") }, onErr) //nolint:errcheck
	q.post(func(*Ctx) error { return boom }, nil)                   //nolint:errcheck // nobody to tell: dropped
	if err := q.do(func(*Ctx) error { return nil }); err != nil {
		t.Fatalf("a do after failed posts returned %v, want its own nil", err)
	}
	mine := errors.New("mine")
	if err := q.do(func(*Ctx) error { return mine }); err != mine {
		t.Fatalf("do returned %v, want %v", err, mine)
	}
	mu.Lock()
	if len(errs) != 2 || errs[0] != boom || !strings.Contains(errs[1].Error(), "panic on device thread: kernel wrapper bug") {
		t.Fatalf("onErr got %v, want [boom, the panic]", errs)
	}
	mu.Unlock()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := q.do(func(*Ctx) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("do after close: %v, want ErrClosed", err)
	}
	if err := q.post(func(*Ctx) error { return nil }, onErr); !errors.Is(err, ErrClosed) {
		t.Fatalf("post after close: %v, want ErrClosed", err)
	}
	if err := q.close(func(*Ctx) error { return boom }); err != nil {
		t.Fatalf("second close: %v, want nil (idempotent)", err)
	}
}

// TestQueueConcurrentPosters: posters on many goroutines (TP ranks sharing a GPU) each see their own tasks in
// their own order, and a do on one of them orders after that poster's posts.
func TestQueueConcurrentPosters(t *testing.T) {
	q, stop := serveQueue(t)
	const posters, each = 8, 2000
	last := make([]int, posters) // device thread only
	var wg sync.WaitGroup
	fail := make(chan string, posters)
	for p := 0; p < posters; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; i <= each; i++ {
				q.post(func(*Ctx) error { //nolint:errcheck
					if last[p] != i-1 {
						fail <- "out of order"
					}
					last[p] = i
					return nil
				}, nil)
			}
			var seen int
			q.do(func(*Ctx) error { seen = last[p]; return nil }) //nolint:errcheck
			if seen != each {
				fail <- "do ran before the poster's own posts"
			}
		}()
	}
	wg.Wait()
	close(fail)
	for f := range fail {
		t.Fatal(f)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
