package cuda

import (
	"fmt"
	"sync"
)

// queueDepth bounds the tasks posted and not yet served: a poster that gets this far ahead of the device
// thread waits (the work it captured stays bounded).
const queueDepth = 4096

// task is one unit of work for the device thread: f, and either reply (Do: the caller waits for f's error) or
// onErr (Post: nobody waits; a failure is handed to onErr on the device thread).
type task struct {
	f     func(*Ctx) error
	reply chan error
	onErr func(error)
}

// queue is the device thread's inbox: tasks are served one at a time in the order they were sent, so a Do
// returns only after every task posted before it has run (on the device: been enqueued on the GPU's stream
// behind them).
type queue struct {
	mu     sync.Mutex // guards closed and orders the senders
	closed bool
	work   chan task
	pool   sync.Pool // reply channels
}

func newQueue() *queue { return &queue{work: make(chan task, queueDepth)} }

// do runs f on the device thread after every task sent before it and returns f's error.
func (q *queue) do(f func(*Ctx) error) error {
	reply, _ := q.pool.Get().(chan error)
	if reply == nil {
		reply = make(chan error, 1)
	}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		q.pool.Put(reply)
		return ErrClosed
	}
	q.work <- task{f: f, reply: reply}
	q.mu.Unlock()
	err := <-reply
	q.pool.Put(reply)
	return err
}

// post sends f without waiting for it; f's error (a panic included) goes to onErr on the device thread.
func (q *queue) post(f func(*Ctx) error, onErr func(error)) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return ErrClosed
	}
	q.work <- task{f: f, onErr: onErr}
	return nil
}

// close runs last (after every task sent before it) and stops serve once it returns; later calls get ErrClosed.
// It returns last's error; closing twice returns nil without running last.
func (q *queue) close(last func(*Ctx) error) error {
	reply := make(chan error, 1)
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	q.closed = true
	q.work <- task{f: last, reply: reply}
	close(q.work)
	q.mu.Unlock()
	return <-reply
}

// serve runs the tasks on the calling (device) goroutine until close.
func (q *queue) serve(c *Ctx) {
	for t := range q.work {
		err := runSafely(c, t.f)
		switch {
		case t.reply != nil:
			t.reply <- err
		case err != nil && t.onErr != nil:
			t.onErr(err)
		}
	}
}

func runSafely(c *Ctx, f func(*Ctx) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("cuda: panic on device thread: %v", r)
		}
	}()
	return f(c)
}
