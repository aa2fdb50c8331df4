package engine

import (
	"math"

	"bitalign/capture"
	"bitalign/internal/fp"
	"bitalign/kernels"
)

// Loading and saving tensors as float32 slices. The conversions are internal/fp's (exact bit manipulations:
// round to nearest even when narrowing, exact when widening); rounding at op boundaries is kernels.DType's.

// roundTo rounds x to dtype dt as the kernels do (F32: unchanged but NaN canonicalised).
func roundTo(dt capture.DType, x float32) float32 { return kdt(dt).Round(x) }

// roundSlice rounds every element of xs to dt in place.
func roundSlice(dt capture.DType, xs []float32) { kdt(dt).RoundSlice(xs) }

// encode writes xs as little-endian dt values (BF16, F16; anything else as F32). The values must already be
// representable.
func encode(dt capture.DType, xs []float32) []byte {
	switch dt {
	case capture.BF16, capture.F16:
		out := make([]byte, 2*len(xs))
		for i, x := range xs {
			var b uint16
			if dt == capture.BF16 {
				b = fp.F32ToBF16(x)
			} else {
				b = fp.F32ToF16(x)
			}
			out[2*i], out[2*i+1] = byte(b), byte(b>>8)
		}
		return out
	}
	out := make([]byte, 4*len(xs))
	for i, x := range xs {
		u := math.Float32bits(x)
		out[4*i], out[4*i+1], out[4*i+2], out[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	return out
}

// decode reads little-endian dt values into float32 (BF16, F16, F32 exact; F64 rounded to nearest).
func decode(dt capture.DType, b []byte, out []float32) {
	switch dt {
	case capture.BF16:
		for i := range out {
			out[i] = fp.BF16ToF32(uint16(b[2*i]) | uint16(b[2*i+1])<<8)
		}
	case capture.F16:
		for i := range out {
			out[i] = fp.F16ToF32(uint16(b[2*i]) | uint16(b[2*i+1])<<8)
		}
	case capture.F32:
		for i := range out {
			out[i] = math.Float32frombits(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24)
		}
	case capture.F64:
		for i := range out {
			var u uint64
			for j := 7; j >= 0; j-- {
				u = u<<8 | uint64(b[8*i+j])
			}
			out[i] = float32(math.Float64frombits(u))
		}
	}
}

func encodeI32(xs []int32) []byte {
	out := make([]byte, 4*len(xs))
	for i, x := range xs {
		u := uint32(x)
		out[4*i], out[4*i+1], out[4*i+2], out[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	return out
}

func decodeI32(b []byte, out []int32) {
	for i := range out {
		out[i] = int32(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24)
	}
}

// kdt is the output rounding of a model dtype: BF16 and F16 models round to their dtype, every other model
// (F32, F64 checkpoints) computes in float32 (kernels.F32).
func kdt(dt capture.DType) kernels.DType {
	switch dt {
	case capture.BF16, capture.F16:
		return dt
	}
	return kernels.F32
}
