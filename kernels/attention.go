package kernels

import (
	"fmt"
	"math"
)

// AttentionBlock is the canonical key block: keys are visited in blocks of 64 from position 0.
const AttentionBlock = 64

// AttentionScale is the softmax scale 1/√hd, computed in float64 and rounded to float32.
func AttentionScale(hd int) float32 { return float32(1 / math.Sqrt(float64(hd))) }

// AttentionForward is causal grouped-query attention for one sequence (docs/arithmetic.md §7).
// q is (T, nh*hd); kCache and vCache are (S, nkv*hd), the sequence's keys (after RoPE) and values at positions
// 0..S-1; qPos is (T), the position of each query row (keys 0..qPos[t] are attended, qPos[t] < S); out is
// (T, nh*hd). Query head h reads kv head h/(nh/nkv).
// Canonical: per query, 64-key blocks from position 0 with a fixed online-softmax update, so prefill (T rows)
// and decode (one row from the cache) give the same bits. Standard: two-pass softmax over 128-key tiles in
// prefill (T > 1), split-KV over 256-key splits in decode (T == 1).
func AttentionForward(p Profile, dt DType, out, q, kCache, vCache []float32, qPos []int32, T, S, nh, nkv, hd int, scale float32) error {
	return AttentionForwardExp(p, Exp, dt, out, q, kCache, vCache, qPos, T, S, nh, nkv, hd, scale)
}

// AttentionForwardExp is AttentionForward with the softmax's exponential replaced by exp (e.g. FastExp, to
// plant the demo's "fast-exp" fault). AttentionForward is AttentionForwardExp with Exp.
func AttentionForwardExp(p Profile, exp func(float32) float32, dt DType, out, q, kCache, vCache []float32, qPos []int32, T, S, nh, nkv, hd int, scale float32) error {
	if nkv <= 0 || nh%nkv != 0 {
		return fmt.Errorf("kernels: AttentionForward: %d query heads not a multiple of %d kv heads", nh, nkv)
	}
	checkLen("AttentionForward", "q", q, T*nh*hd)
	checkLen("AttentionForward", "out", out, T*nh*hd)
	checkLen("AttentionForward", "kCache", kCache, S*nkv*hd)
	checkLen("AttentionForward", "vCache", vCache, S*nkv*hd)
	for t := 0; t < T; t++ {
		if qPos[t] < 0 || int(qPos[t]) >= S {
			return fmt.Errorf("kernels: AttentionForward: query %d at position %d outside the cache [0, %d)", t, qPos[t], S)
		}
	}
	group := nh / nkv
	kvStride := nkv * hd
	acc := make([]float32, hd)
	scores := make([]float32, 0, AttentionBlock)
	for t := 0; t < T; t++ {
		P := int(qPos[t])
		for h := 0; h < nh; h++ {
			g := h / group
			qv := q[(t*nh+h)*hd : (t*nh+h+1)*hd]
			o := out[(t*nh+h)*hd : (t*nh+h+1)*hd]
			key := func(j int) []float32 { return kCache[j*kvStride+g*hd : j*kvStride+(g+1)*hd] }
			val := func(j int) []float32 { return vCache[j*kvStride+g*hd : j*kvStride+(g+1)*hd] }
			switch {
			case p == Standard && T > 1:
				attendTwoPass(exp, acc, qv, P, scale, key, val)
			case p == Standard:
				attendSplitKV(exp, acc, qv, P, scale, key, val)
			default:
				scores = attendCanonical(exp, acc, scores, qv, P, scale, key, val)
			}
			for i, a := range acc {
				o[i] = dt.Round(a)
			}
		}
	}
	return nil
}

// score is dot(q, k) as one FMA chain from +0 over i = 0..hd-1, times scale.
func score(qv, kv []float32, scale float32) float32 {
	d := float32(0)
	kv = kv[:len(qv)]
	for i, a := range qv {
		if r, ok := fma32Try(a, kv[i], d); ok {
			d = r
		} else {
			d = fma32Slow(a, kv[i], d)
		}
	}
	return float32(d * scale)
}

// score4 is score for four keys, interleaved.
func score4(qv, k0, k1, k2, k3 []float32, scale float32) (float32, float32, float32, float32) {
	n := len(qv)
	k0, k1, k2, k3 = k0[:n], k1[:n], k2[:n], k3[:n]
	var d0, d1, d2, d3 float32
	for i, a := range qv {
		r0, ok0 := fma32Try(a, k0[i], d0)
		r1, ok1 := fma32Try(a, k1[i], d1)
		r2, ok2 := fma32Try(a, k2[i], d2)
		r3, ok3 := fma32Try(a, k3[i], d3)
		if ok0 && ok1 && ok2 && ok3 {
			d0, d1, d2, d3 = r0, r1, r2, r3
			continue
		}
		d0, d1, d2, d3 = FMA32(a, k0[i], d0), FMA32(a, k1[i], d1), FMA32(a, k2[i], d2), FMA32(a, k3[i], d3)
	}
	return float32(d0 * scale), float32(d1 * scale), float32(d2 * scale), float32(d3 * scale)
}

