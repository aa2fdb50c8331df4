package cuda

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// LibraryName is the CUDA driver library opened by Load.
const LibraryName = "libcuda.so.1"

// MinDriverVersion is the oldest driver accepted (cuDriverGetVersion: 1000*major + 10*minor). The embedded
// PTX is produced by nvcc 13.0 (PTX ISA 9.0), which older drivers cannot JIT-compile.
const MinDriverVersion = 13000

// ErrUnavailable is wrapped by every error meaning "no usable CUDA here" (no library, missing symbol, old
// driver, no device): the caller should fall back to the CPU.
var ErrUnavailable = errors.New("CUDA unavailable")

// Result is a CUresult.
type Result int32

// CUresult values this package tests for.
const (
	Success           Result = 0
	ErrorOutOfMemory  Result = 2
	ErrorNoDevice     Result = 100
	ErrorInvalidPTX   Result = 218
	ErrorNotFound     Result = 500
	ErrorIllegalAddr  Result = 700
	ErrorLaunchFailed Result = 719
)

// Error is a failed driver call.
type Error struct {
	Call string // the driver function, e.g. "cuMemAlloc_v2"
	Code Result
	Name string // e.g. "CUDA_ERROR_OUT_OF_MEMORY"
	Desc string // the driver's description
}

func (e *Error) Error() string {
	return fmt.Sprintf("cuda: %s: %s (%d): %s", e.Call, e.Name, int32(e.Code), e.Desc)
}

// IsOutOfMemory reports whether err is a driver out-of-memory error.
func IsOutOfMemory(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == ErrorOutOfMemory
}

// library holds the resolved driver entry points.
type library struct {
	path string
	fn   [numSyms]uintptr
}

// Symbol indices. The name table below gives each one's driver symbol; alternatives are tried in order.
const (
	sInit = iota
	sDriverGetVersion
	sGetErrorName
	sGetErrorString
	sDeviceGetCount
	sDeviceGet
	sDeviceGetName
	sDeviceGetAttribute
	sDeviceTotalMem
	sDeviceCanAccessPeer
	sPrimaryCtxRetain
	sPrimaryCtxRelease
	sCtxSetCurrent
	sCtxSynchronize
	sCtxEnablePeerAccess
	sMemGetInfo
	sMemAlloc
	sMemFree
	sMemHostAlloc
	sMemFreeHost
	sMemcpyHtoD
	sMemcpyDtoH
	sMemcpyDtoD
	sMemcpyHtoDAsync
	sMemcpyDtoHAsync
	sMemcpyDtoDAsync
	sMemsetD8
	sMemsetD8Async
	sMemsetD32
	sMemsetD32Async
	sModuleLoadData
	sModuleUnload
	sModuleGetFunction
	sFuncSetAttribute
	sLaunchKernel
	sStreamCreate
	sStreamSynchronize
	sStreamDestroy
	sStreamWaitEvent
	sStreamQuery
	sEventCreate
	sEventRecord
	sEventSynchronize
	sEventQuery
	sEventElapsedTime
	sEventDestroy
	sTensorMapEncodeTiled
	numSyms
)

var symNames = [numSyms][]string{
	sInit:                 {"cuInit"},
	sDriverGetVersion:     {"cuDriverGetVersion"},
	sGetErrorName:         {"cuGetErrorName"},
	sGetErrorString:       {"cuGetErrorString"},
	sDeviceGetCount:       {"cuDeviceGetCount"},
	sDeviceGet:            {"cuDeviceGet"},
	sDeviceGetName:        {"cuDeviceGetName"},
	sDeviceGetAttribute:   {"cuDeviceGetAttribute"},
	sDeviceTotalMem:       {"cuDeviceTotalMem_v2"},
	sDeviceCanAccessPeer:  {"cuDeviceCanAccessPeer"},
	sPrimaryCtxRetain:     {"cuDevicePrimaryCtxRetain"},
	sPrimaryCtxRelease:    {"cuDevicePrimaryCtxRelease_v2"},
	sCtxSetCurrent:        {"cuCtxSetCurrent"},
	sCtxSynchronize:       {"cuCtxSynchronize"},
	sCtxEnablePeerAccess:  {"cuCtxEnablePeerAccess"},
	sMemGetInfo:           {"cuMemGetInfo_v2"},
	sMemAlloc:             {"cuMemAlloc_v2"},
	sMemFree:              {"cuMemFree_v2"},
	sMemHostAlloc:         {"cuMemHostAlloc"},
	sMemFreeHost:          {"cuMemFreeHost"},
	sMemcpyHtoD:           {"cuMemcpyHtoD_v2"},
	sMemcpyDtoH:           {"cuMemcpyDtoH_v2"},
	sMemcpyDtoD:           {"cuMemcpyDtoD_v2"},
	sMemcpyHtoDAsync:      {"cuMemcpyHtoDAsync_v2"},
	sMemcpyDtoHAsync:      {"cuMemcpyDtoHAsync_v2"},
	sMemcpyDtoDAsync:      {"cuMemcpyDtoDAsync_v2"},
	sMemsetD8:             {"cuMemsetD8_v2"},
	sMemsetD8Async:        {"cuMemsetD8Async"},
	sMemsetD32:            {"cuMemsetD32_v2"},
	sMemsetD32Async:       {"cuMemsetD32Async"},
	sModuleLoadData:       {"cuModuleLoadData"},
	sModuleUnload:         {"cuModuleUnload"},
	sModuleGetFunction:    {"cuModuleGetFunction"},
	sFuncSetAttribute:     {"cuFuncSetAttribute"},
	sLaunchKernel:         {"cuLaunchKernel"},
	sStreamCreate:         {"cuStreamCreate"},
	sStreamSynchronize:    {"cuStreamSynchronize"},
	sStreamDestroy:        {"cuStreamDestroy_v2"},
	sStreamWaitEvent:      {"cuStreamWaitEvent"},
	sStreamQuery:          {"cuStreamQuery"},
	sEventCreate:          {"cuEventCreate"},
	sEventRecord:          {"cuEventRecord"},
	sEventSynchronize:     {"cuEventSynchronize"},
	sEventQuery:           {"cuEventQuery"},
	sEventElapsedTime:     {"cuEventElapsedTime_v2", "cuEventElapsedTime"},
	sEventDestroy:         {"cuEventDestroy_v2"},
	sTensorMapEncodeTiled: {"cuTensorMapEncodeTiled"},
}

