package cuda

import (
	"fmt"
	"runtime"
	"unsafe"
)

// Ptr is a device address (CUdeviceptr). With unified addressing (every 64-bit Linux device) it is unique
// across devices, so kernels and copies can use a peer's Ptr once peer access is enabled.
type Ptr uint64

// Add offsets p by bytes.
func (p Ptr) Add(bytes int64) Ptr { return p + Ptr(bytes) }

// Scalar is an element type that crosses between host slices and device memory.
type Scalar interface {
	~float32 | ~float64 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~uint16 | ~int16 | ~uint8 | ~int8
}

// Alloc allocates bytes of device memory (cuMemAlloc_v2). Out of memory is an *Error (IsOutOfMemory).
func (c *Ctx) Alloc(bytes int64) (Ptr, error) {
	if bytes <= 0 {
		return 0, fmt.Errorf("cuda: Alloc of %d bytes", bytes)
	}
	var p Ptr
	err := c.d.lib.call(sMemAlloc, uintptr(unsafe.Pointer(&p)), uintptr(bytes))
	return p, err
}

// Free releases memory from Alloc; Free(0) does nothing.
func (c *Ctx) Free(p Ptr) error {
	if p == 0 {
		return nil
	}
	return c.d.lib.call(sMemFree, uintptr(p))
}

// CopyHtoD copies bytes from host memory src to dst (synchronous).
func (c *Ctx) CopyHtoD(dst Ptr, src unsafe.Pointer, bytes int64) error {
	if bytes == 0 {
		return nil
	}
	return c.d.lib.call(sMemcpyHtoD, uintptr(dst), uintptr(src), uintptr(bytes))
}

// CopyDtoH copies bytes from src to host memory dst (synchronous).
func (c *Ctx) CopyDtoH(dst unsafe.Pointer, src Ptr, bytes int64) error {
	if bytes == 0 {
		return nil
	}
	return c.d.lib.call(sMemcpyDtoH, uintptr(dst), uintptr(src), uintptr(bytes))
}

// CopyDtoD copies bytes between device buffers (a peer's too, once peer access is enabled).
func (c *Ctx) CopyDtoD(dst, src Ptr, bytes int64) error {
	if bytes == 0 {
		return nil
	}
	return c.d.lib.call(sMemcpyDtoD, uintptr(dst), uintptr(src), uintptr(bytes))
}

// CopyHtoDAsync copies on stream s (nil: the default stream). src must stay untouched until the stream
// reaches the copy; it is truly asynchronous only for page-locked memory (HostAlloc).
func (c *Ctx) CopyHtoDAsync(dst Ptr, src unsafe.Pointer, bytes int64, s *Stream) error {
	return c.d.lib.call(sMemcpyHtoDAsync, uintptr(dst), uintptr(src), uintptr(bytes), s.handle())
}

// CopyDtoHAsync copies on stream s (nil: the default stream); dst must stay alive until the stream syncs.
func (c *Ctx) CopyDtoHAsync(dst unsafe.Pointer, src Ptr, bytes int64, s *Stream) error {
	return c.d.lib.call(sMemcpyDtoHAsync, uintptr(dst), uintptr(src), uintptr(bytes), s.handle())
}

// CopyDtoDAsync copies between device buffers on stream s (nil: the default stream).
func (c *Ctx) CopyDtoDAsync(dst, src Ptr, bytes int64, s *Stream) error {
	return c.d.lib.call(sMemcpyDtoDAsync, uintptr(dst), uintptr(src), uintptr(bytes), s.handle())
}

// Memset8 sets bytes bytes at p to v.
func (c *Ctx) Memset8(p Ptr, v byte, bytes int64) error {
	return c.d.lib.call(sMemsetD8, uintptr(p), uintptr(v), uintptr(bytes))
}

// Memset8Async sets bytes bytes at p to v on stream s (nil: the default stream).
func (c *Ctx) Memset8Async(p Ptr, v byte, bytes int64, s *Stream) error {
	return c.d.lib.call(sMemsetD8Async, uintptr(p), uintptr(v), uintptr(bytes), s.handle())
}

