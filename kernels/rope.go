package kernels

import (
	"fmt"
)

// RoPETables returns the cos and sin tables, each (maxPos, hd/2), for rotary embeddings with base theta
// (docs/arithmetic.md §6): ω_j = θ^(−2j/hd) correctly rounded to float64 (RoPEInvFreq), then cos(p·ω_j) and
// sin(p·ω_j) by sinCos64, rounded to float32, then to dt. They are data: the GPU receives these very tables, and
// the Python library computes the same (capture/python/bitalign/rope.py; kernels/testdata/rope_vectors.tsv pins
// both). theta and hd are checked by the model's config; a bad one panics here.
func RoPETables(theta float64, hd, maxPos int, dt DType) (cos, sin []float32) {
	inv, err := RoPEInvFreq(theta, hd)
	if err != nil {
		panic(err)
	}
	return RoPETablesFreq(inv, maxPos, dt)
}

// RoPETablesFreq is RoPETables for a given inverse-frequency schedule (len(inv) = hd/2, each in [0, 1]), e.g.
// Llama-3 scaling. Positions stop below 2^29 (Cody–Waite reduction's range; a table that long could not be
// allocated anyway).
func RoPETablesFreq(inv []float64, maxPos int, dt DType) (cos, sin []float32) {
	if maxPos >= trigMax {
		panic(fmt.Sprintf("kernels: RoPETables: %d positions, beyond 2^29", maxPos))
	}
	h := len(inv)
	cos = make([]float32, maxPos*h)
	sin = make([]float32, maxPos*h)
	for p := 0; p < maxPos; p++ {
		for j, f := range inv {
			if !(f >= 0 && f <= 1) {
				panic(fmt.Sprintf("kernels: RoPETables: inverse frequency %v outside [0, 1]", f))
			}
			s, c := sinCos64(float64(float64(p) * f))
			cos[p*h+j] = dt.Round(float32(c))
			sin[p*h+j] = dt.Round(float32(s))
		}
	}
	return cos, sin
}

// RoPEForward applies rotary embeddings in HF's rotate_half convention (docs/arithmetic.md §6).
// x is (T, heads*hd), pos is (T) (the position of each row), cos and sin are (maxPos, hd/2) from RoPETables,
// out is (T, heads*hd); out may alias x. A position outside the tables is an error.
func RoPEForward(dt DType, out, x []float32, pos []int32, T, heads, hd int, cos, sin []float32) error {
	checkLen("RoPEForward", "x", x, T*heads*hd)
	checkLen("RoPEForward", "out", out, T*heads*hd)
	h := hd / 2
	if hd%2 != 0 || h == 0 {
		return fmt.Errorf("kernels: RoPEForward: head dim %d is not a positive even number", hd)
	}
	maxPos := min(len(cos), len(sin)) / h
	for t := 0; t < T; t++ {
		if pos[t] < 0 || int(pos[t]) >= maxPos {
			return fmt.Errorf("kernels: RoPEForward: position %d of row %d outside the RoPE tables [0, %d)", pos[t], t, maxPos)
		}
	}
	tmp := make([]float32, hd)
	for t := 0; t < T; t++ {
		p := int(pos[t])
		c := cos[p*h : (p+1)*h]
		s := sin[p*h : (p+1)*h]
		for hh := 0; hh < heads; hh++ {
			xv := x[(t*heads+hh)*hd : (t*heads+hh+1)*hd]
			for i := 0; i < h; i++ {
				a := dt.Round(float32(xv[i] * c[i]))
				b := dt.Round(float32(xv[i+h] * s[i]))
				tmp[i] = dt.Round(float32(a - b))
			}
			for i := h; i < hd; i++ {
				a := dt.Round(float32(xv[i] * c[i-h]))
				b := dt.Round(float32(xv[i-h] * s[i-h]))
				tmp[i] = dt.Round(float32(a + b))
			}
			copy(out[(t*heads+hh)*hd:(t*heads+hh+1)*hd], tmp)
		}
	}
	return nil
}
