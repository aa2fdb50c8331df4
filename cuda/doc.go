// Package cuda is a thin binding of the CUDA driver API, loaded at run time with purego (dlopen of
// libcuda.so.1), so that a CGO_ENABLED=0 binary runs on machines with and without a GPU.
//
// Only what bitalign uses is bound, with the _v2 symbol names where cuda.h maps them. Each Device owns the
// device's primary context and one goroutine locked to its OS thread: every driver call for that device runs
// there, fed by a queue, because a CUDA context is current per OS thread (calls from another thread fail with
// CUDA_ERROR_INVALID_CONTEXT). Device methods may be called from any goroutine; Device.Do runs a batch of
// calls on the device thread in one trip through the queue.
//
// No driver, no device or a driver older than MinDriverVersion gives an error wrapping ErrUnavailable, so
// callers can fall back to the CPU. Every failed driver call becomes an *Error naming the call and the CUDA
// error (name, number and description).
//
// This package never creates multicast objects and never changes device settings.
package cuda
