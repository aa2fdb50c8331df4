package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"
)

// Device attributes (CUdevice_attribute) read by Open.
const (
	AttrMultiprocessorCount       = 16
	AttrL2CacheSize               = 38
	AttrUnifiedAddressing         = 41
	AttrComputeCapabilityMajor    = 75
	AttrComputeCapabilityMinor    = 76
	AttrMaxSharedMemoryPerBlockOp = 97 // opt-in maximum, bytes
)

// Device is one GPU with its primary context and its own OS thread. Methods are safe for concurrent use;
// calls are served one at a time in arrival order.
type Device struct {
	ordinal  int
	dev      int32   // CUdevice
	ctx      uintptr // CUcontext (primary)
	lib      *library
	name     string
	totalMem int64
	ccMajor  int
	ccMinor  int
	sms      int
	smemOpt  int

	q    *queue        // the device thread's inbox (queue.go)
	done chan struct{} // closed once the thread has released the context
}

// Ctx is the device's thread. It is handed to the callback of Device.Do and is valid only during that
// callback; its methods call the driver directly (no queue).
type Ctx struct {
	d *Device
}

// Device returns the device this thread belongs to.
func (c *Ctx) Device() *Device { return c.d }

// ErrClosed is returned by calls on a closed Device.
var ErrClosed = errors.New("cuda: device closed")

// Open retains device ordinal's primary context on a new OS-locked goroutine. Errors wrap ErrUnavailable
// when there is no usable driver or no such device.
func Open(ordinal int) (*Device, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	n, err := DeviceCount()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", err, ErrUnavailable)
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("cuda: no device %d (this machine has %d): %w", ordinal, n, ErrUnavailable)
	}
	d := &Device{ordinal: ordinal, lib: theLib, q: newQueue(), done: make(chan struct{})}
	started := make(chan error)
	go d.loop(started)
	if err := <-started; err != nil {
		return nil, err
	}
	return d, nil
}

// loop is the device thread: it locks itself to its OS thread, makes the primary context current and serves
// the queue until Close.
func (d *Device) loop(started chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := d.setup(); err != nil {
		started <- err
		return
	}
	started <- nil
	d.q.serve(&Ctx{d: d})
	d.lib.call(sPrimaryCtxRelease, uintptr(d.dev)) //nolint:errcheck // nothing left to report to
	close(d.done)
}

func (d *Device) setup() error {
	l := d.lib
	if err := l.call(sDeviceGet, uintptr(unsafe.Pointer(&d.dev)), uintptr(d.ordinal)); err != nil {
		return fmt.Errorf("%w: %w", err, ErrUnavailable)
	}
	if err := l.call(sPrimaryCtxRetain, uintptr(unsafe.Pointer(&d.ctx)), uintptr(d.dev)); err != nil {
		return fmt.Errorf("%w: %w", err, ErrUnavailable)
	}
	if err := l.call(sCtxSetCurrent, d.ctx); err != nil {
		l.call(sPrimaryCtxRelease, uintptr(d.dev)) //nolint:errcheck
		return err
	}
	var name [256]byte
	if err := l.call(sDeviceGetName, uintptr(unsafe.Pointer(&name[0])), uintptr(len(name)), uintptr(d.dev)); err != nil {
		return err
	}
	d.name = cString(unsafe.Pointer(&name[0]))
	var mem uint64
	if err := l.call(sDeviceTotalMem, uintptr(unsafe.Pointer(&mem)), uintptr(d.dev)); err != nil {
		return err
	}
	d.totalMem = int64(mem)
	for _, a := range []struct {
		attr int
		dst  *int
	}{{AttrComputeCapabilityMajor, &d.ccMajor}, {AttrComputeCapabilityMinor, &d.ccMinor},
		{AttrMultiprocessorCount, &d.sms}, {AttrMaxSharedMemoryPerBlockOp, &d.smemOpt}} {
		v, err := d.attribute(a.attr)
		if err != nil {
			return err
		}
		*a.dst = v
	}
	return nil
}

