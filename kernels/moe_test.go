package kernels

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestTopKTotalOrder: probability descending, ties by the lower expert index, NaN after every number.
func TestTopKTotalOrder(t *testing.T) {
	nan := float32(math.NaN())
	cases := []struct {
		p    []float32
		k    int
		want []int32
	}{
		{[]float32{0.1, 0.4, 0.2, 0.3}, 2, []int32{1, 3}},
		{[]float32{0.25, 0.25, 0.25, 0.25}, 3, []int32{0, 1, 2}},
		{[]float32{0.1, 0.3, 0.3, 0.3}, 2, []int32{1, 2}},
		{[]float32{nan, 0.1, nan, 0.2}, 3, []int32{3, 1, 0}},
		{[]float32{0, float32(math.Copysign(0, -1)), 0.5}, 3, []int32{2, 0, 1}}, // +0 == −0: by index
	}
	for _, c := range cases {
		ids := make([]int32, c.k)
		TopK(ids, c.p)
		if !slices.Equal(ids, c.want) {
			t.Errorf("TopK(%v, %d) = %v, want %v", c.p, c.k, ids, c.want)
		}
	}
}

// TestRouteRowsIndependent: a token's routing is the same bits alone and among other tokens, and the weights
// follow the rule (normalised to 1 within a bf16 rounding, descending like the probabilities).
func TestRouteRowsIndependent(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const T, E, k = 33, 16, 4
	logits := make([]float32, T*E)
	for i := range logits {
		logits[i] = float32(r.NormFloat64() * 2)
	}
	for _, norm := range []bool{false, true} {
		ids, w := make([]int32, T*k), make([]float32, T*k)
		Route(BF16, ids, w, logits, T, E, k, norm)
		if err := CheckExperts(ids, T, E, k); err != nil {
			t.Fatal(err)
		}
		for tok := range T {
			one, w1 := make([]int32, k), make([]float32, k)
			Route(BF16, one, w1, logits[tok*E:(tok+1)*E], 1, E, k, norm)
			if !slices.Equal(one, ids[tok*k:(tok+1)*k]) || !slices.Equal(w1, w[tok*k:(tok+1)*k]) {
				t.Fatalf("token %d routed alone: %v %v, in the batch: %v %v", tok, one, w1, ids[tok*k:(tok+1)*k], w[tok*k:(tok+1)*k])
			}
			sum := 0.0
			for j := range k {
				sum += float64(w1[j])
				if w1[j] != RoundBF16(w1[j]) {
					t.Fatalf("weight %v is not bf16", w1[j])
				}
				if j > 0 && w1[j] > w1[j-1] {
					t.Fatalf("token %d: weights %v not descending", tok, w1)
				}
			}
			if norm && math.Abs(sum-1) > 4*0x1p-8 {
				t.Fatalf("token %d: normalised weights sum to %v", tok, sum)
			}
		}
	}
}

// TestMoECombineSlotOrder: the combine is the same bits whatever order the k slots list the experts in (it
// runs in expert-id order), and a float32 accumulation rounded once (not HF's bf16 partial sums).
func TestMoECombineSlotOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	const T, k, H = 5, 3, 17
	y := randBF16(r, T*k*H, 1)
	w := randBF16(r, T*k, 1)
	ids := []int32{4, 1, 7, 0, 2, 3, 5, 6, 1, 2, 0, 7, 3, 6, 5}
	out := make([]float32, T*H)
	MoECombine(BF16, out, y, w, ids, T, k, H, nil, nil)
	// reverse each token's slots (ids, weights and expert outputs together)
	y2, w2, ids2 := slices.Clone(y), slices.Clone(w), slices.Clone(ids)
	for tok := range T {
		for j := range k {
			src := tok*k + (k - 1 - j)
			ids2[tok*k+j], w2[tok*k+j] = ids[src], w[src]
			copy(y2[(tok*k+j)*H:(tok*k+j+1)*H], y[src*H:(src+1)*H])
		}
	}
	out2 := make([]float32, T*H)
	MoECombine(BF16, out2, y2, w2, ids2, T, k, H, nil, nil)
	if i, u, differ := FirstDiff(out, out2); differ {
		t.Fatalf("slot order changes the combine at %d (%d ulp)", i, u)
	}
	for tok := range T { // the reference: the same FMA chain in id order, then one bf16 rounding
		order := []int{0, 1, 2}
		slices.SortFunc(order, func(a, b int) int { return int(ids[tok*k+a] - ids[tok*k+b]) })
		for i := range H {
			var acc float32
			for _, j := range order {
				acc = FMA32(w[tok*k+j], y[(tok*k+j)*H+i], acc)
			}
			if want := RoundBF16(acc); math.Float32bits(want) != math.Float32bits(out[tok*H+i]) {
				t.Fatalf("token %d feature %d: %v, want %v", tok, i, out[tok*H+i], want)
			}
		}
	}
}
