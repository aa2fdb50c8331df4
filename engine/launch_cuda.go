package engine

import (
	"os"
	"sync"
	"unsafe"

	"bitalign/cuda"
	cudakernels "bitalign/kernels/cuda"
)

// How the CUDA backend keeps the GPU busy. An op (a kernel, a copy) is posted to the device thread and the
// forward goes on at once: the thread launches it on the default stream behind the ops before it, so the host
// runs ahead of the GPU instead of waiting a round trip per op (issue 14's end-to-end forward was host-bound:
// ~1 000 round trips a forward). Nothing an op launches synchronises the stream: the small host arrays go
// through a page-locked ring (argRing) and freed buffers are kept for the next allocation of their size
// (memCache), so neither a staging copy nor cuMemAlloc/cuMemFree waits for the GPU. Ordering is the stream's:
// every op, copy and memset of a device goes to its default stream in the order the ops were posted, so a
// buffer freed by one op and handed to the next allocation is written only after the ops that read it.

// launchBlocking (BITALIGN_CUDA_LAUNCH_BLOCKING=1) makes every op wait for its launch on the device thread,
// as before the queue: for narrowing down a fault (the kernel's error then belongs to the op that was called).
var launchBlocking = os.Getenv("BITALIGN_CUDA_LAUNCH_BLOCKING") == "1"

// launch posts f to the device thread (launchBlocking: runs it and waits), unless an error is pending. f must
// capture device pointers and copies of host arrays, never a Buf (Free may hand its memory on before f runs)
// or a host slice the caller keeps using. After a failure the ops still queued do nothing (sticky errors).
func (b *CUDA) launch(f func(c *cuda.Ctx, k *cudakernels.Kernels) error) {
	if b.failure() != nil {
		return
	}
	if launchBlocking {
		b.do(f)
		return
	}
	err := b.dev.d.Post(func(c *cuda.Ctx) error {
		if b.failure() != nil {
			return nil
		}
		return f(c, b.dev.k)
	}, b.fail)
	b.fail(err)
}

// memCache holds a device's freed buffers by size for the next Alloc of that size (a forward allocates the
// same scratch, KV caches and logits every time), up to max bytes; a buffer that does not fit is freed. It is
// used from the backends' goroutines (take, put) and from the device thread (trim), so it has its own lock.
type memCache struct {
	mu    sync.Mutex
	free  map[int64][]cuda.Ptr
	bytes int64
	max   int64
}

// newMemCache keeps up to an eighth of the device's memory.
func newMemCache(total int64) memCache {
	return memCache{free: map[int64][]cuda.Ptr{}, max: total / 8}
}

// take returns a cached buffer of exactly bytes, if there is one.
func (m *memCache) take(bytes int64) (cuda.Ptr, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.free[bytes]
	if len(l) == 0 {
		return 0, false
	}
	p := l[len(l)-1]
	m.free[bytes] = l[:len(l)-1]
	m.bytes -= bytes
	return p, true
}

// put keeps p for reuse; false (the cache is full) means the caller frees it.
func (m *memCache) put(p cuda.Ptr, bytes int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.bytes+bytes > m.max {
		return false
	}
	m.free[bytes] = append(m.free[bytes], p)
	m.bytes += bytes
	return true
}

// trim frees every cached buffer (on the device thread: before retrying an allocation that ran out of memory,
// and when a run is over). cuMemFree waits for the kernels that may still use them.
func (m *memCache) trim(c *cuda.Ctx) error {
	m.mu.Lock()
	free := m.free
	m.free, m.bytes = map[int64][]cuda.Ptr{}, 0
	m.mu.Unlock()
	var first error
	for _, l := range free {
		for _, p := range l {
			if err := c.Free(p); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// allocDevice is cuMemAlloc, retried once with the cache emptied when the device is out of memory.
func (b *CUDA) allocDevice(c *cuda.Ctx, bytes int64) (cuda.Ptr, error) {
	p, err := c.Alloc(bytes)
	if cuda.IsOutOfMemory(err) {
		if terr := b.dev.mem.trim(c); terr != nil {
			return 0, terr
		}
		p, err = c.Alloc(bytes)
	}
	return p, err
}

// argRingBytes is the page-locked ring the ops' host arrays go through (a forward of 4 × 256 tokens stages
// about 170 KB: positions for RoPE and attention, ids, targets).
const argRingBytes = 4 << 20

// argRing stages an op's small host array: copied into the next free region of a page-locked buffer, then to
// the same region of a device buffer by an asynchronous copy on the default stream, ahead of the kernel that
// reads it. When the ring is full the device thread synchronises once (every earlier copy and kernel is done
// with its region) and starts again at the front. Without page-locked memory (or for an array larger than the
// ring) the array goes through one device buffer by a synchronous copy, as before the ring. Device thread only.
type argRing struct {
	host   []byte
	dev    cuda.Ptr
	off    int64
	failed bool     // page-locked memory unavailable
	one    cuda.Ptr // the synchronous path's buffer
	oneN   int64
}

// cudaStage puts host (a copy the caller does not change) on the device for the next kernel and returns its
// address there.
func cudaStage[T cuda.Scalar](b *CUDA, c *cuda.Ctx, host []T) (cuda.Ptr, error) {
	var z T
	bytes := int64(len(host)) * int64(unsafe.Sizeof(z))
	r := &b.args
	if r.host == nil && !r.failed {
		r.init(c)
	}
	if r.failed || bytes > argRingBytes {
		if err := cudaGrow(c, &r.one, &r.oneN, bytes); err != nil {
			return 0, err
		}
		return r.one, cuda.Upload(c, r.one, host)
	}
	if bytes == 0 {
		return r.dev, nil
	}
	if r.off+bytes > argRingBytes {
		if err := c.Synchronize(); err != nil {
			return 0, err
		}
		r.off = 0
	}
	off := r.off
	copy(r.host[off:off+bytes], unsafe.Slice((*byte)(unsafe.Pointer(&host[0])), bytes))
	if err := c.CopyHtoDAsync(r.dev.Add(off), unsafe.Pointer(&r.host[off]), bytes, nil); err != nil {
		return 0, err
	}
	r.off = off + (bytes+255)&^255 // each array 256-byte aligned, as cuMemAlloc's
	return r.dev.Add(off), nil
}

func (r *argRing) init(c *cuda.Ctx) {
	host, err := c.HostAlloc(argRingBytes)
	if err != nil {
		r.failed = true
		return
	}
	dev, err := c.Alloc(argRingBytes)
	if err != nil {
		c.FreeHost(host) //nolint:errcheck // falling back
		r.failed = true
		return
	}
	r.host, r.dev = host, dev
}

// release frees the ring once the device is idle (releaseScratch).
func (r *argRing) release(c *cuda.Ctx) {
	if r.host != nil || r.one != 0 {
		c.Synchronize() //nolint:errcheck // freeing after an error too
	}
	if r.host != nil {
		c.FreeHost(r.host) //nolint:errcheck
		c.Free(r.dev)      //nolint:errcheck
	}
	if r.one != 0 {
		c.Free(r.one) //nolint:errcheck
	}
	*r = argRing{}
}
