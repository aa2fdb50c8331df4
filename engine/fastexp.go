package engine

import (
	"math"

	"bitalign/kernels"
)

// fastExp is the fast-exp fault's exponential: 2^(x·log2 e) with a degree-3 polynomial for the fraction, the
// kind of approximation fast-math attention kernels use (a few hundred ULP off kernels.Exp).
func fastExp(x float32) float32 {
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
	p := kernels.FMA32(kernels.FMA32(kernels.FMA32(0.0790, f, 0.2249), f, 0.6963), f, 1)
	return float32(p * math.Float32frombits(uint32(int32(n)+127)<<23))
}

// fastExpAttention is canonical attention (docs/arithmetic.md §7: 64-key blocks, online softmax) with fastExp
// in place of kernels.Exp: the fast-exp fault. Shapes as kernels.AttentionForward.
func fastExpAttention(dt kernels.DType, out, q, k, v []float32, qPos []int32, T, S, nh, nkv, hd int, scale float32) {
	group := nh / nkv
	stride := nkv * hd
	acc := make([]float32, hd)
	sc := make([]float32, 0, kernels.AttentionBlock)
	for t := 0; t < T; t++ {
		P := int(qPos[t])
		for h := 0; h < nh; h++ {
			g := h / group
			qv := q[(t*nh+h)*hd : (t*nh+h+1)*hd]
			m, l := float32(math.Inf(-1)), float32(0)
			clear(acc)
			for blk := 0; blk <= P; blk += kernels.AttentionBlock {
				end := min(blk+kernels.AttentionBlock, P+1)
				sc = sc[:0]
				for j := blk; j < end; j++ {
					d := float32(0)
					kv := k[j*stride+g*hd : j*stride+(g+1)*hd]
					for i, a := range qv {
						d = kernels.FMA32(a, kv[i], d)
					}
					sc = append(sc, float32(d*scale))
				}
				bm := sc[0]
				for _, x := range sc[1:] {
					if x > bm {
						bm = x
					}
				}
				mn := m
				if bm > m {
					mn = bm
				}
				alpha := fastExp(float32(m - mn))
				l = float32(l * alpha)
				for i := range acc {
					acc[i] = float32(acc[i] * alpha)
				}
				for jj, x := range sc {
					e := fastExp(float32(x - mn))
					l = float32(l + e)
					vv := v[(blk+jj)*stride+g*hd : (blk+jj)*stride+(g+1)*hd]
					for i := range acc {
						acc[i] = kernels.FMA32(e, vv[i], acc[i])
					}
				}
				m = mn
			}
			o := out[(t*nh+h)*hd : (t*nh+h+1)*hd]
			for i := range acc {
				o[i] = dt.Round(acc[i] / l)
			}
		}
	}
}
