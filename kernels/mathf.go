package kernels

import "math"

// Constants of docs/arithmetic.md §2, as float32 bit patterns.
var (
	expL2E   = math.Float32frombits(0x3FB8AA3B)
	expLn2Hi = math.Float32frombits(0x3F317218)
	expLn2Lo = math.Float32frombits(0xB102E308)
	expE7    = math.Float32frombits(0x39509279)
	expE6    = math.Float32frombits(0x3AB6A192)
	expE5    = math.Float32frombits(0x3C088870)
	expE4    = math.Float32frombits(0x3D2AAA75)
	expE3    = math.Float32frombits(0x3E2AAAAB)
	expE2    = math.Float32frombits(0x3F000000)
	expHiX   = math.Float32frombits(0x42B17217)
	expLoX   = math.Float32frombits(0xC2D00000)

	logLn2Hi = math.Float32frombits(0x3F317200)
	logLn2Lo = math.Float32frombits(0x35BFBE8E)
	logC     = [...]float32{ // L11 down to L2
		math.Float32frombits(0x3D8AA107), math.Float32frombits(0xBDECB35B), math.Float32frombits(0x3DF1EAA4),
		math.Float32frombits(0xBDFE60A7), math.Float32frombits(0x3E11BD19), math.Float32frombits(0xBE2AACF3),
		math.Float32frombits(0x3E4CD098), math.Float32frombits(0xBE800004), math.Float32frombits(0x3EAAAAA7),
		math.Float32frombits(0xBF000000),
	}
)

// Exp is e^x by docs/arithmetic.md §2.1 (CUDA bt_exp): Cody–Waite reduction, degree-7 polynomial with FMA,
// two-step scaling by 2^k. Never math.Exp: this is the function the GPU reproduces.
func Exp(x float32) float32 {
	if x != x {
		return x
	}
	if x > expHiX {
		return float32(math.Inf(1))
	}
	if x < expLoX {
		return 0
	}
	t := float32(x * expL2E)
	n := float32(math.RoundToEven(float64(t)))
	// Each "if v, ok := fma32Try(a, b, c)" block below is FMA32(a, b, c) with its fast path inlined.
	var r float32
	if v, ok := fma32Try(-n, expLn2Hi, x); ok {
		r = v
	} else {
		r = fma32Slow(-n, expLn2Hi, x)
	}
	if v, ok := fma32Try(-n, expLn2Lo, r); ok {
		r = v
	} else {
		r = fma32Slow(-n, expLn2Lo, r)
	}
	p := expE7
	for _, c := range [...]float32{expE6, expE5, expE4, expE3, expE2, 1, 1} {
		if v, ok := fma32Try(p, r, c); ok {
			p = v
		} else {
			p = fma32Slow(p, r, c)
		}
	}
	k := int32(n)
	k1 := k >> 1
	k2 := k - k1
	s1 := math.Float32frombits(uint32(k1+127) << 23)
	s2 := math.Float32frombits(uint32(k2+127) << 23)
	return float32(float32(p*s1) * s2)
}

// Log is the natural logarithm by docs/arithmetic.md §2.2 (CUDA bt_log): exponent split with the mantissa in
// (√½, √2], degree-11 polynomial for log1p with FMA, e·ln2 added in two parts.
func Log(x float32) float32 {
	if x != x {
		return x
	}
	if x < 0 {
		return math.Float32frombits(CanonicalNaN)
	}
	if x == 0 {
		return float32(math.Inf(-1))
	}
	if math.IsInf(float64(x), 1) {
		return x
	}
	e := int32(0)
	u := math.Float32bits(x)
	if u < 0x00800000 {
		x = float32(x * 0x1p23)
		u = math.Float32bits(x)
		e = -23
	}
	e += int32(u>>23) - 127
	m := math.Float32frombits(u&0x007FFFFF | 0x3F800000)
	if u&0x007FFFFF > 0x003504F3 {
		m = float32(m * 0.5)
		e++
	}
	g := float32(m - 1)
	// Each "if v, ok := fma32Try(a, b, c)" block below is FMA32(a, b, c) with its fast path inlined.
	q := logC[0]
	for _, c := range logC[1:] {
		if v, ok := fma32Try(q, g, c); ok {
			q = v
		} else {
			q = fma32Slow(q, g, c)
		}
	}
	g2 := float32(g * g)
	var y float32
	if v, ok := fma32Try(g2, q, g); ok {
		y = v
	} else {
		y = fma32Slow(g2, q, g)
	}
	fe := float32(e)
	if v, ok := fma32Try(fe, logLn2Lo, y); ok {
		y = v
	} else {
		y = fma32Slow(fe, logLn2Lo, y)
	}
	if v, ok := fma32Try(fe, logLn2Hi, y); ok {
		return v
	}
	return fma32Slow(fe, logLn2Hi, y)
}

// Rsqrt is 1/√x: IEEE square root, then IEEE division (docs/arithmetic.md §2.3).
func Rsqrt(x float32) float32 {
	s := float32(math.Sqrt(float64(x))) // correctly rounded: float64 sqrt of a float32 then one rounding
	return 1 / s
}

// SiLU is x/(1+e^-x) (docs/arithmetic.md §2.3).
func SiLU(x float32) float32 {
	e := Exp(-x)
	d := float32(1 + e)
	return x / d
}

// Sigmoid is 1/(1+e^-x) (docs/arithmetic.md §2.3): Qwen2-MoE's shared-expert gate.
func Sigmoid(x float32) float32 {
	e := Exp(-x)
	d := float32(1 + e)
	return 1 / d
}

// FastExp is a deliberately cheap e^x of the kind fast-math attention kernels use: t = x·1.442695,
// 2^frac(t) by a degree-3 polynomial, times 2^floor(t); a few hundred ulp off Exp. It is not part of the
// canonical arithmetic: the demo's "fast-exp" fault plants it in one side's attention (AttentionForwardExp).
// Same bits as the engine's and the CUDA kernels' fast_exp (docs/arithmetic.md §16).
func FastExp(x float32) float32 {
	if x != x {
		return x
	}
	if x < -87 {
		return 0
	}
	if x > 88 {
		return float32(math.Inf(1))
	}
	t := float32(x * 1.442695)
	n := float32(math.Floor(float64(t)))
	f := float32(t - n) // [0, 1)
	p := FMA32(FMA32(FMA32(0.0790, f, 0.2249), f, 0.6963), f, 1)
	return float32(p * math.Float32frombits(uint32(int32(n)+127)<<23))
}
