package fp

import "math"

// Conversions between float32 and the narrow floats. They are exact integer manipulations (no arithmetic
// whose order could vary): narrowing rounds to nearest, ties to even, subnormals kept; widening is exact.

// CanonicalNaN is the one NaN every op outputs (float32 bits: quiet, positive), so op outputs compare bitwise
// (docs/arithmetic.md §1).
const CanonicalNaN = 0x7FC00000

// BF16ToF32 widens bfloat16 bits to float32: exact, NaN payloads included (the top half of a float32).
func BF16ToF32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// F32ToBF16 rounds x to the nearest bfloat16, ties to even, overflowing to ±Inf; a NaN keeps its sign and
// the payload's top bits and is made quiet.
func F32ToBF16(x float32) uint16 {
	u := math.Float32bits(x)
	if u&0x7FFFFFFF > 0x7F800000 {
		return uint16(u>>16) | 0x40
	}
	u += 0x7FFF + (u>>16)&1
	return uint16(u >> 16)
}

// BF16Exact returns the bfloat16 bits of x and true when x is a bf16 value (its low 16 bits are zero: the
// widening of BF16ToF32 is then undone exactly, NaN payloads included), else 0 and false. The `tc` profile's
// kernels take bf16 operands held in float32 and refuse any other value (docs/arithmetic.md, tc.2).
func BF16Exact(x float32) (uint16, bool) {
	u := math.Float32bits(x)
	if u&0xFFFF != 0 {
		return 0, false
	}
	return uint16(u >> 16), true
}

// F16ToF32 widens IEEE binary16 bits to float32 (exact, subnormals and NaN payloads included).
func F16ToF32(h uint16) float32 { return widen32(uint32(h), 5, 10, false) }

// F32ToF16 rounds x to the nearest IEEE binary16, ties to even, subnormals kept, ≥ 65520 in magnitude to
// ±Inf; a NaN keeps its sign and the payload's top bits and is made quiet.
func F32ToF16(x float32) uint16 { return uint16(narrow32(math.Float32bits(x), 5, 10, false)) }

// E4M3ToF32 widens f8e4m3fn bits to float32 (exact; S.1111.111 is NaN, there are no infinities).
func E4M3ToF32(b uint8) float32 { return widen32(uint32(b), 4, 3, true) }

// F32ToE4M3 rounds x to the nearest f8e4m3fn, ties to even, subnormals kept. e4m3fn has no infinities: a
// value that rounds beyond 448 in magnitude (above 464), ±Inf and NaN become NaN (S.1111.111) of x's sign.
func F32ToE4M3(x float32) uint8 { return uint8(narrow32(math.Float32bits(x), 4, 3, true)) }

// E5M2ToF32 widens f8e5m2 bits to float32 (exact).
func E5M2ToF32(b uint8) float32 { return widen32(uint32(b), 5, 2, false) }

// F32ToE5M2 rounds x to the nearest f8e5m2, ties to even, subnormals kept, ≥ 61440 in magnitude to ±Inf;
// a NaN keeps its sign and the payload's top bit and is made quiet.
func F32ToE5M2(x float32) uint8 { return uint8(narrow32(math.Float32bits(x), 5, 2, false)) }

// widen32 decodes a narrow float (e exponent bits, m mantissa bits, bias 2^(e−1)−1) to float32. Every narrow
// value is exact in float32; a NaN keeps its sign and mantissa bits (shifted to the top of float32's).
func widen32(x uint32, e, m uint, noInf bool) float32 {
	sign := x >> (e + m) << 31
	ex := x >> m & (1<<e - 1)
	man := x & (1<<m - 1)
	bias := uint32(1)<<(e-1) - 1
	switch {
	case ex == 1<<e-1 && (!noInf || man == 1<<m-1): // Inf or NaN
		return math.Float32frombits(sign | 0x7F800000 | man<<(23-m))
	case ex == 0: // zero or subnormal: man × 2^(1−bias−m), a power-of-two scaling that float32 holds exactly
		scale := math.Float32frombits((127 + 1 - bias - uint32(m)) << 23)
		return math.Float32frombits(sign | math.Float32bits(float32(man)*scale))
	}
	return math.Float32frombits(sign | (ex+127-bias)<<23 | man<<(23-m))
}

