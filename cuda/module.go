package cuda

import (
	"fmt"
	"math"
	"runtime"
	"unsafe"
)

// Module is a loaded PTX or cubin image.
type Module struct {
	d *Device
	h uintptr
}

// Function is a kernel of a Module.
type Function struct {
	m    *Module
	h    uintptr
	Name string
}

// Dim3 is a grid or block size.
type Dim3 struct{ X, Y, Z int }

// LoadModule loads a PTX (NUL-terminated here) or cubin image; the driver JIT-compiles PTX for the device.
func (c *Ctx) LoadModule(image []byte) (*Module, error) {
	img := make([]byte, len(image)+1) // the driver reads PTX as a C string
	copy(img, image)
	m := &Module{d: c.d}
	err := c.d.lib.call(sModuleLoadData, uintptr(unsafe.Pointer(&m.h)), uintptr(unsafe.Pointer(&img[0])))
	runtime.KeepAlive(img)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// LoadModule loads a PTX or cubin image on d.
func (d *Device) LoadModule(image []byte) (m *Module, err error) {
	err = d.Do(func(c *Ctx) error { m, err = c.LoadModule(image); return err })
	return m, err
}

// Unload releases the module (call on its device's thread).
func (m *Module) Unload(c *Ctx) error { return c.d.lib.call(sModuleUnload, m.h) }

// Function looks up a kernel by its (extern "C") name, from any goroutine.
func (m *Module) Function(name string) (f *Function, err error) {
	err = m.d.Do(func(c *Ctx) error { f, err = c.Function(m, name); return err })
	return f, err
}

// Function looks up a kernel of m by its (extern "C") name.
func (c *Ctx) Function(m *Module, name string) (*Function, error) {
	f := &Function{m: m, Name: name}
	cname := append([]byte(name), 0)
	err := c.d.lib.call(sModuleGetFunction, uintptr(unsafe.Pointer(&f.h)), m.h, uintptr(unsafe.Pointer(&cname[0])))
	runtime.KeepAlive(cname)
	if err != nil {
		return nil, fmt.Errorf("%w (kernel %q)", err, name)
	}
	return f, nil
}

// SetMaxDynamicSharedMemory lets launches of f use up to bytes of dynamic shared memory (above 48 KiB
// needs this).
func (f *Function) SetMaxDynamicSharedMemory(c *Ctx, bytes int) error {
	const attrMaxDynamicSharedSizeBytes = 8 // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
	return c.d.lib.call(sFuncSetAttribute, f.h, attrMaxDynamicSharedSizeBytes, uintptr(bytes))
}

// Launch enqueues f on stream s (nil: the default stream). args are the kernel's parameters in order, each a
// Ptr, int32, uint32, int64, uint64, float32, float64, int (passed as a 32-bit int, range-checked) or []byte
// (a by-value parameter, e.g. a C struct, given as its exact bytes).
// Launch configuration errors are returned here; faults inside the kernel surface at the next
// synchronisation.
func (c *Ctx) Launch(f *Function, grid, block Dim3, sharedBytes int, s *Stream, args ...any) error {
	slots := make([]uint64, len(args))
	params := make([]unsafe.Pointer, len(args)+1)
	for i, a := range args {
		switch v := a.(type) {
		case Ptr:
			slots[i] = uint64(v)
		case int32:
			slots[i] = uint64(uint32(v))
		case uint32:
			slots[i] = uint64(v)
		case int:
			if v < math.MinInt32 || v > math.MaxInt32 {
				return fmt.Errorf("cuda: launch %s: argument %d = %d overflows int32", f.Name, i, v)
			}
			slots[i] = uint64(uint32(int32(v)))
		case int64:
			slots[i] = uint64(v)
		case uint64:
			slots[i] = v
		case float32:
			slots[i] = uint64(math.Float32bits(v))
		case float64:
			slots[i] = math.Float64bits(v)
		case []byte: // a parameter passed by value as raw bytes (e.g. a struct laid out as in C)
			if len(v) == 0 {
				return fmt.Errorf("cuda: launch %s: argument %d is an empty []byte", f.Name, i)
			}
			params[i] = unsafe.Pointer(&v[0])
			continue
		default:
			return fmt.Errorf("cuda: launch %s: argument %d has unsupported type %T", f.Name, i, a)
		}
		params[i] = unsafe.Pointer(&slots[i]) // little-endian: a 4-byte parameter reads the slot's low half
	}
	err := c.LaunchRaw(f, grid, block, sharedBytes, s, params[:len(args)])
	runtime.KeepAlive(slots)
	runtime.KeepAlive(args)
	return err
}

// LaunchRaw enqueues f with params as cuLaunchKernel's kernelParams: one pointer per kernel parameter, to
// memory holding that parameter's value, kept alive by the caller until LaunchRaw returns.
func (c *Ctx) LaunchRaw(f *Function, grid, block Dim3, sharedBytes int, s *Stream, params []unsafe.Pointer) error {
	if len(params) == 0 {
		params = []unsafe.Pointer{nil}
	}
	g, b := grid.norm(), block.norm()
	if g.X <= 0 || g.Y <= 0 || g.Z <= 0 || b.X <= 0 || b.Y <= 0 || b.Z <= 0 {
		return fmt.Errorf("cuda: launch %s: empty grid %v or block %v", f.Name, grid, block)
	}
	err := c.d.lib.call(sLaunchKernel, f.h, uintptr(g.X), uintptr(g.Y), uintptr(g.Z),
		uintptr(b.X), uintptr(b.Y), uintptr(b.Z), uintptr(sharedBytes), s.handle(),
		uintptr(unsafe.Pointer(&params[0])), 0)
	runtime.KeepAlive(params)
	if err != nil {
		return fmt.Errorf("%w (kernel %s, grid %v, block %v, %d B shared)", err, f.Name, g, b, sharedBytes)
	}
	return nil
}

// Launch enqueues f on stream s from any goroutine (see Ctx.Launch).
func (d *Device) Launch(f *Function, grid, block Dim3, sharedBytes int, s *Stream, args ...any) error {
	return d.Do(func(c *Ctx) error { return c.Launch(f, grid, block, sharedBytes, s, args...) })
}

// norm turns zero dimensions into 1.
func (v Dim3) norm() Dim3 {
	if v.Y == 0 {
		v.Y = 1
	}
	if v.Z == 0 {
		v.Z = 1
	}
	return v
}
