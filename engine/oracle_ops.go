package engine

import (
	"math"

	"bitalign/capture"
)

// The oracle's per-op arithmetic (docs/arithmetic.md, "The oracle"). act is the dtype of the rounding points the
// model defines inside an op (its activation dtype), dt the output's.

// oracleRMSNorm is HF's RMSNorm over rows of C: r = 1/√(mean(x²) + eps) in float64, h = round_act(x·r) (HF's
// hidden.to(input_dtype)), out = round_dt(w·h) (exact product, one rounding). x is (rows, C), w is (C).
func oracleRMSNorm(out, x, w []float32, rows, C int, eps float32, act, dt capture.DType) {
	for r := 0; r < rows; r++ {
		xr := x[r*C : (r+1)*C]
		var ss float64
		for _, v := range xr {
			ss += float64(v) * float64(v)
		}
		rs := 1 / math.Sqrt(ss/float64(C)+float64(eps))
		for k, v := range xr {
			h := roundOnce(float64(v)*rs, 0, act)
			out[r*C+k] = roundOnce(float64(w[k])*float64(h), 0, dt)
		}
	}
}

// ropeTables are the rotary tables for positions 0..n-1: cos[p·h + j], sin[p·h + j], h = head_dim/2.
type ropeTables struct {
	h        int
	cos, sin []float32
}

// oracleRoPETables rounds cos(p·ω_j) and sin(p·ω_j), ω_j = θ^(−2j/hd), from float64 to act once (HF casts its
// tables to the activation dtype; the engine's tables go through float32 first, a double rounding that can move
// an entry by one ulp of act).
func oracleRoPETables(cfg Config, n int, act capture.DType) ropeTables {
	h := cfg.HeadDim / 2
	t := ropeTables{h: h, cos: make([]float32, n*h), sin: make([]float32, n*h)}
	for j := 0; j < h; j++ {
		inv := 1 / math.Pow(cfg.RopeTheta, float64(2*j)/float64(cfg.HeadDim))
		for p := 0; p < n; p++ {
			a := float64(p) * inv
			t.cos[p*h+j] = roundOnce(math.Cos(a), 0, act)
			t.sin[p*h+j] = roundOnce(math.Sin(a), 0, act)
		}
	}
	return t
}

// oracleRoPE is HF's q·cos + rotate_half(q)·sin for rows at positions pos0.., x and out (n, heads·hd), with
// its rounding points: each product rounded to dt, then the sum (every step exact before its one rounding).
func oracleRoPE(out, x []float32, t ropeTables, pos0, n, heads, hd int, dt capture.DType) {
	h := hd / 2
	for r := 0; r < n; r++ {
		c := t.cos[(pos0+r)*h : (pos0+r+1)*h]
		s := t.sin[(pos0+r)*h : (pos0+r+1)*h]
		for hh := 0; hh < heads; hh++ {
			xv := x[(r*heads+hh)*hd : (r*heads+hh+1)*hd]
			ov := out[(r*heads+hh)*hd : (r*heads+hh+1)*hd]
			for i := 0; i < h; i++ {
				a := roundOnce(float64(xv[i])*float64(c[i]), 0, dt)
				b := roundOnce(float64(xv[i+h])*float64(s[i]), 0, dt)
				hi, lo := twoSum(float64(a), -float64(b))
				ov[i] = roundOnce(hi, lo, dt)
				a = roundOnce(float64(xv[i+h])*float64(c[i]), 0, dt)
				b = roundOnce(float64(xv[i])*float64(s[i]), 0, dt)
				hi, lo = twoSum(float64(a), float64(b))
				ov[i+h] = roundOnce(hi, lo, dt)
			}
		}
	}
}

// oracleSDPA is the attention for the query rows [P, P+N): from q_rope and k_rope, or from AltProducers with
// the oracle's RoPE (rounded to act, as the model's rotated q and k are tensors of that dtype).
func (x *opRun) oracleSDPA(out []float32, act, dt capture.DType) error {
	cfg := x.m.Config
	P, N := x.in.Pos, x.in.N
	qName, kName, vName, needRope := x.attnInputs()
	q, err := x.floats(qName, P, N)
	if err != nil {
		return err
	}
	k, err := x.floats(kName, 0, P+N)
	if err != nil {
		return err
	}
	v, err := x.floats(vName, 0, P+N)
	if err != nil {
		return err
	}
	if needRope {
		t := oracleRoPETables(cfg, P+N, act)
		qr, kr := make([]float32, len(q)), make([]float32, len(k))
		oracleRoPE(qr, q, t, P, N, cfg.Heads, cfg.HeadDim, act)
		oracleRoPE(kr, k, t, 0, P+N, cfg.KVHeads, cfg.HeadDim, act)
		q, k = qr, kr
	}
	oracleAttention(out, q, k, v, P, N, cfg.Heads, cfg.KVHeads, cfg.HeadDim, dt)
	return nil
}

