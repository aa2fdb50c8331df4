package logprobs

import (
	"math"

	"golang.org/x/sys/cpu"
)

// expInto sets dst[i] = math.Exp(src[i]), with the same bits, for i < len(dst) (src at least as long).
// Four exponentials per logit are most of a divergent pair's diff, and math.Exp computes one at a time
// through the stack-based ABI of math's exp_amd64.s; expAVX2 (exp_amd64.s here) repeats that assembly's
// avxfma path operation for operation, four lanes at a time: Shibata's reduction by ln 2 in two parts, a
// further 1/16, a degree-8 Taylor polynomial, four squarings of (1+r)−1 and the scaling by 2^k (IEEE
// operations give the same bits in a vector lane as in a scalar register). math takes that path when the
// CPU has AVX and FMA; expAVX2 also needs AVX2. Without them, for arguments outside [−expLimit, expLimit]
// (overflow, underflow, denormal results, ±Inf, NaN) and for the last len(dst) mod 4, math.Exp itself.
// TestExpMatchesMath checks the bits against math.Exp; expSelfCheck turns the copy off at start-up if a
// sample disagrees (a Go release that changes math.Exp).
func expInto(dst, src []float64) {
	src = src[:len(dst)]
	n := 0
	if expOK {
		n = len(dst) &^ 3
		if expAVX2(dst[:n], src) {
			for i, x := range src[:n] {
				if !(x >= -expLimit && x <= expLimit) {
					dst[i] = math.Exp(x)
				}
			}
		}
	}
	for i := n; i < len(dst); i++ {
		dst[i] = math.Exp(src[i])
	}
}

// expAVX2 is in exp_amd64.s: dst[i] = exp(src[i]) for i < len(dst) &^ 3, true when some src[i] was outside
// [−expLimit, expLimit] (NaN included), whose dst[i] the caller must set.
//
//go:noescape
func expAVX2(dst, src []float64) (outside bool)

// expLimit bounds the arguments whose result is a normal number reached by lastStep of math's exp_amd64.s
// (|k| ≤ 1010 < 1022): the copy needs no denormal or overflow branch.
const expLimit = 700

// expOK: the CPU takes math's avxfma path and has AVX2, and expSelfCheck agrees.
var expOK = cpu.X86.HasAVX && cpu.X86.HasFMA && cpu.X86.HasAVX2 && expSelfCheck()

// expSelfCheck compares expAVX2 with math.Exp on a sweep of [−expLimit, expLimit], around the reduction's
// rounding ties (odd multiples of ln 2 / 2) and near 0; false at the first difference.
func expSelfCheck() bool {
	var src []float64
	for i := -4096; i <= 4096; i++ {
		for _, x := range []float64{float64(i) * (expLimit / 4096.0), float64(i) * 0.6931471805599453 / 2,
			float64(i) * 1e-3, math.Nextafter(float64(i)*0.6931471805599453/2, 0)} {
			if x >= -expLimit && x <= expLimit {
				src = append(src, x)
			}
		}
	}
	src = src[:len(src)&^3]
	dst := make([]float64, len(src))
	if expAVX2(dst, src) {
		return false
	}
	for i, x := range src {
		if math.Float64bits(dst[i]) != math.Float64bits(math.Exp(x)) {
			return false
		}
	}
	return true
}