// attendCanonical writes acc = softmax(scores)·V for one (query, head); acc is divided by l before return.
func attendCanonical(exp func(float32) float32, acc, scores, qv []float32, P int, scale float32, key, val func(int) []float32) []float32 {
	m := float32(math.Inf(-1))
	l := float32(0)
	clear(acc)
	for blk := 0; blk <= P; blk += AttentionBlock { // fixed 64-key blocks from position 0
		end := min(blk+AttentionBlock, P+1)
		scores = scores[:0]
		j := blk
		for ; j+4 <= end; j += 4 { // four independent chains at once; each keeps its own order
			s0, s1, s2, s3 := score4(qv, key(j), key(j+1), key(j+2), key(j+3), scale)
			scores = append(scores, s0, s1, s2, s3)
		}
		for ; j < end; j++ {
			scores = append(scores, score(qv, key(j), scale))
		}
		bm := scores[0]
		for _, s := range scores[1:] {
			if s > bm {
				bm = s
			}
		}
		mn := m
		if bm > m {
			mn = bm
		}
		alpha := exp(float32(m - mn))
		l = float32(l * alpha)
		for i := range acc {
			acc[i] = float32(acc[i] * alpha)
		}
		for jj, s := range scores {
			e := exp(float32(s - mn))
			l = float32(l + e)
			v := val(blk + jj)[:len(acc)]
			for i, c := range acc {
				if r, ok := fma32Try(e, v[i], c); ok {
					acc[i] = r
				} else {
					acc[i] = fma32Slow(e, v[i], c)
				}
			}
		}
		m = mn
	}
	for i := range acc {
		acc[i] = acc[i] / l
	}
	return scores
}

// attendTwoPass is the standard prefill path: global max first, then sums over 128-key tiles whose partial
// sums are added tile by tile.
func attendTwoPass(exp func(float32) float32, acc, qv []float32, P int, scale float32, key, val func(int) []float32) {
	const tile = 128
	s := make([]float32, P+1)
	m := float32(math.Inf(-1))
	for j := range s {
		s[j] = score(qv, key(j), scale)
		if s[j] > m {
			m = s[j]
		}
	}
	clear(acc)
	l := float32(0)
	part := make([]float32, len(acc))
	for blk := 0; blk <= P; blk += tile {
		clear(part)
		lt := float32(0)
		for j := blk; j < min(blk+tile, P+1); j++ {
			e := exp(float32(s[j] - m))
			lt = float32(lt + e)
			v := val(j)
			for i := range part {
				part[i] = FMA32(e, v[i], part[i])
			}
		}
		l = float32(l + lt)
		for i := range acc {
			acc[i] = float32(acc[i] + part[i])
		}
	}
	for i := range acc {
		acc[i] = acc[i] / l
	}
}

// attendSplitKV is the standard decode path (flash-decoding): 256-key splits, each with its own max and sums,
// merged left to right.
func attendSplitKV(exp func(float32) float32, acc, qv []float32, P int, scale float32, key, val func(int) []float32) {
	const split = 256
	m := float32(math.Inf(-1))
	l := float32(0)
	clear(acc)
	part := make([]float32, len(acc))
	for blk := 0; blk <= P; blk += split {
		end := min(blk+split, P+1)
		sm := float32(math.Inf(-1))
		s := make([]float32, end-blk)
		for j := range s {
			s[j] = score(qv, key(blk+j), scale)
			if s[j] > sm {
				sm = s[j]
			}
		}
		clear(part)
		ls := float32(0)
		for j, sj := range s {
			e := exp(float32(sj - sm))
			ls = float32(ls + e)
			v := val(blk + j)
			for i := range part {
				part[i] = FMA32(e, v[i], part[i])
			}
		}
		mn := max(m, sm)
		a := exp(float32(m - mn))
		b := exp(float32(sm - mn))
		l = float32(float32(l*a) + float32(ls*b))
		for i := range acc {
			acc[i] = float32(float32(acc[i]*a) + float32(part[i]*b))
		}
		m = mn
	}
	for i := range acc {
		acc[i] = acc[i] / l
	}
}