func (d *Device) attribute(attr int) (int, error) {
	var v int32
	if err := d.lib.call(sDeviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(attr), uintptr(d.dev)); err != nil {
		return 0, err
	}
	return int(v), nil
}

// Do runs f on the device thread, after everything posted or done before it, and returns its error. Inside f
// use only c (calling d's own methods from f would wait for f itself). Use Do to batch many calls into one
// trip through the queue.
func (d *Device) Do(f func(c *Ctx) error) error { return d.q.do(f) }

// Post queues f for the device thread and returns without waiting: the caller goes on while the thread
// launches f's work behind what was sent before (tasks run in the order they were posted or done). f must not
// read host memory the caller may change after Post returns; if f fails (or panics), onErr gets the error on
// the device thread. A later Do runs after f. ErrClosed if the device is closed.
func (d *Device) Post(f func(c *Ctx) error, onErr func(error)) error { return d.q.post(f, onErr) }

// Close synchronises, releases the primary context and stops the device thread. Memory not freed is
// reclaimed by the driver with the context (when no other user holds it). Close is idempotent.
func (d *Device) Close() error {
	err := d.q.close(func(c *Ctx) error { return c.Synchronize() })
	<-d.done
	return err
}

// Ordinal is the device's index. Name, TotalMem, ComputeCapability, SMCount and MaxSharedMemoryPerBlock are
// read once by Open.
func (d *Device) Ordinal() int                  { return d.ordinal }
func (d *Device) Name() string                  { return d.name }
func (d *Device) TotalMem() int64               { return d.totalMem }
func (d *Device) ComputeCapability() (int, int) { return d.ccMajor, d.ccMinor }
func (d *Device) SMCount() int                  { return d.sms }
func (d *Device) MaxSharedMemoryPerBlock() int  { return d.smemOpt }

// String describes the device, e.g. "cuda:0 NVIDIA H200 (sm_90, 132 SMs, 140 GiB)".
func (d *Device) String() string {
	return fmt.Sprintf("cuda:%d %s (sm_%d%d, %d SMs, %d GiB)", d.ordinal, d.name, d.ccMajor, d.ccMinor, d.sms, d.totalMem>>30)
}

// Attribute reads a CUdevice_attribute.
func (d *Device) Attribute(attr int) (v int, err error) {
	err = d.Do(func(c *Ctx) error { v, err = d.attribute(attr); return err })
	return v, err
}

// Synchronize waits for all work on the device (cuCtxSynchronize); asynchronous kernel faults surface here.
func (c *Ctx) Synchronize() error { return c.d.lib.call(sCtxSynchronize) }

// Synchronize waits for all work on the device.
func (d *Device) Synchronize() error { return d.Do(func(c *Ctx) error { return c.Synchronize() }) }

// MemInfo returns the free and total device memory in bytes.
func (c *Ctx) MemInfo() (free, total int64, err error) {
	var f, t uint64
	err = c.d.lib.call(sMemGetInfo, uintptr(unsafe.Pointer(&f)), uintptr(unsafe.Pointer(&t)))
	return int64(f), int64(t), err
}

// CanAccessPeer reports whether d can map peer's memory (cuDeviceCanAccessPeer).
func (d *Device) CanAccessPeer(peer *Device) (bool, error) {
	var ok int32
	err := d.Do(func(c *Ctx) error {
		return d.lib.call(sDeviceCanAccessPeer, uintptr(unsafe.Pointer(&ok)), uintptr(d.dev), uintptr(peer.dev))
	})
	return ok != 0, err
}

// EnablePeerAccess lets kernels and copies on d read and write peer's memory (cuCtxEnablePeerAccess on d's
// context). Enabling twice is not an error.
func (d *Device) EnablePeerAccess(peer *Device) error {
	return d.Do(func(c *Ctx) error {
		err := d.lib.call(sCtxEnablePeerAccess, peer.ctx, 0)
		var e *Error
		if errors.As(err, &e) && e.Code == 704 { // CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
			return nil
		}
		return err
	})
}
