package kernels

import (
	"fmt"

	"bitalign/internal/fp"
)

// MatmulTCW is MatmulTC with w in its stored dtype (the engine's weights: a bf16 checkpoint's bits, viewed, never
// widened into a float32 copy). w must hold bf16 values: a bf16 weight always does, an f32 or f16 one is checked
// and the first element that is not a bf16 value is an error naming it.
func MatmulTCW(l TCLayout, dt DType, out, x []float32, w Weights, bias []float32, M, K, N int) error {
	checkLen("MatmulTC", "out", out, M*N)
	if bias != nil {
		checkLen("MatmulTC", "bias", bias, N)
	}
	b, tree := TCBounds(l, K)
	return matmulTC("MatmulTC", out, x, w, M, K, N, b, tree, epilogue{bias: bias, dt: dt})
}

// MatmulTCPartialW is MatmulTCPartial with w in its stored dtype (as MatmulTCW).
func MatmulTCPartialW(out, x []float32, w Weights, M, kLocal, N, tp int) error {
	b, tree, err := TCPartialBounds(kLocal, tp)
	if err != nil {
		return err
	}
	checkLen("MatmulTCPartial", "out", out, M*N)
	return matmulTC("MatmulTCPartial", out, x, w, M, kLocal, N, b, tree, epilogue{raw: true})
}

// checkBF16W is checkBF16 for the first n elements of a weight in its stored dtype (a bf16 weight needs no scan).
func checkBF16W(op, name string, w Weights, n, cols int) error {
	switch w.DType() {
	case BF16:
		return nil
	case F32:
		return checkBF16(op, name, w.f32[:n], cols)
	}
	for i := 0; i < n; i++ {
		if f := w.At(i); !bf16Value(f) {
			return fmt.Errorf("kernels: %s: %s[%d, %d] = %g (%s %#04x) is not a bf16 value: the tc profile takes bf16 operands",
				op, name, i/max(cols, 1), i%max(cols, 1), f, w.DType(), w.bits[i])
		}
	}
	return nil
}

// bf16Value reports whether f is a bf16 value (fp.BF16Exact).
func bf16Value(f float32) bool {
	_, ok := fp.BF16Exact(f)
	return ok
}

// decodeWeightsRow decodes elements [off, off+n) of w (already checked by checkBF16W) into row r: a bf16
// weight's bits directly, an f32 one's values as decodeRow does, an f16 one's through their exact widening.
func (o *tcOperand) decodeWeightsRow(r int, w Weights, off, n int) {
	switch w.DType() {
	case F32:
		o.decodeRow(r, w.f32[off:off+n])
		return
	case F16:
		v := make([]float32, n)
		w.Widen(v, off)
		o.decodeRow(r, v)
		return
	}
	base := r * o.stride
	sp := false
	for i, u := range w.bits[off : off+n] {
		e, m, s := decodeBF16(u)
		o.e[base+i], o.m[base+i], o.raw[base+i] = e, m, u
		sp = sp || s
	}
	o.special[r] = sp
}
