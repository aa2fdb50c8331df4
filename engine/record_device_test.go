package engine

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"bitalign/capture"
	"bitalign/internal/fp"
)

// fpCPU is the CPU backend with the CUDA backend's recording paths done on the host another way: FingerprintRows
// fingerprints each row alone (capture.Fingerprint of the row's own encoding, not the recorder's chunked
// capture.FingerprintRows), and StartDownload encodes into a small ring of its own and completes the copy later
// on another goroutine, so that regions wrap, the forward waits for the writer and copies finish out of order
// with the forward.
type fpCPU struct {
	*CPU
	refuse bool // FingerprintRows and StartDownload decline (ok false)
	ring   *ringAlloc
	buf    []byte
	fps    *atomic.Int64 // FingerprintRows calls that did the work
	copies *atomic.Int64 // StartDownload calls that did
}

func (b fpCPU) hostBytes(src Buf, dt capture.DType) ([]byte, bool, error) {
	if b.refuse || (dt != capture.BF16 && dt != capture.F32) {
		return nil, false, nil
	}
	host := make([]float32, src.Len())
	if err := b.Download(host, src); err != nil {
		return nil, false, err
	}
	out := make([]byte, dt.Size()*len(host))
	for i, x := range host {
		if dt == capture.BF16 {
			v := fp.F32ToBF16(x)
			out[2*i], out[2*i+1] = byte(v), byte(v>>8)
		} else {
			u := math.Float32bits(x)
			out[4*i], out[4*i+1], out[4*i+2], out[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
		}
	}
	return out, true, nil
}

func (b fpCPU) FingerprintRows(dst []uint64, src Buf, rows, width int, dt capture.DType) (bool, error) {
	data, ok, err := b.hostBytes(src, dt)
	if !ok || err != nil {
		return false, err
	}
	row := width * dt.Size()
	for r := range rows {
		dst[r] = capture.Fingerprint(data[r*row : (r+1)*row])
	}
	b.fps.Add(1)
	return true, nil
}

type fpCPUCopy struct {
	ring   *ringAlloc
	data   []byte
	off    int64
	landed chan struct{}
}

func (p *fpCPUCopy) Wait() ([]byte, error) { <-p.landed; return p.data, nil }
func (p *fpCPUCopy) Release()              { p.ring.give(p.off) }

func (b fpCPU) StartDownload(src Buf, dt capture.DType) (PendingDownload, bool, error) {
	data, ok, err := b.hostBytes(src, dt)
	if !ok || err != nil || int64(len(data)) > b.ring.size || len(data) == 0 {
		return nil, false, err
	}
	off, err := b.ring.take(int64(len(data)))
	if err != nil {
		return nil, false, err
	}
	p := &fpCPUCopy{ring: b.ring, data: b.buf[off : off+int64(len(data))], off: off, landed: make(chan struct{})}
	go func() { // the "copy": lands later, into the ring's bytes
		time.Sleep(time.Duration(len(data)%7) * 100 * time.Microsecond)
		copy(p.data, data)
		close(p.landed)
	}()
	b.copies.Add(1)
	return p, true, nil
}

// TestRecorderDevicePaths: a backend that fingerprints rows itself (RowFingerprinter) and copies full ops
// asynchronously through a bounded ring (AsyncDownloader), and one that declines both, record the plain CPU
// backend's capture tensor for tensor, bit for bit, at TP 1 and 2 (sharded ops go in full), in full and as
// fingerprints; a ring smaller than the largest op makes that op take the synchronous path beside the others.
func TestRecorderDevicePaths(t *testing.T) {
	m := NewRandom(DemoConfig(), 3)
	seqs := [][]int32{{1, 5, 9, 33, 2, 7}, {4, 4, 100, 8}}
	ctx := context.Background()
	for _, tp := range []int{1, 2} {
		for _, fps := range []bool{false, true} {
			run := func(name string, f BackendFactory) string {
				dir := filepath.Join(t.TempDir(), name)
				o := RunOptions{TP: tp, CaptureDir: dir, Backend: f}
				if fps {
					o.Fingerprints = func(op string) bool { return op != OpEmbed }
				}
				if _, err := m.Train(ctx, seqs, TrainOptions{RunOptions: o}); err != nil {
					t.Fatal(err)
				}
				return dir
			}
			want := run("cpu", nil)
			for _, refuse := range []bool{false, true} {
				var nfp, ncopy atomic.Int64
				got := run("device", func(int) (Backend, error) {
					const size = 16 << 10 // bytes: a few ops' rows (wrapping many times a run), not the logits' 20 KB
					return fpCPU{CPU: NewCPU(), refuse: refuse, ring: newRingAlloc(size), buf: make([]byte, size), fps: &nfp, copies: &ncopy}, nil
				})
				what := fmt.Sprintf("TP %d, fingerprints %v, refused %v", tp, fps, refuse)
				sameCaptures(t, what, got, want)
				if !refuse && ((nfp.Load() == 0) == fps || ncopy.Load() == 0) {
					t.Fatalf("%s: %d fingerprint calls, %d async copies", what, nfp.Load(), ncopy.Load())
				}
			}
		}
	}
}

// TestRingAlloc: regions come FIFO, wrap to the start when the end is too short, wait until the oldest are
// given back, and never overlap a live one, with a producer and a consumer on two goroutines.
func TestRingAlloc(t *testing.T) {
	r := newRingAlloc(10)
	for _, c := range []struct{ n, off int64 }{{4, 0}, {4, 4}} {
		if off, err := r.take(c.n); err != nil || off != c.off {
			t.Fatalf("take %d: %d %v, want %d", c.n, off, err, c.off)
		}
	}
	got := make(chan int64)
	go func() { off, _ := r.take(4); got <- off }()
	select {
	case off := <-got:
		t.Fatalf("a 4-byte region at %d with 2 bytes free", off)
	case <-time.After(20 * time.Millisecond):
	}
	r.give(4) // out of order: nothing reusable until 0 is given back too
	select {
	case off := <-got:
		t.Fatalf("a region at %d while [0, 4) is live", off)
	case <-time.After(20 * time.Millisecond):
	}
	r.give(0)
	if off := <-got; off != 0 && off != 8 { // [8, 10) is too short: the start
		t.Fatalf("after both were given back: %d", off)
	}
	if _, err := r.take(11); err == nil {
		t.Fatal("a region larger than the ring")
	}

	// stress: the consumer checks that no two live regions overlap
	const size = 1000
	r = newRingAlloc(size)
	var mu sync.Mutex
	owner := make([]int, size)
	q := make(chan [3]int64, 64)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for it := range q {
			mu.Lock()
			for i := it[0]; i < it[0]+it[1]; i++ {
				if owner[i] != int(it[2]) {
					t.Errorf("byte %d of region %d taken by %d", i, it[2], owner[i])
				}
				owner[i] = 0
			}
			mu.Unlock()
			r.give(it[0])
		}
	}()
	rnd := rand.New(rand.NewPCG(1, 2))
	for id := int64(1); id <= 5000; id++ {
		n := 1 + rnd.Int64N(size/3)
		off, err := r.take(n)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		for i := off; i < off+n; i++ {
			if owner[i] != 0 {
				t.Fatalf("region %d [%d, %d) overlaps live region %d at %d", id, off, off+n, owner[i], i)
			}
			owner[i] = int(id)
		}
		mu.Unlock()
		q <- [3]int64{off, n, id}
	}
	close(q)
	wg.Wait()
}