// oracleAttention is causal grouped-query softmax attention in float64, each output rounded once: q is
// (N, heads·hd) at positions P..P+N-1, k and v are (P+N, kvHeads·hd), out is (N, heads·hd). Scores use the
// exact scale 1/√hd; nothing is rounded before the output.
func oracleAttention(out, q, k, v []float32, P, N, heads, kvHeads, hd int, dt capture.DType) {
	S := P + N
	kw := kvHeads * hd
	k64, v64 := make([]float64, S*kw), make([]float64, S*kw)
	for i := range k64 {
		k64[i], v64[i] = float64(k[i]), float64(v[i])
	}
	scale := 1 / math.Sqrt(float64(hd))
	group := heads / kvHeads
	sc := make([]float64, S)
	acc := make([]float64, hd)
	qv := make([]float64, hd)
	for t := 0; t < N; t++ {
		keys := P + t + 1
		for h := 0; h < heads; h++ {
			g := h / group
			for i := range qv {
				qv[i] = float64(q[(t*heads+h)*hd+i])
			}
			mx := math.Inf(-1)
			for j := 0; j < keys; j++ {
				kj := k64[j*kw+g*hd : j*kw+(g+1)*hd]
				var d float64
				for i, a := range qv {
					d += a * kj[i]
				}
				sc[j] = d * scale
				mx = max(mx, sc[j])
			}
			clear(acc)
			var l float64
			for j := 0; j < keys; j++ {
				e := math.Exp(sc[j] - mx)
				l += e
				vj := v64[j*kw+g*hd : j*kw+(g+1)*hd]
				for i := range acc {
					acc[i] += e * vj[i]
				}
			}
			o := out[(t*heads+h)*hd : (t*heads+h+1)*hd]
			for i, a := range acc {
				o[i] = roundOnce(a/l, 0, dt)
			}
		}
	}
}

// oracleCombine is the MoE block's oracle for the captured routing: each selected expert's MLP from mlp_norm
// with the rounding points the model defines (gate, up, the SwiGLU's SiLU and product, down: each rounded once to
// act, as the dense MLP's ops are), then Σ_j w_j·y_j exact (plus Qwen2-MoE's s·y_shared, s = sigmoid(x·w) of the
// shared expert's gate), rounded once to dt.
func (x *opRun) oracleCombine(out []float32, L Layer, act, dt capture.DType) error {
	cfg := x.m.Config
	N, H, k, Im := x.in.N, cfg.Hidden, cfg.ExpertsPerTok, cfg.MoEIntermediate
	h, ids, wts, err := x.moeInputs()
	if err != nil {
		return err
	}
	Is := cfg.SharedIntermediate
	// mlp is an expert's SwiGLU MLP (width n) on one row, with the dense MLP's rounding points, into y (H)
	mlp := func(y, row []float32, ex Expert, n int) {
		g, u, a := make([]float32, n), make([]float32, n), make([]float32, n)
		oracleMatmul(g, row, ex.Gate, nil, 1, H, n, act)
		oracleMatmul(u, row, ex.Up, nil, 1, H, n, act)
		for i := range a {
			gv := float64(g[i])
			sl := roundOnce(gv/(1+math.Exp(-gv)), 0, act)
			a[i] = roundOnce(float64(sl)*float64(u[i]), 0, act)
		}
		oracleMatmul(y, a, ex.Down, nil, 1, n, H, act)
	}
	y, ys, sg := make([]float32, k*H), make([]float32, H), make([]float32, 1)
	for t := range N {
		row := h[t*H : (t+1)*H]
		for j := range k {
			mlp(y[j*H:(j+1)*H], row, L.Experts[ids[t*k+j]], Im)
		}
		var s float64 // Qwen2-MoE: the shared expert's gate sigmoid(x·w), exact but for float64 (no rounding point)
		if Is > 0 {
			mlp(ys, row, L.Shared, Is)
			oracleMatmul(sg, row, L.SharedGate, nil, 1, H, 1, capture.F32)
			s = 1 / (1 + math.Exp(-float64(sg[0])))
		}
		for i := range H {
			var acc exactAcc // products of two float32 are exact in float64, their sum exact in acc
			var sum float64
			exact := true
			for j := range k {
				p := float64(wts[t*k+j]) * float64(y[j*H+i])
				sum += p
				exact = exact && acc.add(p)
			}
			if Is > 0 {
				p := s * float64(ys[i]) // rounded once in float64: far below a float32 ulp
				sum += p
				exact = exact && acc.add(p)
			}
			if exact {
				out[t*H+i] = roundBig(acc.value(), dt)
			} else { // a NaN, an infinity or a product out of the accumulator's range
				out[t*H+i] = roundOnce(sum, 0, dt)
			}
		}
	}
	return nil
}

// oracleLogprob is log softmax(x)[tok] in float64: (x_tok − m) − log1p(Σ_{j ≠ argmax} e^(x_j − m)), the log1p
// keeping its relative accuracy when the target holds almost all the probability.
func oracleLogprob(x []float32, tok int) float64 {
	am := 0
	for j, v := range x {
		if v != v {
			return math.NaN()
		}
		if v > x[am] {
			am = j
		}
	}
	m := float64(x[am])
	var rest float64
	for j, v := range x {
		if j != am {
			rest += math.Exp(float64(v) - m)
		}
	}
	return (float64(x[tok]) - m) - math.Log1p(rest)
}
