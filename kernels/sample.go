package kernels

import (
	"math"
	"slices"
)

// SampleParams are the canonical sampling rule's settings (docs/arithmetic.md §10).
type SampleParams struct {
	Temperature float32 // <= 0: greedy argmax
	TopK        int     // <= 0 or >= V: no top-k
	TopP        float32 // <= 0 or >= 1: no top-p
	Seed        uint64
}

// Sample draws the token for position pos+1 of sequence seq from one full logits row (V), float32: temperature,
// top-k, top-p in the order (value desc, index asc), then Gumbel-max with Philox noise keyed by (seed, seq, pos)
// and the vocabulary index, so the draw never depends on the batch slot. It returns -1 when every logit is NaN.
// The rule is the same in both profiles.
func Sample(logits []float32, sp SampleParams, seq, pos int64) int32 {
	if sp.Temperature <= 0 {
		best := -1
		for i, v := range logits {
			if v == v && (best < 0 || v > logits[best]) {
				best = i
			}
		}
		return int32(best)
	}
	z, keep := sampleKeep(logits, sp)
	best := int32(-1)
	bestScore := float32(math.Inf(-1))
	for _, i := range keep {
		s := float32(z[i] + Gumbel(sp.Seed, seq, pos, int(i)))
		if best < 0 || s > bestScore || (s == bestScore && i < best) {
			best, bestScore = i, s
		}
	}
	return best
}

// sampleKeep is Sample's kept set for a temperature > 0: z = logits ⊘ Temperature and the tokens that top-k and
// top-p keep (every non-NaN token in index order when neither applies, else in the order (z desc, index asc)).
func sampleKeep(logits []float32, sp SampleParams) (z []float32, keep []int32) {
	V := len(logits)
	z = make([]float32, V)
	for i, v := range logits {
		z[i] = v / sp.Temperature
	}
	keep = make([]int32, 0, V)
	for i, v := range z {
		if v == v {
			keep = append(keep, int32(i))
		}
	}
	topK := sp.TopK > 0 && sp.TopK < len(keep)
	topP := sp.TopP > 0 && sp.TopP < 1
	if topK || topP {
		sortOrder(z, keep)
		if topK {
			keep = keep[:sp.TopK]
		}
		if topP && len(keep) > 0 {
			mx := z[keep[0]]
			e := make([]float32, len(keep))
			sum := float32(0)
			for j, i := range keep {
				e[j] = Exp(float32(z[i] - mx))
				sum = float32(sum + e[j])
			}
			thr := float32(sp.TopP * sum)
			c := float32(0)
			for j := range keep {
				c = float32(c + e[j])
				if c >= thr {
					keep = keep[:j+1]
					break
				}
			}
		}
	}
	return z, keep
}

// sortOrder sorts the (non-NaN) tokens keep into §10's order: z descending, then index ascending.
func sortOrder(z []float32, keep []int32) {
	slices.SortFunc(keep, func(a, b int32) int {
		switch {
		case z[a] > z[b]:
			return -1
		case z[a] < z[b]:
			return 1
		}
		return int(a - b)
	})
}
