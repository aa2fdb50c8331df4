package engine

import (
	"math"
	"math/big"

	"bitalign/capture"
	"bitalign/kernels"
)

// The oracle's arithmetic (docs/arithmetic.md, "Oracle"): float64 values with their rounding error tracked where
// it matters, rounded once to the output dtype.

// precision is a binary format's rounding parameters: p significant bits, the smallest normal exponent emin
// (subnormals are multiples of 2^(emin-p+1)) and the largest finite value.
type precision struct {
	p, emin int
	max     float64
}

// precisionOf gives the rounding parameters of the float dtypes an op can output.
func precisionOf(dt capture.DType) precision {
	switch dt {
	case capture.BF16:
		return precision{8, -126, 0x1.fep127}
	case capture.F16:
		return precision{11, -14, 65504}
	}
	return precision{24, -126, math.MaxFloat32}
}

// roundOnce rounds the exact value hi + lo to dt, to nearest with ties to even, once: hi is a float64 and lo the
// remainder (|lo| ≤ half an ulp of hi; 0 when hi is exact). hi alone decides unless it lies exactly halfway
// between two dt values, where the sign of lo does (the dt midpoints are float64 values, so no other case can
// move across one). NaN becomes the canonical NaN, overflow ±Inf, subnormals are kept.
func roundOnce(hi, lo float64, dt capture.DType) float32 {
	if hi != hi {
		return math.Float32frombits(kernels.CanonicalNaN)
	}
	if hi == 0 || math.IsInf(hi, 0) {
		return float32(hi)
	}
	f := precisionOf(dt)
	q := max(math.Ilogb(hi), f.emin) - (f.p - 1) // the value of the last significant bit is 2^q
	t := math.Ldexp(hi, -q)                      // exact: a power-of-two scaling inside float64's range
	r := math.RoundToEven(t)
	if fl := math.Floor(t); t-fl == 0.5 && lo != 0 {
		r = fl
		if lo > 0 {
			r = fl + 1
		}
	}
	v := math.Ldexp(r, q)
	if math.Abs(v) > f.max {
		v = math.Copysign(math.Inf(1), hi)
	}
	if v == 0 {
		v = math.Copysign(0, hi)
	}
	return float32(v)
}

// twoSum returns a + b as a float64 and its exact rounding error (Knuth): hi + lo = a + b exactly.
func twoSum(a, b float64) (hi, lo float64) {
	hi = a + b
	bb := hi - a
	lo = (a - (hi - bb)) + (b - bb)
	return hi, lo
}

// gamma bounds the relative error of a float64 recursive sum of n terms: |computed − exact| ≤ gamma(n)·Σ|terms|
// (Higham's γ(n−1) = (n−1)u/(1−(n−1)u), u = 2^-53), with a factor 2 of margin for the rounding of the bound
// itself and of s ± err.
func gamma(n int) float64 {
	u := float64(n) * 0x1p-53
	return 2 * u / (1 - u)
}

// roundSum rounds an exact sum to dt from its float64 recursive sum s and the sum of its terms' magnitudes abs:
// when every value within the error bound of s rounds to the same dt value, that value is the correctly rounded
// exact sum; otherwise (cancellation near a rounding boundary, rare) exact() recomputes it exactly.
func roundSum(s, abs float64, n int, dt capture.DType, exact func() *big.Float) float32 {
	if s != s || math.IsInf(s, 0) || math.IsInf(abs, 0) {
		return roundOnce(s, 0, dt) // NaN or Inf among the terms: IEEE's answer
	}
	if abs == 0 {
		return roundOnce(s, 0, dt) // every term ±0: s is exact, sign included
	}
	e := gamma(n) * abs
	if lo, hi := roundOnce(s-e, 0, dt), roundOnce(s+e, 0, dt); lo == hi && (lo != 0 || s-e > 0 || s+e < 0) {
		return lo
	}
	return roundBig(exact(), dt)
}

// sumPrec is the precision of an exact sum of products of two float32 values: their exponents span
// [-298, 256], plus 64 bits of carries.
const sumPrec = 640

// roundBig rounds an exact big.Float to dt once.
func roundBig(x *big.Float, dt capture.DType) float32 {
	hi, _ := x.Float64()
	lo, _ := new(big.Float).SetPrec(sumPrec).Sub(x, big.NewFloat(hi)).Float64()
	return roundOnce(hi, lo, dt)
}

// exactDot returns Σ x[k]·w[k] + bias exactly (every product of two float32 values is exact in float64).
func exactDot(x []float64, w []float32, bias float64) *big.Float {
	acc := new(big.Float).SetPrec(sumPrec)
	t := new(big.Float).SetPrec(sumPrec)
	for k, xv := range x {
		acc.Add(acc, t.SetFloat64(xv*float64(w[k])))
	}
	return acc.Add(acc, t.SetFloat64(bias))
}

// oracleMatmul computes out (M, N) = x (M, K) · wᵀ + bias, w (N, K), each element the exact dot product
// rounded once to dt. Four output columns at a time share each x value (independent float64 chains).
func oracleMatmul(out []float32, x []float32, w, bias []float32, M, K, N int, dt capture.DType) {
	xr := make([]float64, K)
	for m := 0; m < M; m++ {
		for k := range xr {
			xr[k] = float64(x[m*K+k])
		}
		n := 0
		for ; n+4 <= N; n += 4 {
			w0, w1, w2, w3 := w[n*K:(n+1)*K], w[(n+1)*K:(n+2)*K], w[(n+2)*K:(n+3)*K], w[(n+3)*K:(n+4)*K]
			var s0, s1, s2, s3, a0, a1, a2, a3 float64
			for k, xv := range xr {
				p0, p1, p2, p3 := xv*float64(w0[k]), xv*float64(w1[k]), xv*float64(w2[k]), xv*float64(w3[k])
				s0, s1, s2, s3 = s0+p0, s1+p1, s2+p2, s3+p3
				a0, a1, a2, a3 = a0+math.Abs(p0), a1+math.Abs(p1), a2+math.Abs(p2), a3+math.Abs(p3)
			}
			for j, sa := range [4][2]float64{{s0, a0}, {s1, a1}, {s2, a2}, {s3, a3}} {
				out[m*N+n+j] = finishDot(sa[0], sa[1], xr, w[(n+j)*K:(n+j+1)*K], bias, n+j, dt)
			}
		}
		for ; n < N; n++ {
			wn := w[n*K : (n+1)*K]
			var s, a float64
			for k, xv := range xr {
				p := xv * float64(wn[k])
				s, a = s+p, a+math.Abs(p)
			}
			out[m*N+n] = finishDot(s, a, xr, wn, bias, n, dt)
		}
	}
}

// finishDot adds column n's bias to a float64 dot product and rounds it once (roundSum).
func finishDot(s, a float64, x []float64, w, bias []float32, n int, dt capture.DType) float32 {
	b := 0.0
	if bias != nil {
		b = float64(bias[n])
	}
	return roundSum(s+b, a+math.Abs(b), len(x)+1, dt, func() *big.Float { return exactDot(x, w, b) })
}
