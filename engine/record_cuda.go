package engine

import (
	"fmt"
	"time"
	"unsafe"

	"bitalign/capture"
	"bitalign/cuda"
	"bitalign/kernels"
	cudakernels "bitalign/kernels/cuda"
)

// The recorder's two device paths on the CUDA backend: fingerprints computed on the GPU (8 bytes a row come
// back) and full copies through page-locked memory on a side stream (the forward does not wait for them).

// pinnedRingBytes is the page-locked host buffer (and the device staging buffer of the same size) that a CUDA
// backend's full recordings go through: at most this many bytes of copied rows are in flight or waiting for the
// writer; an op's rows larger than that take the synchronous path.
const pinnedRingBytes = 256 << 20

// recordBytes is the size of src's values encoded as dt on the device (bf16 narrowed by narrow_bf16, f32 as it
// is), and whether the device can produce that encoding.
func (b *CUDA) recordBytes(src Buf, dt capture.DType) (int64, bool) {
	if weightDType(src) != kernels.F32 { // a weight buffer of 16-bit bits, not float32 values
		return 0, false
	}
	switch dt {
	case capture.BF16:
		return 2 * int64(src.Len()), b.dev.k.HasNarrowBF16()
	case capture.F32:
		return 4 * int64(src.Len()), true
	}
	return 0, false
}

// FingerprintRows: one launch of fingerprint_rows over the op's rows (narrowed to bf16 bits first when dt is
// bf16, into the DownloadBF16 buffer), then rows × 8 bytes copied back.
func (b *CUDA) FingerprintRows(dst []uint64, src Buf, rows, width int, dt capture.DType) (bool, error) {
	if b.failure() != nil {
		return false, b.failure()
	}
	bytes, ok := b.recordBytes(src, dt)
	if !ok || b.fpUnavailable {
		return false, nil
	}
	if len(dst) != rows || rows*width != src.Len() {
		return false, fmt.Errorf("engine: %s: fingerprints of %d rows × %d into %d slots of a %d-element buffer", b.name, rows, width, len(dst), src.Len())
	}
	if rows == 0 {
		return true, nil
	}
	b.do(func(c *cuda.Ctx, k *cudakernels.Kernels) error {
		if b.fp == nil {
			f, err := k.NewFingerprinter()
			if err != nil { // PTX without fingerprint_rows: the host fingerprints
				b.fpUnavailable = true
				return nil
			}
			b.fp = f
		}
		p := cudaPtr(src)
		if dt == capture.BF16 {
			if err := cudaGrow(c, &b.nar, &b.narN, bytes); err != nil {
				return err
			}
			if err := k.NarrowBF16(c, b.nar, p, src.Len()); err != nil {
				return err
			}
			p = b.nar
		}
		if err := cudaGrow(c, &b.fpOut, &b.fpOutN, 8*int64(rows)); err != nil {
			return err
		}
		rowBytes := bytes / int64(rows)
		if err := b.fp.Rows(c, b.fpOut, []cudakernels.FingerprintSet{{Ptr: p, Stride: rowBytes, Rows: int64(rows), RowBytes: rowBytes}}); err != nil {
			return err
		}
		return cuda.Download(c, dst, b.fpOut) // synchronous: after the kernel on the default stream
	})
	if b.failure() != nil {
		return false, b.failure()
	}
	return !b.fpUnavailable, nil
}

// copyRing is a CUDA backend's page-locked host buffer with its device staging twin and a non-blocking copy
// stream. A full copy is: the op's rows narrowed (bf16) or copied (f32) into the staging region on the default
// stream, an event, the side stream waiting for it and copying the region to the same offset of the host
// buffer, an event again; the forward's next kernels never wait for the side stream (the staging region is
// reused only after the writer has seen the copy complete and released it).
type copyRing struct {
	alloc  *ringAlloc
	host   []byte
	dev    cuda.Ptr
	stream *cuda.Stream
	events []*cuda.Event // free events
}

// pendingCopy is one copy in flight through the ring (PendingDownload).
type pendingCopy struct {
	b      *CUDA
	ring   *copyRing
	off, n int64
	ev     *cuda.Event
	done   bool
}

// ringSize is the ring's size: pinnedRingBytes unless a test set ringBytes.
func (b *CUDA) ringSize() int64 {
	if b.ringBytes > 0 {
		return b.ringBytes
	}
	return pinnedRingBytes
}

