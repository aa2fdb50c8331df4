package kernels

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"unsafe"

	"bitalign/internal/fp"
)

// Weights is a weight tensor in its stored dtype: float32 values (F32) or the 16-bit patterns of bf16 or f16
// values (BF16, F16), little-endian in memory as in a safetensors file. docs/arithmetic.md already treats a
// weight as a value of the model dtype: a kernel that reads a bf16 or f16 weight widens it exactly (fp's
// conversions), so holding weights narrow changes memory, never bits.
//
// A Weights is read-only and may be a zero-copy view of a mapped checkpoint: keep is what the view keeps
// alive (the mapping is released when no Weights refers to it any more). The zero value is "no tensor" (an
// optional weight the config lacks).
type Weights struct {
	dt   DType
	f32  []float32
	bits []uint16
	keep any
}

// WeightDTypes are the dtypes a weight may be stored in (a checkpoint's tensor held as Weights, on the host and
// on a device): every kernel that reads a weight takes each of them and widens it exactly.
var WeightDTypes = []DType{F32, BF16, F16}

// IsWeightDType reports whether dt is one of WeightDTypes.
func IsWeightDType(dt DType) bool { return slices.Contains(WeightDTypes, dt) }

// WeightsF32 wraps float32 values (not copied).
func WeightsF32(v []float32) Weights {
	if v == nil {
		return Weights{}
	}
	return Weights{dt: F32, f32: v}
}

// WeightsBits wraps the bf16 (dt BF16) or f16 (F16) bit patterns bits (not copied); keep is held as long as
// the Weights or any view of it is (a mapping's owner, or nil).
func WeightsBits(dt DType, bits []uint16, keep any) Weights {
	if dt != BF16 && dt != F16 {
		panic(fmt.Sprintf("kernels: WeightsBits: dtype %v is not 16-bit", dt))
	}
	if bits == nil {
		return Weights{}
	}
	return Weights{dt: dt, bits: bits, keep: keep}
}

// RoundWeights rounds v to dt (F32, BF16 or F16: the op-boundary rounding, NaN canonical) and stores the result
// compactly in dt: the weights of a checkpoint stored in another dtype than its model's.
func RoundWeights(dt DType, v []float32) Weights {
	if v == nil {
		return Weights{}
	}
	w := NewWeights(dt, len(v))
	w.Store(0, v)
	return w
}

// NewWeights allocates n zero elements of dt (F32, BF16 or F16), to be filled with Store.
func NewWeights(dt DType, n int) Weights {
	switch dt {
	case BF16, F16:
		return Weights{dt: dt, bits: make([]uint16, n)}
	case F32:
		return Weights{dt: F32, f32: make([]float32, n)}
	}
	panic(fmt.Sprintf("kernels: NewWeights: dtype %v", dt))
}

// Store writes v rounded to w's dtype (dt.Round: round to nearest even, NaN canonical) at elements
// [off, off+len(v)). Only for Weights from NewWeights: a mapped checkpoint is read-only.
func (w Weights) Store(off int, v []float32) {
	switch w.dt {
	case BF16:
		b := w.bits[off : off+len(v)]
		for i, x := range v {
			b[i] = fp.F32ToBF16(fp.RoundBF16(x))
		}
	case F16:
		b := w.bits[off : off+len(v)]
		for i, x := range v {
			b[i] = fp.F32ToF16(fp.RoundF16(x))
		}
	default:
		f := w.f32[off : off+len(v)]
		for i, x := range v {
			f[i] = F32.Round(x)
		}
	}
}

// Owner is what w views and keeps alive (the keep of WeightsBits or WeightsView: a mapped file's owner), nil when
// w holds its own memory.
func (w Weights) Owner() any { return w.keep }

// DType is the dtype the values are stored in (F32, BF16 or F16; 0 for the zero Weights).
func (w Weights) DType() DType { return w.dt }

// Len is the number of elements.
func (w Weights) Len() int {
	if w.dt == F32 {
		return len(w.f32)
	}
	return len(w.bits)
}

