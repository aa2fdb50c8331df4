package kernels

import "fmt"

// Mixture-of-experts routing and combine (docs/arithmetic.md §19). The router matmul and every expert's
// gate/up/act/down are the ordinary matmul and SwiGLU (§4, §8); what is specific to MoE lives here. Every function
// works on one token's row at a time: nothing reads another token, so no result depends on the batch, on how
// many tokens chose an expert or on where a token sits.

// RouterProbs is the router softmax of one token: logits (E) float32, p (E) receives
//
//	m = max (ascending scan, NaN anywhere → NaN); e_j = Exp(l_j ⊖ m); S = e_0 ⊕ e_1 ⊕ … (ascending j); p_j = e_j ⊘ S
func RouterProbs(p, logits []float32) {
	checkLen("RouterProbs", "p", p, len(logits))
	m := rowMax(logits)
	var sum float32
	for j, l := range logits {
		e := Exp(float32(l - m))
		p[j] = e
		sum = float32(sum + e)
	}
	for j := range p {
		p[j] = p[j] / sum
	}
}

// before is the routing order of two experts: higher probability first, then the lower index; a NaN comes after
// every number (NaNs among themselves by index), so the order is total and never depends on the batch.
func before(pa float32, a int, pb float32, b int) bool {
	na, nb := pa != pa, pb != pb
	switch {
	case na != nb:
		return nb
	case !na && pa != pb:
		return pa > pb
	}
	return a < b
}

// TopK writes into ids (k) the k first experts of p (E) in routing order (probability descending, index
// ascending): ids[0] is the best.
func TopK(ids []int32, p []float32) {
	k := len(ids)
	if k > len(p) {
		panic(fmt.Sprintf("kernels: TopK: k = %d exceeds %d experts", k, len(p)))
	}
	for j := range k { // selection: k passes over E, each taking the best expert not yet chosen
		best := -1
		for e := range p {
			taken := false
			for _, id := range ids[:j] {
				if int(id) == e {
					taken = true
					break
				}
			}
			if !taken && (best < 0 || before(p[e], e, p[best], best)) {
				best = e
			}
		}
		ids[j] = int32(best)
	}
}

// ExpertWeights writes the combine weights w (k) of the experts ids (k) from the token's probabilities p (E):
// w_j = p[ids[j]]; with norm (norm_topk_prob) w_j = p[ids[j]] ⊘ s where s = p[ids[0]] ⊕ p[ids[1]] ⊕ … in the
// order of ids; then w_j = round_dt(w_j) (transformers casts the weights to the model dtype).
func ExpertWeights(dt DType, w []float32, p []float32, ids []int32, norm bool) {
	checkLen("ExpertWeights", "w", w, len(ids))
	var s float32
	for _, id := range ids {
		s = float32(s + p[id])
	}
	for j, id := range ids {
		v := p[id]
		if norm {
			v = v / s
		}
		w[j] = dt.Round(v)
	}
}

// Route runs the whole router after the matmul for T tokens: logits (T, E) float32, ids (T, k) the experts in
// routing order, w (T, k) their combine weights (RouterProbs, TopK, ExpertWeights per token).
func Route(dt DType, ids []int32, w []float32, logits []float32, T, E, k int, norm bool) {
	checkLen("Route", "logits", logits, T*E)
	checkLen("Route", "w", w, T*k)
	if len(ids) != T*k {
		panic(fmt.Sprintf("kernels: Route: ids has %d elements, want %d", len(ids), T*k))
	}
	p := make([]float32, E)
	for t := range T {
		RouterProbs(p, logits[t*E:(t+1)*E])
		TopK(ids[t*k:(t+1)*k], p)
		ExpertWeights(dt, w[t*k:(t+1)*k], p, ids[t*k:(t+1)*k], norm)
	}
}

// CheckExperts reports the first row of ids (T, k) with an expert outside [0, E) or chosen twice.
func CheckExperts(ids []int32, T, E, k int) error {
	for t := range T {
		row := ids[t*k : (t+1)*k]
		for j, id := range row {
			if id < 0 || int(id) >= E {
				return fmt.Errorf("token %d: expert %d outside [0, %d)", t, id, E)
			}
			for _, prev := range row[:j] {
				if prev == id {
					return fmt.Errorf("token %d: expert %d chosen twice", t, id)
				}
			}
		}
	}
	return nil
}

// MoECombine is the MoE block's output: y (T·k, H) holds, at row t·k+j, expert ids[t·k+j]'s output for token t
// (its down_proj, rounded to dt), w (T, k) the weights; out (T, H) is, per token and feature,
//
//	acc = +0; for j in the order of ascending expert id:  acc = fma(w_j, y_j, acc)
//	Qwen2-MoE's shared expert (shared (T, H), its output; gate (T), x·w_gateᵀ in float32), last:
//	s = Sigmoid(gate);  acc = fma(s, shared, acc)     (float32: transformers rounds gate, s and s·shared to dt)
//	out = round_dt(acc)
//
// transformers' order (its loop over experts), but in float32 with one rounding to dt: transformers rounds each
// weighted output and each partial sum to the model dtype, which loses everything when two experts cancel. The
// ids of a row must be distinct (CheckExperts).
// shared and gate are nil without a shared expert.
func MoECombine(dt DType, out, y, w []float32, ids []int32, T, k, H int, shared, gate []float32) {
	checkLen("MoECombine", "out", out, T*H)
	checkLen("MoECombine", "y", y, T*k*H)
	checkLen("MoECombine", "w", w, T*k)
	if shared != nil {
		checkLen("MoECombine", "shared", shared, T*H)
		checkLen("MoECombine", "gate", gate, T)
	}
	order := make([]int, k)
	for t := range T {
		row := ids[t*k : (t+1)*k]
		for j := range order {
			order[j] = j
		}
		for a := 1; a < k; a++ { // insertion sort of the k slots by expert id
			for b := a; b > 0 && row[order[b]] < row[order[b-1]]; b-- {
				order[b], order[b-1] = order[b-1], order[b]
			}
		}
		o := out[t*H : (t+1)*H]
		for i := range o {
			o[i] = 0
		}
		for _, j := range order {
			wj := w[t*k+j]
			yj := y[(t*k+j)*H : (t*k+j+1)*H]
			for i := range o {
				o[i] = FMA32(wj, yj[i], o[i])
			}
		}
		if shared != nil {
			s := Sigmoid(gate[t])
			for i, v := range shared[t*H : (t+1)*H] {
				o[i] = FMA32(s, v, o[i])
			}
		}
		dt.RoundSlice(o)
	}
}