// openLibrary dlopens path and resolves every symbol; any failure wraps ErrUnavailable.
func openLibrary(path string) (*library, error) {
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		why := ""
		if msg := err.Error(); msg != "" { // the dynamic loader does not always say why
			why = " (" + msg + ")"
		}
		return nil, fmt.Errorf("cuda: no CUDA driver: cannot load %s%s: %w", path, why, ErrUnavailable)
	}
	l := &library{path: path}
	for i, names := range symNames {
		for _, name := range names {
			if p, err := purego.Dlsym(h, name); err == nil && p != 0 {
				l.fn[i] = p
				break
			}
		}
		if l.fn[i] == 0 {
			return nil, fmt.Errorf("cuda: %s has no symbol %s (driver too old?): %w", path, names[0], ErrUnavailable)
		}
	}
	return l, nil
}

var (
	loadOnce sync.Once
	theLib   *library
	loadErr  error
)

// Load opens the driver library, resolves the symbols, calls cuInit and checks the driver version. It is
// called by Open and DeviceCount; the result is cached. Errors wrap ErrUnavailable.
func Load() error {
	loadOnce.Do(func() {
		l, err := openLibrary(LibraryName)
		if err != nil {
			loadErr = err
			return
		}
		if err := l.init(); err != nil {
			loadErr = err
			return
		}
		theLib = l
	})
	return loadErr
}

// init calls cuInit and checks the driver version.
func (l *library) init() error {
	if err := l.call(sInit, 0); err != nil {
		return fmt.Errorf("%w: %w", err, ErrUnavailable)
	}
	v, err := l.driverVersion()
	if err != nil {
		return fmt.Errorf("%w: %w", err, ErrUnavailable)
	}
	if v < MinDriverVersion {
		return fmt.Errorf("cuda: driver supports CUDA %d.%d, bitalign needs %d.%d or newer: %w",
			v/1000, v%1000/10, MinDriverVersion/1000, MinDriverVersion%1000/10, ErrUnavailable)
	}
	return nil
}

func (l *library) driverVersion() (int, error) {
	var v int32
	if err := l.call(sDriverGetVersion, uintptr(unsafe.Pointer(&v))); err != nil {
		return 0, err
	}
	return int(v), nil
}

// DriverVersion returns cuDriverGetVersion's value (e.g. 13000 for CUDA 13.0).
func DriverVersion() (int, error) {
	if err := Load(); err != nil {
		return 0, err
	}
	return theLib.driverVersion()
}

// DeviceCount returns the number of CUDA devices. Needs no device thread (no context involved).
func DeviceCount() (int, error) {
	if err := Load(); err != nil {
		return 0, err
	}
	var n int32
	if err := theLib.call(sDeviceGetCount, uintptr(unsafe.Pointer(&n))); err != nil {
		return 0, err
	}
	return int(n), nil
}

// call invokes symbol i and turns a non-zero CUresult into an *Error. Callers pass out-parameters as
// uintptr(unsafe.Pointer(&v)); go:uintptrescapes moves such v to the heap and keeps it alive for the call
// (without it a local could sit on a goroutine stack that moves while the driver writes to it: seen on the
// H200 as a device count of 0 and a scratch pointer of 0).
//
//go:uintptrescapes
func (l *library) call(i int, args ...uintptr) error {
	r, _, _ := purego.SyscallN(l.fn[i], args...)
	if res := Result(int32(r)); res != Success {
		return l.errorOf(symNameOf(l, i), res)
	}
	return nil
}

// symNameOf names symbol i (for messages).
func symNameOf(_ *library, i int) string { return symNames[i][0] }

func (l *library) errorOf(call string, res Result) *Error {
	e := &Error{Call: call, Code: res, Name: "CUDA_ERROR_UNKNOWN_CODE", Desc: "unknown error"}
	var p unsafe.Pointer // driver-owned static string
	if r, _, _ := purego.SyscallN(l.fn[sGetErrorName], uintptr(res), uintptr(unsafe.Pointer(&p))); r == 0 && p != nil {
		e.Name = cString(p)
	}
	p = nil
	if r, _, _ := purego.SyscallN(l.fn[sGetErrorString], uintptr(res), uintptr(unsafe.Pointer(&p))); r == 0 && p != nil {
		e.Desc = cString(p)
	}
	return e
}

// cString copies a NUL-terminated C string (at most 1024 bytes) owned by the driver.
func cString(p unsafe.Pointer) string {
	var b []byte
	for i := 0; i < 1024; i++ {
		c := *(*byte)(unsafe.Add(p, i))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}