// IsZero reports whether w is the zero Weights (no tensor).
func (w Weights) IsZero() bool { return w.f32 == nil && w.bits == nil }

// Bytes is the size of the stored values in bytes.
func (w Weights) Bytes() int64 {
	if w.dt == F32 {
		return 4 * int64(len(w.f32))
	}
	return 2 * int64(len(w.bits))
}

// At widens element i to float32 (exact).
func (w Weights) At(i int) float32 {
	switch w.dt {
	case BF16:
		return fp.BF16ToF32(w.bits[i])
	case F16:
		return fp.F16ToF32(w.bits[i])
	}
	return w.f32[i]
}

// Widen writes elements [off, off+len(dst)) into dst as float32 (exact).
func (w Weights) Widen(dst []float32, off int) {
	switch w.dt {
	case BF16:
		src := w.bits[off : off+len(dst)]
		for i, b := range src {
			dst[i] = fp.BF16ToF32(b)
		}
	case F16:
		src := w.bits[off : off+len(dst)]
		for i, b := range src {
			dst[i] = fp.F16ToF32(b)
		}
	default:
		copy(dst, w.f32[off:off+len(dst)])
	}
	runtime.KeepAlive(w) // the mapping w may view stays while the loop reads it
}

// Float32 returns all elements widened to float32: w's own slice when it is F32 (not a copy: do not modify),
// a new slice otherwise; nil for the zero Weights.
func (w Weights) Float32() []float32 {
	if w.IsZero() {
		return nil
	}
	if w.dt == F32 {
		return w.f32
	}
	out := make([]float32, len(w.bits))
	w.Widen(out, 0)
	return out
}

// Slice is elements [lo, hi) (a view sharing w's memory); the zero Weights stays zero.
func (w Weights) Slice(lo, hi int) Weights {
	if w.IsZero() {
		return w
	}
	v := w
	if w.dt == F32 {
		v.f32 = w.f32[lo:hi:hi]
	} else {
		v.bits = w.bits[lo:hi:hi]
	}
	return v
}

// Rows is rows [r0, r0+n) of a (?, cols) matrix: a view.
func (w Weights) Rows(cols, r0, n int) Weights { return w.Slice(r0*cols, (r0+n)*cols) }

// Cols is columns [c0, c0+n) of a (R, C) matrix as a (R, n) matrix in the same dtype: a copy, or w itself when
// that is every column (the zero Weights stays zero).
func (w Weights) Cols(R, C, c0, n int) Weights {
	if w.IsZero() || (c0 == 0 && n == C) {
		return w
	}
	v := Weights{dt: w.dt}
	if w.dt == F32 {
		v.f32 = make([]float32, 0, R*n)
		for r := 0; r < R; r++ {
			v.f32 = append(v.f32, w.f32[r*C+c0:r*C+c0+n]...)
		}
		return v
	}
	v.bits = make([]uint16, 0, R*n)
	for r := 0; r < R; r++ {
		v.bits = append(v.bits, w.bits[r*C+c0:r*C+c0+n]...)
	}
	return v
}

// Raw is the stored values as little-endian bytes (a view, for uploading to a device). The caller must keep w
// reachable (runtime.KeepAlive) while it uses the bytes: they may live in a mapping w keeps alive.
func (w Weights) Raw() []byte {
	switch {
	case w.IsZero():
		return nil
	case w.dt == F32:
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w.f32))), 4*len(w.f32))
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w.bits))), 2*len(w.bits))
}

// Identical reports whether a and b hold the same dtype and bits.
func (w Weights) Identical(o Weights) bool {
	if w.dt != o.dt || w.Len() != o.Len() {
		return false
	}
	a, b := w.Raw(), o.Raw()
	eq := string(a) == string(b)
	runtime.KeepAlive(w)
	runtime.KeepAlive(o)
	return eq
}

// checkWeights panics like checkLen when w does not hold n elements.
func checkWeights(op, name string, w Weights, n int) {
	if w.Len() < n {
		panic(fmt.Sprintf("kernels: %s: %s has %d elements, shape needs %d", op, name, w.Len(), n))
	}
}