// initRing allocates the ring on first use; an allocation that fails leaves the synchronous path (ringFailed).
func (b *CUDA) initRing(c *cuda.Ctx) error {
	if b.ring != nil || b.ringFailed {
		return nil
	}
	st, err := c.NewStreamFlags(cuda.StreamNonBlocking)
	if err != nil {
		b.ringFailed = true
		return nil
	}
	size := b.ringSize()
	host, err := c.HostAlloc(size)
	if err != nil {
		c.DestroyStream(st) //nolint:errcheck // falling back
		b.ringFailed = true
		return nil
	}
	dev, err := c.Alloc(size)
	if err != nil {
		c.FreeHost(host)    //nolint:errcheck // falling back
		c.DestroyStream(st) //nolint:errcheck
		b.ringFailed = true
		return nil
	}
	b.ring = &copyRing{alloc: newRingAlloc(size), host: host, dev: dev, stream: st}
	return nil
}

// StartDownload queues src's copy through the ring (waiting, off the device thread, while the ring is full).
func (b *CUDA) StartDownload(src Buf, dt capture.DType) (PendingDownload, bool, error) {
	if b.failure() != nil {
		return nil, false, b.failure()
	}
	bytes, ok := b.recordBytes(src, dt)
	if !ok || bytes == 0 || bytes > b.ringSize() {
		return nil, false, nil
	}
	b.do(func(c *cuda.Ctx, _ *cudakernels.Kernels) error { return b.initRing(c) })
	if b.failure() != nil || b.ring == nil {
		return nil, false, b.failure()
	}
	ring := b.ring
	off, err := ring.alloc.take(bytes) // the writer frees regions: never wait on the device thread
	if err != nil {
		return nil, false, err
	}
	p := &pendingCopy{b: b, ring: ring, off: off, n: bytes}
	b.do(func(c *cuda.Ctx, k *cudakernels.Kernels) error {
		if n := len(ring.events); n > 0 {
			p.ev, ring.events = ring.events[n-1], ring.events[:n-1]
		} else {
			ev, err := c.NewEvent()
			if err != nil {
				return err
			}
			p.ev = ev
		}
		stage := ring.dev.Add(off)
		if dt == capture.BF16 {
			if err := k.NarrowBF16(c, stage, cudaPtr(src), src.Len()); err != nil {
				return err
			}
		} else if err := c.CopyDtoDAsync(stage, cudaPtr(src), bytes, nil); err != nil {
			return err
		}
		if err := c.Record(p.ev, nil); err != nil { // the staging region is written
			return err
		}
		if err := c.WaitEvent(ring.stream, p.ev); err != nil {
			return err
		}
		if err := c.CopyDtoHAsync(unsafe.Pointer(&ring.host[off]), stage, bytes, ring.stream); err != nil {
			return err
		}
		return c.Record(p.ev, ring.stream) // the host region is written
	})
	if b.failure() != nil {
		p.Release()
		return nil, false, b.failure()
	}
	return p, true, nil
}

// Wait polls the copy's event (a trip to the device thread each time, so the forward's ops keep being queued
// in between) until it has completed.
func (p *pendingCopy) Wait() ([]byte, error) {
	for sleep := time.Duration(0); !p.done; sleep = min(2*sleep+10*time.Microsecond, time.Millisecond) {
		if sleep > 0 {
			time.Sleep(sleep)
		}
		err := p.b.dev.d.Do(func(c *cuda.Ctx) (err error) { p.done, err = c.EventDone(p.ev); return err })
		if err != nil {
			return nil, fmt.Errorf("engine: %s: a recorded copy: %w", p.b.name, err)
		}
	}
	return p.ring.host[p.off : p.off+p.n], nil
}

// Release returns the region (and its event, once the copy is known to be complete or the run is over).
func (p *pendingCopy) Release() {
	if p.ev != nil && p.done {
		p.b.dev.d.Do(func(*cuda.Ctx) error { p.ring.events = append(p.ring.events, p.ev); return nil }) //nolint:errcheck
	}
	p.ring.alloc.give(p.off)
}

// releaseRing frees the ring and the fingerprint tables once the device is idle (group.close, after the writers).
func (b *CUDA) releaseRing(c *cuda.Ctx) {
	if b.ring == nil && b.fp == nil && b.fpOut == 0 {
		return
	}
	c.Synchronize() //nolint:errcheck // freeing after an error too
	if r := b.ring; r != nil {
		c.FreeHost(r.host)        //nolint:errcheck
		c.Free(r.dev)             //nolint:errcheck
		c.DestroyStream(r.stream) //nolint:errcheck
		for _, e := range r.events {
			c.DestroyEvent(e) //nolint:errcheck
		}
		b.ring = nil
	}
	if b.fp != nil {
		b.fp.Close(c) //nolint:errcheck
		b.fp = nil
	}
	if b.fpOut != 0 {
		c.Free(b.fpOut) //nolint:errcheck
		b.fpOut, b.fpOutN = 0, 0
	}
}

var (
	_ RowFingerprinter = (*CUDA)(nil)
	_ AsyncDownloader  = (*CUDA)(nil)
)