// Memset32 sets n 32-bit words at p to v.
func (c *Ctx) Memset32(p Ptr, v uint32, n int64) error {
	return c.d.lib.call(sMemsetD32, uintptr(p), uintptr(v), uintptr(n))
}

// Memset32Async sets n 32-bit words at p to v on stream s (nil: the default stream).
func (c *Ctx) Memset32Async(p Ptr, v uint32, n int64, s *Stream) error {
	return c.d.lib.call(sMemsetD32Async, uintptr(p), uintptr(v), uintptr(n), s.handle())
}

// HostAlloc allocates page-locked host memory, mapped for the device's DMA; free it with FreeHost.
func (c *Ctx) HostAlloc(bytes int64) ([]byte, error) {
	var p unsafe.Pointer
	if err := c.d.lib.call(sMemHostAlloc, uintptr(unsafe.Pointer(&p)), uintptr(bytes), 0); err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), bytes), nil
}

// FreeHost releases memory from HostAlloc.
func (c *Ctx) FreeHost(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return c.d.lib.call(sMemFreeHost, uintptr(unsafe.Pointer(&b[0])))
}

// Upload copies src into device memory at dst (synchronous).
func Upload[T Scalar](c *Ctx, dst Ptr, src []T) error {
	if len(src) == 0 {
		return nil
	}
	err := c.CopyHtoD(dst, unsafe.Pointer(&src[0]), int64(len(src))*int64(unsafe.Sizeof(src[0])))
	runtime.KeepAlive(src)
	return err
}

// Download copies device memory at src into dst (synchronous).
func Download[T Scalar](c *Ctx, dst []T, src Ptr) error {
	if len(dst) == 0 {
		return nil
	}
	err := c.CopyDtoH(unsafe.Pointer(&dst[0]), src, int64(len(dst))*int64(unsafe.Sizeof(dst[0])))
	runtime.KeepAlive(dst)
	return err
}

// Alloc allocates bytes of device memory.
func (d *Device) Alloc(bytes int64) (p Ptr, err error) {
	err = d.Do(func(c *Ctx) error { p, err = c.Alloc(bytes); return err })
	return p, err
}

// Free releases memory from Alloc.
func (d *Device) Free(p Ptr) error { return d.Do(func(c *Ctx) error { return c.Free(p) }) }

// Memset8 sets bytes bytes at p to v.
func (d *Device) Memset8(p Ptr, v byte, bytes int64) error {
	return d.Do(func(c *Ctx) error { return c.Memset8(p, v, bytes) })
}

// CopyDtoD copies bytes between device buffers.
func (d *Device) CopyDtoD(dst, src Ptr, bytes int64) error {
	return d.Do(func(c *Ctx) error { return c.CopyDtoD(dst, src, bytes) })
}

// MemInfo returns the free and total device memory in bytes.
func (d *Device) MemInfo() (free, total int64, err error) {
	err = d.Do(func(c *Ctx) error { free, total, err = c.MemInfo(); return err })
	return free, total, err
}

// UploadTo copies src into device memory at dst from any goroutine.
func UploadTo[T Scalar](d *Device, dst Ptr, src []T) error {
	return d.Do(func(c *Ctx) error { return Upload(c, dst, src) })
}

// DownloadFrom copies device memory at src into dst from any goroutine.
func DownloadFrom[T Scalar](d *Device, dst []T, src Ptr) error {
	return d.Do(func(c *Ctx) error { return Download(c, dst, src) })
}

// Buffer is a typed device allocation.
type Buffer[T Scalar] struct {
	Ptr Ptr
	Len int
}

// NewBuffer allocates n elements of T on d.
func NewBuffer[T Scalar](c *Ctx, n int) (Buffer[T], error) {
	var z T
	p, err := c.Alloc(int64(n) * int64(unsafe.Sizeof(z)))
	return Buffer[T]{Ptr: p, Len: n}, err
}

// Bytes is the buffer's size in bytes.
func (b Buffer[T]) Bytes() int64 {
	var z T
	return int64(b.Len) * int64(unsafe.Sizeof(z))
}