// WeightsView views raw, little-endian dt values (F32, BF16 or F16: a tensor of a mapped checkpoint), as Weights
// without copying; keep is what the view keeps alive. ok is false when no view is possible: raw is not aligned
// for dt or the machine is not little-endian; then the caller copies through NewWeights and Store. The caller
// must also have checked CanonicalNaNs (every weight is a value of its dtype with NaN canonical, as Store writes
// it; the scan is left to the caller so that it can split a large tensor over goroutines).
func WeightsView(dt DType, raw []byte, keep any) (w Weights, ok bool) {
	size := dt.Size()
	if !IsWeightDType(dt) || len(raw)%size != 0 || !littleEndian {
		return Weights{}, false
	}
	n := len(raw) / size
	if n == 0 {
		if dt == F32 {
			return Weights{dt: dt, f32: []float32{}, keep: keep}, true
		}
		return Weights{dt: dt, bits: []uint16{}, keep: keep}, true
	}
	p := unsafe.Pointer(unsafe.SliceData(raw))
	if uintptr(p)%uintptr(size) != 0 {
		return Weights{}, false
	}
	if dt == F32 {
		return Weights{dt: dt, f32: unsafe.Slice((*float32)(p), n), keep: keep}, true
	}
	return Weights{dt: dt, bits: unsafe.Slice((*uint16)(p), n), keep: keep}, true
}

// littleEndian: the host stores a uint16 low byte first (what a view of little-endian file bytes needs).
var littleEndian = func() bool { x := uint16(1); return *(*byte)(unsafe.Pointer(&x)) == 1 }()

// CanonicalNaNs reports whether every NaN among the little-endian dt values raw (len a multiple of dt's size, on
// a little-endian host) is dt's canonical NaN, the one fp.CanonicalNaN narrows to. Eight bytes at a time: a lane
// whose exponent field is all ones (a NaN or an infinity, rare in weights) is found with the zero-lane test
// (u−1)&^u&high on u = ^word & exponent mask, and only then checked element by element.
func CanonicalNaNs(dt DType, raw []byte) bool {
	f := fp.FormatOf(dt)
	canon := uint64(fp.CanonicalNaN)
	switch dt {
	case BF16:
		canon = uint64(fp.F32ToBF16(math.Float32frombits(fp.CanonicalNaN)))
	case F16:
		canon = uint64(fp.F32ToF16(math.Float32frombits(fp.CanonicalNaN)))
	}
	size := f.Size
	ok := func(b []byte) bool {
		for i := 0; i+size <= len(b); i += size {
			if x := f.Bits(b, i/size); f.IsNaN(x) && x != canon {
				return false
			}
		}
		return true
	}
	lane := uint(8 * size)
	var exp, ones, high uint64
	for s := uint(0); s < 64; s += lane {
		exp |= (uint64(1)<<f.ExpBits - 1) << f.MantBits << s
		ones |= 1 << s
		high |= 1 << (lane - 1) << s
	}
	head := int((8 - uintptr(unsafe.Pointer(unsafe.SliceData(raw)))%8) % 8)
	head = min(head-head%size, len(raw)-len(raw)%size)
	if !ok(raw[:head]) {
		return false
	}
	body := raw[head:]
	words := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(body))), len(body)/8)
	i := 0
	for ; i+4 <= len(words); i += 4 { // four words per test: the common case is no hit at all
		w := words[i : i+4 : i+4]
		u0, u1, u2, u3 := ^w[0]&exp, ^w[1]&exp, ^w[2]&exp, ^w[3]&exp
		if ((u0-ones)&^u0|(u1-ones)&^u1|(u2-ones)&^u2|(u3-ones)&^u3)&high != 0 && !ok(body[8*i:8*i+32]) {
			return false
		}
	}
	for ; i < len(words); i++ {
		if u := ^words[i] & exp; (u-ones)&^u&high != 0 && !ok(body[8*i:8*i+8]) {
			return false
		}
	}
	return ok(body[8*len(words):])
}