// narrow32 rounds float32 bits u to a narrow float (e exponent bits, m mantissa bits, e ≤ 8, m < 23), ties
// to even. noInf: the format has no infinities and one NaN per sign (all ones), which overflow gives.
func narrow32(u uint32, e, m uint, noInf bool) uint32 {
	sign := u >> 31 << (e + m)
	a := u & 0x7FFFFFFF
	expAll := uint32(1)<<e - 1
	nan := sign | expAll<<m | 1<<(m-1) | a>>(23-m)&(1<<m-1) // quiet, payload's top bits kept
	inf := sign | expAll<<m
	if noInf {
		nan, inf = sign|(expAll<<m|(1<<m-1)), sign|(expAll<<m|(1<<m-1))
	}
	if a > 0x7F800000 {
		return nan
	}
	bias := expAll >> 1
	if a >= (127+1-bias)<<23 { // normal in the target: round the mantissa to m bits, then rebias
		r := a + 1<<(22-m) - 1 + a>>(23-m)&1
		r >>= 23 - m
		r -= (127 - bias) << m
		if max := expAll << m; noInf {
			if r >= max|(1<<m-1) { // beyond the largest finite S.1111.110
				return inf
			}
		} else if r >= max {
			return inf
		}
		return sign | r
	}
	// subnormal (or zero) in the target: |x| / 2^(1−bias−m) rounded to an integer, ties to even. |x| is
	// mant × 2^(ex−150) (ex ≥ 1; a float32 subnormal is read with ex = 1 and no implicit bit).
	ex := a >> 23
	mant := a & 0x7FFFFF
	if ex == 0 {
		ex = 1
	} else {
		mant |= 0x800000
	}
	shift := 151 - bias - uint32(m) - ex // ≥ 1 here
	if shift >= 32 {
		return sign // below half the smallest subnormal
	}
	q := mant >> shift
	rem := mant & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || (rem == half && q&1 == 1) {
		q++ // may carry into the smallest normal: the encoding is then exact
	}
	return sign | q
}

// widen decodes a narrow float element (bf16, f16, f8) to float32.
func (f *Format) widen(x uint64) float32 {
	if f.DType == BF16 {
		return BF16ToF32(uint16(x))
	}
	return widen32(uint32(x), f.ExpBits, f.MantBits, f.NoInf)
}

// RoundBF16 rounds x to the nearest bfloat16 (ties to even), returned as float32; NaN becomes CanonicalNaN.
func RoundBF16(x float32) float32 {
	u := math.Float32bits(x)
	if u&0x7FFFFFFF > 0x7F800000 {
		return math.Float32frombits(CanonicalNaN)
	}
	u += 0x7FFF + (u>>16)&1
	return math.Float32frombits(u & 0xFFFF0000)
}

// RoundF16 rounds x to the nearest IEEE half (ties to even, subnormals kept, overflow to ±Inf), returned as
// float32; NaN becomes CanonicalNaN.
func RoundF16(x float32) float32 {
	if x != x {
		return math.Float32frombits(CanonicalNaN)
	}
	return F16ToF32(F32ToF16(x))
}

// Round rounds an op's output x to d (docs/arithmetic.md §1): BF16, F16, F8E4M3 and F8E5M2 round to nearest
// even through the narrow type; F32 and every other dtype keep x. Every NaN, and so an f8e4m3fn overflow,
// becomes CanonicalNaN.
func (d DType) Round(x float32) float32 {
	switch d {
	case BF16:
		return RoundBF16(x)
	case F16:
		return RoundF16(x)
	}
	if x != x {
		return math.Float32frombits(CanonicalNaN)
	}
	switch d {
	case F8E4M3:
		if r := E4M3ToF32(F32ToE4M3(x)); r == r {
			return r
		}
		return math.Float32frombits(CanonicalNaN) // beyond ±448: e4m3fn has no infinity
	case F8E5M2:
		return E5M2ToF32(F32ToE5M2(x))
	}
	return x
}

// RoundSlice rounds every element of x to d in place.
func (d DType) RoundSlice(x []float32) {
	for i, v := range x {
		x[i] = d.Round(v)
	}
}
