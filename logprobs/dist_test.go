package logprobs

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// refDist is the full-vocabulary measures of one token as docs/rl-metrics.md defines them, computed for every
// row alike (no shortcut for equal rows): what dist must give bit for bit.
func refDist(la, lb []float32, k int) (ok, greedyDiffer bool, kl, tv, top float64) {
	lse := func(x []float32) (float64, bool) {
		m := math.Inf(-1)
		for _, v := range x {
			if v != v || math.IsInf(float64(v), 1) {
				return 0, false
			}
			m = max(m, float64(v))
		}
		if math.IsInf(m, -1) {
			return 0, false
		}
		var s float64
		for _, v := range x {
			s += math.Exp(float64(v) - m)
		}
		return m + math.Log(s), true
	}
	argmax := func(x []float32) int {
		best := 0
		for i, v := range x {
			if v > x[best] {
				best = i
			}
		}
		return best
	}
	lseA, okA := lse(la)
	lseB, okB := lse(lb)
	if !okA || !okB {
		return false, false, 0, 0, 0
	}
	for j := range la {
		lpa, lpb := float64(la[j])-lseA, float64(lb[j])-lseB
		pa, pb := math.Exp(lpa), math.Exp(lpb)
		if pb > 0 {
			kl += pb * (lpb - lpa)
		}
		tv += math.Abs(pa - pb)
	}
	inter := 0
	ta, tb := topK(nil, la, k), topK(nil, lb, k)
	for _, x := range ta {
		if slices.Contains(tb, x) {
			inter++
		}
	}
	return true, argmax(la) != argmax(lb), kl, tv / 2, float64(inter) / float64(k)
}

// distPair is a pair of sequences of n tokens with vocab logits each: most rows bitwise equal, some differing
// in a few logits, one with −Inf entries (equal on both sides), one with a NaN, one all −Inf.
func distPair(n, vocab int) (*Table, *Table) {
	r := rand.New(rand.NewPCG(3, 4))
	la := make([]float32, n*vocab)
	for i := range la {
		la[i] = float32(r.NormFloat64() * 3)
	}
	lb := slices.Clone(la)
	for t := 0; t < n; t++ {
		row := lb[t*vocab : (t+1)*vocab]
		switch {
		case t%7 == 3: // a few logits moved
			for j := 0; j < 5; j++ {
				row[r.IntN(vocab)] += 0.25
			}
		case t%11 == 5: // a new argmax
			row[r.IntN(vocab)] = 40
		}
	}
	ninf := float32(math.Inf(-1))
	for j := 0; j < vocab; j += 3 {
		la[2*vocab+j], lb[2*vocab+j] = ninf, ninf
	}
	lb[4*vocab+1] = float32(math.NaN())
	for j := 0; j < vocab; j++ {
		la[6*vocab+j], lb[6*vocab+j] = ninf, ninf
	}
	seq := func(l []float32) Seq {
		return Seq{ID: 1, Prompt: -1, Logprob: make([]float32, n), Logits: l}
	}
	a, b := table("a", Absolute, seq(la)), table("b", Absolute, seq(lb))
	a.Vocab, b.Vocab = vocab, vocab
	return a, b
}

// TestDistMatchesReference: the logits measures (the equal-row shortcut, the per-token terms summed in token
// order) give the reference's sums bit for bit, on one core and split over several; a vocabulary of 1531
// leaves rows that are no multiple of expInto's block or of its four lanes.
func TestDistMatchesReference(t *testing.T) {
	for _, vocab := range []int{4096, 1531} { // 300 × 4096 = 1.2 M logits: above distMinPar, so the split runs
		t.Run(strconv.Itoa(vocab), func(t *testing.T) { distMatchesReference(t, 300, vocab) })
	}
}

