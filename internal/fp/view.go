package fp

import (
	"encoding/binary"
	"unsafe"
)

// Views between float32 slices and their little-endian bytes, without copying. A capture's tensors are
// little-endian and mapped read-only: a view of one must never be written.

// littleEndian is whether this machine stores a float32 in the capture format's byte order.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// F32View is data (little-endian float32 values) as a []float32 sharing its memory, when this machine is
// little-endian and data is 4-byte aligned and a whole number of values; false otherwise (decode instead).
func F32View(data []byte) ([]float32, bool) {
	if !littleEndian || len(data)%4 != 0 || uintptr(unsafe.Pointer(unsafe.SliceData(data)))%4 != 0 {
		return nil, false
	}
	if len(data) == 0 {
		return []float32{}, true
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(data))), len(data)/4), true
}

// F32Bytes is the memory of x as bytes (in this machine's byte order), for bitwise comparison: two float32
// slices hold the same bits exactly when their F32Bytes are equal (+0 and −0 differ, so do NaNs of other bits).
func F32Bytes(x []float32) []byte {
	if len(x) == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), 4*len(x))
}
