package engine

import (
	"math"

	"bitalign/capture"
	"bitalign/kernels"
)

// Conversions between float32 and the 16-bit storage types. They are exact bit manipulations (no arithmetic
// whose order could vary), used for loading, saving and rounding at op boundaries.

// bf16ToF32 widens a bfloat16 bit pattern (exact).
func bf16ToF32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// f32ToBF16 rounds to the nearest bfloat16, ties to even; NaN stays a quiet NaN.
func f32ToBF16(x float32) uint16 {
	u := math.Float32bits(x)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// f16ToF32 widens an IEEE binary16 bit pattern (exact, subnormals included).
func f16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp == 0:
		if man == 0 {
			return math.Float32frombits(sign)
		}
		// subnormal: value = man × 2^-24, exact in float32
		e := uint32(127 - 15 + 1)
		for man&0x400 == 0 {
			man <<= 1
			e--
		}
		man &= 0x3ff
		return math.Float32frombits(sign | e<<23 | man<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
}

// f32ToF16 rounds to the nearest binary16, ties to even, overflowing to infinity; NaN stays a quiet NaN.
func f32ToF16(x float32) uint16 {
	u := math.Float32bits(x)
	sign := uint16(u>>16) & 0x8000
	a := u & 0x7fffffff
	switch {
	case a > 0x7f800000:
		return sign | 0x7e00 | uint16(a>>13)&0x1ff
	case a >= 0x477ff000: // ≥ 65520 rounds to infinity
		return sign | 0x7c00
	case a >= 0x38800000: // normal f16 range (≥ 2^-14)
		r := a + 0xfff + (a>>13)&1
		return sign | uint16((r-0x38000000)>>13)
	case a < 0x33000000: // < 2^-25: rounds to zero
		return sign
	}
	// subnormal f16: value / 2^-24 rounded to an integer, ties to even
	e := a >> 23
	m := a&0x7fffff | 0x800000
	shift := 126 - e // value = m×2^(e-150); in units of 2^-24 that is m×2^(e-126); 14 ≤ shift ≤ 24 here
	q := m >> shift
	rem := m & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || (rem == half && q&1 == 1) {
		q++
	}
	return sign | uint16(q)
}

// roundTo rounds x to dtype dt as the kernels do (F32: unchanged but NaN canonicalised).
func roundTo(dt capture.DType, x float32) float32 { return kdt(dt).Round(x) }

// roundSlice rounds every element of xs to dt in place.
func roundSlice(dt capture.DType, xs []float32) { kdt(dt).RoundSlice(xs) }

// encode writes xs as little-endian dt values (BF16, F16, F32; the values must already be representable).
func encode(dt capture.DType, xs []float32) []byte {
	switch dt {
	case capture.BF16, capture.F16:
		out := make([]byte, 2*len(xs))
		for i, x := range xs {
			var b uint16
			if dt == capture.BF16 {
				b = f32ToBF16(x)
			} else {
				b = f32ToF16(x)
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
			out[i] = bf16ToF32(uint16(b[2*i]) | uint16(b[2*i+1])<<8)
		}
	case capture.F16:
		for i := range out {
			out[i] = f16ToF32(uint16(b[2*i]) | uint16(b[2*i+1])<<8)
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

// kdt is the kernels' rounding dtype for a model dtype.
func kdt(dt capture.DType) kernels.DType {
	switch dt {
	case capture.BF16:
		return kernels.BF16
	case capture.F16:
		return kernels.F16
	}
	return kernels.F32
}
