package cuda

import (
	"errors"
	"unsafe"
)

// Stream is a CUstream; a nil *Stream is the default (legacy) stream.
type Stream struct{ h uintptr }

func (s *Stream) handle() uintptr {
	if s == nil {
		return 0
	}
	return s.h
}

// Stream creation flags.
const (
	StreamDefault     = 0 // ordered with the legacy default stream
	StreamNonBlocking = 1 // CU_STREAM_NON_BLOCKING: not ordered with the legacy default stream
)

// NewStream creates a stream with StreamDefault flags.
func (c *Ctx) NewStream() (*Stream, error) { return c.NewStreamFlags(StreamDefault) }

// NewStreamFlags creates a stream with the given flags (StreamDefault or StreamNonBlocking).
func (c *Ctx) NewStreamFlags(flags int) (*Stream, error) {
	s := &Stream{}
	if err := c.d.lib.call(sStreamCreate, uintptr(unsafe.Pointer(&s.h)), uintptr(flags)); err != nil {
		return nil, err
	}
	return s, nil
}

// StreamSync waits for the stream's work (cuStreamSynchronize).
func (c *Ctx) StreamSync(s *Stream) error { return c.d.lib.call(sStreamSynchronize, s.handle()) }

// StreamDone reports whether all work on s has completed (cuStreamQuery), without waiting.
func (c *Ctx) StreamDone(s *Stream) (bool, error) {
	err := c.d.lib.call(sStreamQuery, s.handle())
	var e *Error
	if errors.As(err, &e) && e.Code == 600 { // CUDA_ERROR_NOT_READY
		return false, nil
	}
	return err == nil, err
}

// DestroyStream releases s.
func (c *Ctx) DestroyStream(s *Stream) error {
	if s == nil {
		return nil
	}
	return c.d.lib.call(sStreamDestroy, s.h)
}

// WaitEvent makes stream s wait for event e (recorded on any stream, any device).
func (c *Ctx) WaitEvent(s *Stream, e *Event) error {
	return c.d.lib.call(sStreamWaitEvent, s.handle(), e.h, 0)
}

// Event is a CUevent (created with timing enabled).
type Event struct{ h uintptr }

// NewEvent creates an event.
func (c *Ctx) NewEvent() (*Event, error) {
	e := &Event{}
	if err := c.d.lib.call(sEventCreate, uintptr(unsafe.Pointer(&e.h)), 0); err != nil {
		return nil, err
	}
	return e, nil
}

// Record records e on stream s (nil: the default stream).
func (c *Ctx) Record(e *Event, s *Stream) error { return c.d.lib.call(sEventRecord, e.h, s.handle()) }

// EventSync waits for e.
func (c *Ctx) EventSync(e *Event) error { return c.d.lib.call(sEventSynchronize, e.h) }

// EventDone reports whether the work before e's last Record has completed (cuEventQuery), without waiting.
func (c *Ctx) EventDone(e *Event) (bool, error) {
	err := c.d.lib.call(sEventQuery, e.h)
	var ce *Error
	if errors.As(err, &ce) && ce.Code == 600 { // CUDA_ERROR_NOT_READY
		return false, nil
	}
	return err == nil, err
}

// Elapsed returns the milliseconds between two completed events.
func (c *Ctx) Elapsed(start, end *Event) (float32, error) {
	var ms float32
	err := c.d.lib.call(sEventElapsedTime, uintptr(unsafe.Pointer(&ms)), start.h, end.h)
	return ms, err
}

// DestroyEvent releases e.
func (c *Ctx) DestroyEvent(e *Event) error {
	if e == nil {
		return nil
	}
	return c.d.lib.call(sEventDestroy, e.h)
}
