package engine

import (
	"math"
	"math/big"

	"bitalign/capture"
	"bitalign/kernels"
)

// The oracle's arithmetic (docs/arithmetic.md, "The oracle"): float64 values with their rounding error tracked where
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
	if x := exact(); x != nil {
		return roundBig(x, dt)
	}
	return roundOnce(s, 0, dt) // not exactly summable: the float64 sum
}

// roundBig rounds an exact big.Float to dt once.
func roundBig(x *big.Float, dt capture.DType) float32 {
	hi, _ := x.Float64()
	lo, _ := new(big.Float).SetPrec(x.MinPrec()+64).Sub(x, big.NewFloat(hi)).Float64()
	return roundOnce(hi, lo, dt)
}

// exactAcc is an exact fixed-point accumulator for sums of float64 values m·2^e (m < 2^53) with
// e ≥ exactMinExp: 32-bit limbs at weights 2^(exactMinExp + 32i) held in int64s, so each limb absorbs 2^31
// additions before it could overflow. Products of two float32 values (≥ 2^-298 in magnitude, e ≥ -350, and
// < 2^256) always fit.
type exactAcc [exactLimbs]int64

const (
	exactMinExp = -352
	exactLimbs  = 22 // 704 bits: up to 2^352
)

// add adds v exactly; it reports false when v is outside the accumulator's range (the caller falls back).
func (a *exactAcc) add(v float64) bool {
	if v == 0 {
		return true
	}
	fr, e := math.Frexp(v) // v = fr·2^e, 0.5 ≤ |fr| < 1
	m := int64(math.Ldexp(fr, 53))
	e -= 53
	off := e - exactMinExp
	if off < 0 || off/32+3 > exactLimbs {
		return false
	}
	neg := m < 0
	u := uint64(m)
	if neg {
		u = uint64(-m)
	}
	i, sh := off/32, uint(off%32)
	lo := u << sh
	var hi uint64
	if sh > 0 {
		hi = u >> (64 - sh)
	}
	c := [3]int64{int64(lo & 0xffffffff), int64(lo >> 32), int64(hi)}
	for j, x := range c {
		if neg {
			x = -x
		}
		a[i+j] += x
	}
	return true
}

// value returns the exact sum.
func (a *exactAcc) value() *big.Float {
	v, t := new(big.Int), new(big.Int)
	for i := exactLimbs - 1; i >= 0; i-- {
		v.Lsh(v, 32)
		v.Add(v, t.SetInt64(a[i]))
	}
	f := new(big.Float).SetPrec(uint(max(v.BitLen(), 64))).SetInt(v)
	return f.SetMantExp(f, exactMinExp)
}

// exactDot returns Σ x[k]·w[k] + bias exactly (every product of two float32 values is exact in float64); nil
// when a term is outside exactAcc's range (not a product of float32 values).
func exactDot(x []float64, w []float32, bias float64) *big.Float {
	var acc exactAcc
	for k, xv := range x {
		if !acc.add(xv * float64(w[k])) {
			return nil
		}
	}
	if !acc.add(bias) {
		return nil
	}
	return acc.value()
}

// oracleMatmul computes out (M, N) = x (M, K) · wᵀ + bias, w (N, K), each element the exact dot product
// rounded once to dt. The float64 sums' error bound takes Σ|x_k·w_k| ≤ ‖x‖·‖w‖ (Cauchy–Schwarz), so the inner
// loop is only the products and sums; four output columns at a time share each x value (independent chains).
// A bf16 or f16 weight is widened (exactly) four rows at a time.
func oracleMatmul(out []float32, x []float32, wt W, bias []float32, M, K, N int, dt capture.DType) {
	var wf []float32 // the float32 weight itself, or nil: widen rows into wbuf
	if wt.DType() == capture.F32 {
		wf = wt.Float32()
	}
	wbuf := make([]float32, 4*K)
	wrows := func(n, c int) []float32 { // rows [n, n+c) of w, c ≤ 4
		if wf != nil {
			return wf[n*K : (n+c)*K]
		}
		wt.Widen(wbuf[:c*K], n*K)
		return wbuf[:c*K]
	}
	wn := make([]float64, N) // ‖w_n‖, rounded up
	for n := range wn {
		wn[n] = norm2(wrows(n, 1))
	}
	// Blocks of oracleRows tokens against 4 weight rows at a time: the 4 rows stay in cache while every token of
	// the block reads them, and the block's tokens (in float64) stay in cache across all N. Each output is the
	// same single float64 sum over k in ascending order whatever the blocking.
	const oracleRows = 32
	xb := make([]float64, oracleRows*K)
	xn := make([]float64, oracleRows)
	for m0 := 0; m0 < M; m0 += oracleRows {
		rows := min(oracleRows, M-m0)
		for r := range rows {
			xr := xb[r*K : (r+1)*K]
			for k := range xr {
				xr[k] = float64(x[(m0+r)*K+k])
			}
			xn[r] = norm2(x[(m0+r)*K : (m0+r+1)*K])
		}
		n := 0
		for ; n+4 <= N; n += 4 {
			w := wrows(n, 4)
			w0, w1, w2, w3 := w[:K], w[K:2*K], w[2*K:3*K], w[3*K:4*K]
			for r := range rows {
				xr := xb[r*K : (r+1)*K]
				w0, w1, w2, w3 := w0[:len(xr)], w1[:len(xr)], w2[:len(xr)], w3[:len(xr)]
				var s0, s1, s2, s3 float64
				for k, xv := range xr {
					s0 += xv * float64(w0[k])
					s1 += xv * float64(w1[k])
					s2 += xv * float64(w2[k])
					s3 += xv * float64(w3[k])
				}
				m := m0 + r
				for j, s := range [4]float64{s0, s1, s2, s3} {
					out[m*N+n+j] = finishDot(s, xn[r]*wn[n+j], xr, w[j*K:(j+1)*K], bias, n+j, dt)
				}
			}
		}
		for ; n < N; n++ {
			wr := wrows(n, 1)
			for r := range rows {
				xr := xb[r*K : (r+1)*K]
				var s float64
				for k, xv := range xr {
					s += xv * float64(wr[k])
				}
				out[(m0+r)*N+n] = finishDot(s, xn[r]*wn[n], xr, wr, bias, n, dt)
			}
		}
	}
}

// norm2 is ‖v‖₂ in float64, rounded up by a margin that covers its own rounding errors.
func norm2(v []float32) float64 {
	var ss float64
	for _, x := range v {
		ss += float64(x) * float64(x)
	}
	return math.Sqrt(ss) * (1 + gamma(len(v)+2))
}

// finishDot adds column n's bias to a float64 dot product whose terms' magnitudes sum to at most abs, and
// rounds it once (roundSum).
func finishDot(s, abs float64, x []float64, w, bias []float32, n int, dt capture.DType) float32 {
	b := 0.0
	if bias != nil {
		b = float64(bias[n])
	}
	return roundSum(s+b, abs+math.Abs(b), len(x)+1, dt, func() *big.Float { return exactDot(x, w, b) })
}
