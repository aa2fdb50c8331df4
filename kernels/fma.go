package kernels

import "math"

// FMA32 returns a·b + c rounded once to float32 (IEEE fusedMultiplyAdd, CUDA __fmaf_rn).
//
// Go has only a float64 math.FMA, and float32(math.FMA(...)) rounds twice. Here the product is exact in
// float64 (24+24 bits), the float64 sum is rounded once, and rounding that to float32 is correct unless the
// float64 sum sits exactly halfway between two float32 values or is below 2^-126 (fewer float32 bits): those
// rare cases go to fma32Slow, which rounds to odd using the exact TwoSum error.
func FMA32(a, b, c float32) float32 {
	if r, ok := fma32Try(a, b, c); ok {
		return r
	}
	return fma32Slow(a, b, c)
}

// fma32Try is FMA32's inlinable fast path: ok is false in the rare cases that need fma32Slow. Hot loops write
// `if r, ok := fma32Try(a, b, c); ok { acc = r } else { acc = fma32Slow(a, b, c) }` to avoid a call.
func fma32Try(a, b, c float32) (float32, bool) {
	s := float64(a)*float64(b) + float64(c) // a fused float64 FMA gives the same s: the product is exact
	u := math.Float64bits(s)
	return float32(s), u&0x1FFFFFFF != 0x10000000 && u&0x7FF0000000000000 >= 0x3810000000000000
}

func fma32Slow(a, b, c float32) float32 {
	p := float64(a) * float64(b) // exact
	cc := float64(c)
	s := p + cc
	if math.IsInf(s, 0) || math.IsNaN(s) {
		return float32(s)
	}
	// TwoSum: s + e == p + cc exactly.
	bp := s - cc
	bc := s - bp
	e := (p - bp) + (cc - bc)
	if e == 0 {
		return float32(s)
	}
	// Round to odd at 53 bits (s is nonzero here); 53 >= 24+2 makes the final rounding correct.
	u := math.Float64bits(s)
	if u&1 == 0 {
		if (e > 0) == (s > 0) {
			u++
		} else {
			u--
		}
	}
	return float32(math.Float64frombits(u))
}