func distMatchesReference(t *testing.T, n, vocab int) {
	a, b := distPair(n, vocab)
	th := DefaultThresholds
	var want Stats
	for i := 0; i < n; i++ {
		ok, gd, kl, tv, top := refDist(a.Seqs[0].Logits[i*vocab:(i+1)*vocab], b.Seqs[0].Logits[i*vocab:(i+1)*vocab], th.TopK)
		if !ok {
			continue
		}
		want.Dist++
		if gd {
			want.GreedyDiffer++
		}
		want.sumKL += kl
		want.sumTV += tv
		want.sumTopK += top
	}
	if want.Dist != int64(n-2) || want.GreedyDiffer == 0 || want.sumKL == 0 {
		t.Fatalf("the pair does not exercise the measures: %+v", want)
	}
	for _, workers := range []int{1, 2, 8} {
		th.Workers = workers
		s, err := Compare(context.Background(), a, b, th)
		if err != nil {
			t.Fatal(err)
		}
		got := &s.Seqs[0].Stats
		if got.Dist != want.Dist || got.GreedyDiffer != want.GreedyDiffer {
			t.Errorf("%d workers: dist %d greedy %d, want %d %d", workers, got.Dist, got.GreedyDiffer, want.Dist, want.GreedyDiffer)
		}
		for _, c := range []struct {
			name      string
			got, want float64
		}{{"Σ KL", got.sumKL, want.sumKL}, {"Σ TV", got.sumTV, want.sumTV}, {"Σ top-k", got.sumTopK, want.sumTopK}} {
			if math.Float64bits(c.got) != math.Float64bits(c.want) {
				t.Errorf("%d workers: %s = %v (%#x), want %v (%#x)", workers, c.name, c.got, math.Float64bits(c.got), c.want, math.Float64bits(c.want))
			}
		}
	}
}

// finiteMaxPlain is the plain definition rowMax's maximum and verdict must match: the largest value of a
// logits row, false when a value is NaN or +Inf, or every value −Inf.
func finiteMaxPlain(x []float32) (float64, bool) {
	m := math.Inf(-1)
	for _, v := range x {
		if v != v || math.IsInf(float64(v), 1) {
			return 0, false
		}
		m = max(m, float64(v))
	}
	return m, !math.IsInf(m, -1)
}

// TestRowMaxMatchesPlain: rowMax's one pass gives finiteMaxPlain's maximum (bit for bit, ±0 included) and
// verdict and greedyRow's argmax, on random rows and rows of NaNs, infinities, zeros of both signs (a −0
// before the first +0), subnormals, ties and every value −Inf.
func TestRowMaxMatchesPlain(t *testing.T) {
	r := rand.New(rand.NewPCG(10, 10))
	nan, negNaN := math.Float32frombits(0x7fc00001), math.Float32frombits(0xffc00000)
	inf, ninf := float32(math.Inf(1)), float32(math.Inf(-1))
	negZero := math.Float32frombits(0x80000000)
	specials := []float32{nan, negNaN, inf, ninf, 0, negZero, math.Float32frombits(1), math.Float32frombits(0x80000001),
		math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32}
	rows := [][]float32{{}, {0}, {negZero}, {negZero, 0}, {0, negZero}, {negZero, -1, 0, negZero}, {ninf}, {ninf, ninf},
		{ninf, -3}, {nan}, {negNaN}, {inf}, {1, 1, 1}, {-2, -1, -1, -2}, {ninf, negNaN}}
	for n := 0; n < 3000; n++ {
		row := make([]float32, 1+r.IntN(40))
		for i := range row {
			switch k := r.IntN(10); {
			case k < 5:
				row[i] = float32(r.NormFloat64())
			case k < 7:
				row[i] = float32(r.IntN(3)) - 1 // ties and ±0 (negated below)
				if r.IntN(2) == 0 {
					row[i] = -row[i]
				}
			case k < 9:
				row[i] = specials[r.IntN(len(specials))]
			default:
				row[i] = math.Float32frombits(r.Uint32())
			}
			if r.IntN(200) != 0 && (row[i] != row[i] || math.IsInf(float64(row[i]), 1)) {
				row[i] = ninf // mostly valid rows, so that the maximum and argmax are compared
			}
		}
		rows = append(rows, row)
	}
	valid := 0
	for _, row := range rows {
		m, arg, ok := rowMax(row)
		wm, wok := finiteMaxPlain(row)
		if ok != wok || ok && math.Float64bits(m) != math.Float64bits(wm) {
			t.Fatalf("%v: rowMax %v %v, want %v %v", row, m, ok, wm, wok)
		}
		if ok {
			valid++
			if want := greedyRow(row); arg != want {
				t.Fatalf("%v: argmax %d, greedyRow %d", row, arg, want)
			}
		}
	}
	if valid < len(rows)/2 {
		t.Fatalf("only %d of %d rows valid", valid, len(rows))
	}
}
