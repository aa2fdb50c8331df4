package engine

import (
	"fmt"
	"runtime"
	"unsafe"

	"bitalign/cuda"
	"bitalign/kernels"
	cudakernels "bitalign/kernels/cuda"
)

// stageBytes is the size of each of the two pinned staging buffers a device's weight uploads go through.
const stageBytes = 16 << 20

// stager is a device's weight-upload path: two page-locked host buffers and a copy stream. While the DMA engine
// copies one buffer to the device, the host fills the other (reading the mapped checkpoint, widening when the
// kernels need float32), so reading and uploading overlap. Used on the device thread only.
type stager struct {
	bufs   [2][]byte
	events [2]*cuda.Event
	busy   [2]bool
	stream *cuda.Stream
	failed error // pinned memory unavailable: uploads go through synchronous copies
}

func (s *stager) init(c *cuda.Ctx) {
	if s.stream != nil || s.failed != nil {
		return
	}
	st, err := c.NewStreamFlags(cuda.StreamDefault) // ordered with the default stream the kernels run on
	if err != nil {
		s.failed = err
		return
	}
	for i := range s.bufs {
		if s.bufs[i], err = c.HostAlloc(stageBytes); err == nil {
			s.events[i], err = c.NewEvent()
		}
		if err != nil {
			s.failed = err
			return
		}
	}
	s.stream = st
}

// upload copies n elements of elem bytes to dst, fill(dst, off, cnt) writing elements [off, off+cnt) into a
// staging buffer; it returns when the copies are complete (so the next op, on any stream, sees the weight).
func (s *stager) upload(c *cuda.Ctx, dst cuda.Ptr, n, elem int, fill func(buf []byte, off, cnt int)) error {
	s.init(c)
	per := stageBytes / elem
	if s.failed != nil { // pageable memory: one synchronous copy per block
		tmp := make([]byte, min(n, per)*elem)
		for off := 0; off < n; off += per {
			cnt := min(per, n-off)
			fill(tmp[:cnt*elem], off, cnt)
			if err := c.CopyHtoD(dst.Add(int64(off*elem)), unsafe.Pointer(&tmp[0]), int64(cnt*elem)); err != nil {
				return err
			}
		}
		return nil
	}
	for i, off := 0, 0; off < n; i, off = i+1, off+per {
		slot := i % 2
		if s.busy[slot] { // the copy that last read this buffer must be done before it is refilled
			if err := c.EventSync(s.events[slot]); err != nil {
				return err
			}
		}
		cnt := min(per, n-off)
		b := s.bufs[slot][:cnt*elem]
		fill(b, off, cnt)
		if err := c.CopyHtoDAsync(dst.Add(int64(off*elem)), unsafe.Pointer(&b[0]), int64(cnt*elem), s.stream); err != nil {
			return err
		}
		if err := c.Record(s.events[slot], s.stream); err != nil {
			return err
		}
		s.busy[slot] = true
	}
	return c.StreamSync(s.stream)
}

// UploadWeights places w on the GPU in its stored dtype: a bf16 or f16 weight goes up as its bits when the
// loaded PTX has the kernels that read that dtype (cudakernels.HasWeights), a float32 one as its values, so
// device memory for it is its checkpoint size. A 16-bit weight with PTX that predates its kernels is widened
// (exactly) block by block into the staging buffer and held as float32. Either way the host never holds a
// float32 copy of the model.
func (b *CUDA) UploadWeights(w kernels.Weights) Buf {
	n := w.Len()
	buf := &cudaBuf{n: n, root: true}
	if n == 0 {
		return buf
	}
	b.do(func(c *cuda.Ctx, k *cudakernels.Kernels) error {
		if dt := w.DType(); dt != kernels.F32 && k.HasWeights(dt) {
			buf.w16 = dt
		}
		q, err := c.Alloc(int64(n) * buf.elem())
		if err != nil {
			return fmt.Errorf("alloc of %d weights: %w", n, err)
		}
		buf.p = q
		if buf.w16 != 0 || w.DType() == kernels.F32 { // as stored: a copy of the mapped bytes
			raw, elem := w.Raw(), int(buf.elem())
			return b.dev.stage.upload(c, q, n, elem, func(dst []byte, off, cnt int) { copy(dst, raw[elem*off:elem*(off+cnt)]) })
		}
		return b.dev.stage.upload(c, q, n, 4, func(dst []byte, off, cnt int) {
			w.Widen(unsafe.Slice((*float32)(unsafe.Pointer(&dst[0])), cnt), off)
		})
	})
	runtime.KeepAlive(w)
	return buf
}
