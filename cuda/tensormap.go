package cuda

import (
	"fmt"
	"runtime"
	"unsafe"
)

// TensorMap is a CUtensorMap: the Hopper TMA unit's description of a tiled global tensor, encoded by
// cuTensorMapEncodeTiled. A kernel takes it by value as a `const __grid_constant__` parameter of 128 bytes
// (Launch takes Bytes() like any by-value struct); encoding needs no device memory access and no stream.
type TensorMap struct {
	buf []byte // 128 bytes at a 64-byte-aligned address (the struct's alignment in cuda.h) inside a larger slice
}

// TensorMapBytes is sizeof(CUtensorMap).
const TensorMapBytes = 128

// Bytes returns the encoded map, for Launch.
func (m TensorMap) Bytes() []byte { return m.buf }

// TensorMapDataType is a CUtensorMapDataType (cuda.h); only the types bitalign uses are named.
type TensorMapDataType uint32

// CUtensorMapDataType values.
const (
	TensorMapUint16   TensorMapDataType = 1
	TensorMapFloat32  TensorMapDataType = 7
	TensorMapBFloat16 TensorMapDataType = 9
)

// elemBytes is the element size of t.
func (t TensorMapDataType) elemBytes() int {
	switch t {
	case TensorMapUint16, TensorMapBFloat16:
		return 2
	case TensorMapFloat32:
		return 4
	}
	return 0
}

// TensorMapSwizzle is a CUtensorMapSwizzle: how the TMA unit permutes 16-byte chunks within each row of a box
// in shared memory (chunk c of row r lands at c ^ (r % (span/16)) for the 32, 64 and 128-byte spans).
type TensorMapSwizzle uint32

// CUtensorMapSwizzle values.
const (
	SwizzleNone TensorMapSwizzle = 0
	Swizzle32B  TensorMapSwizzle = 1
	Swizzle64B  TensorMapSwizzle = 2
	Swizzle128B TensorMapSwizzle = 3
)

// span is the swizzle's span in bytes (0 for none).
func (s TensorMapSwizzle) span() int {
	switch s {
	case Swizzle32B:
		return 32
	case Swizzle64B:
		return 64
	case Swizzle128B:
		return 128
	}
	return 0
}

// Tiled2D describes a row-major matrix of Rows × Cols elements at Base (row r at Base + r·RowStride bytes) and
// the Box (BoxRows × BoxCols elements) that one TMA load copies; elements outside the matrix read as zero.
type Tiled2D struct {
	Type               TensorMapDataType
	Base               Ptr
	Rows, Cols         int64
	RowStride          int64 // bytes
	BoxRows, BoxCols   int
	Swizzle            TensorMapSwizzle
	L2Promotion256     bool // CU_TENSOR_MAP_L2_PROMOTION_L2_256B (else none)
	Interleave, OOBNaN bool // unsupported here: must be false (no interleave, zero fill)
}

// Check returns nil if the driver can encode t, else an error saying which of cuTensorMapEncodeTiled's rules
// it breaks (so a caller learns why before any driver call): a 16-byte-aligned base, a row stride that is a
// multiple of 16 below 2^40, dimensions in [1, 2^32], a box of 1 … 256 per dimension, and with a swizzle a box
// row no wider than the swizzle's span.
func (t Tiled2D) Check() error {
	eb := t.Type.elemBytes()
	switch {
	case eb == 0:
		return fmt.Errorf("cuda: tensor map: unsupported data type %d", t.Type)
	case t.Interleave || t.OOBNaN:
		return fmt.Errorf("cuda: tensor map: interleave and NaN fill are not supported")
	case t.Base%16 != 0:
		return fmt.Errorf("cuda: tensor map: base %#x is not 16-byte aligned", uint64(t.Base))
	case t.Rows < 1 || t.Cols < 1 || t.Rows > 1<<32 || t.Cols > 1<<32:
		return fmt.Errorf("cuda: tensor map: dimensions %d × %d outside [1, 2^32]", t.Rows, t.Cols)
	case t.RowStride%16 != 0 || t.RowStride <= 0 || t.RowStride >= 1<<40:
		return fmt.Errorf("cuda: tensor map: row stride %d bytes is not a positive multiple of 16 below 2^40", t.RowStride)
	case t.RowStride < t.Cols*int64(eb):
		return fmt.Errorf("cuda: tensor map: row stride %d bytes is shorter than a row of %d elements", t.RowStride, t.Cols)
	case t.BoxRows < 1 || t.BoxRows > 256 || t.BoxCols < 1 || t.BoxCols > 256:
		return fmt.Errorf("cuda: tensor map: box %d × %d outside [1, 256] per dimension", t.BoxRows, t.BoxCols)
	case t.BoxCols*eb%16 != 0:
		return fmt.Errorf("cuda: tensor map: a box row of %d bytes is not a multiple of 16", t.BoxCols*eb)
	case t.Swizzle.span() > 0 && t.BoxCols*eb > t.Swizzle.span():
		return fmt.Errorf("cuda: tensor map: a box row of %d bytes exceeds the %d-byte swizzle span", t.BoxCols*eb, t.Swizzle.span())
	}
	return nil
}

// EncodeTiled encodes t (cuTensorMapEncodeTiled, rank 2, element strides 1) after Check.
func (c *Ctx) EncodeTiled(t Tiled2D) (TensorMap, error) {
	if err := t.Check(); err != nil {
		return TensorMap{}, err
	}
	raw := make([]byte, TensorMapBytes+64)
	off := int((64 - uintptr(unsafe.Pointer(&raw[0]))%64) % 64) // the Go heap does not move objects
	m := TensorMap{buf: raw[off : off+TensorMapBytes : off+TensorMapBytes]}
	dims := [2]uint64{uint64(t.Cols), uint64(t.Rows)} // innermost first
	strides := [1]uint64{uint64(t.RowStride)}         // of every dimension but the innermost
	box := [2]uint32{uint32(t.BoxCols), uint32(t.BoxRows)}
	estr := [2]uint32{1, 1}
	l2 := uintptr(0)
	if t.L2Promotion256 {
		l2 = 3 // CU_TENSOR_MAP_L2_PROMOTION_L2_256B
	}
	err := c.d.lib.call(sTensorMapEncodeTiled, uintptr(unsafe.Pointer(&m.buf[0])), uintptr(t.Type), 2, uintptr(t.Base),
		uintptr(unsafe.Pointer(&dims[0])), uintptr(unsafe.Pointer(&strides[0])), uintptr(unsafe.Pointer(&box[0])),
		uintptr(unsafe.Pointer(&estr[0])), 0, uintptr(t.Swizzle), l2, 0)
	runtime.KeepAlive(raw)
	if err != nil {
		return TensorMap{}, fmt.Errorf("%w (tensor map %d × %d, box %d × %d)", err, t.Rows, t.Cols, t.BoxRows, t.BoxCols)
	}
	return m, nil
}
