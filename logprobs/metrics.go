package logprobs

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"bitalign/internal/fp"
)

// Thresholds are the configurable bounds of the metrics (docs/rl-metrics.md).
type Thresholds struct {
	ISLow, ISHigh float64 // importance ratios outside [ISLow, ISHigh] are counted (TIS/MIS bounds)
	TopK          int     // k of the top-k overlap (logits on both sides)
	Detail        int     // how many of the worst sequences keep |Δ| at every position (the HTML pictures)
	Workers       int     // goroutines (0: GOMAXPROCS)
}

// DefaultThresholds: verl's and slime's default TIS/MIS bounds, top-10, 8 detailed sequences.
var DefaultThresholds = Thresholds{ISLow: 0.5, ISHigh: 2, TopK: 10, Detail: 8}

// ProfileBins is the number of position buckets of a sequence's |Δ| profile (Stats.Profile).
const ProfileBins = 48

// Stats are the metrics of docs/rl-metrics.md over a set of tokens: one sequence (SeqStats) or all
// (Summary.Overall). Means are over Tokens (finite pairs only for the Δ-based ones, Finite); every sum is
// accumulated in float64 in position order, then over sequences in id order.
type Stats struct {
	Tokens       int64 // positions both sides hold with the same token id (or an id one side does not know)
	Equal        int64 // of Tokens, those whose float32 log-probabilities have identical bits
	Finite       int64 // of Tokens, those whose Δ is finite (the Δ metrics' denominator)
	NonFinite    int64 // Tokens − Finite: a NaN or ±Inf on one side, not bitwise equal
	TokenDiffers int64 // positions both hold whose token ids differ (not compared)
	// SampleDiffers: of Tokens, those for which both captures drew a token and the draws differ (the
	// sampling rule's key or noise differs even where the log-probabilities agree).
	SampleDiffers int64
	OnlyA, OnlyB  int64 // positions one side lacks
	MaxULP        uint64
	MaxAbs        float64 // max |Δ|
	MeanAbs       float64 // mean |Δ|
	MeanDiff      float64 // mean Δ
	K1, K2, K3    float64 // means of −Δ, Δ²/2, exp(Δ) − 1 − Δ (KL(sampler‖trainer) estimators)
	ISMin, ISMax  float64 // importance ratio exp(Δ)
	ISMean        float64
	ISOutside     int64   // tokens whose ratio is outside [ISLow, ISHigh]
	Chi2          float64 // mean exp(Δ)² − 1
	MultProbErr   float64 // mean exp(|Δ|): NeMo-RL's token_mult_prob_error
	ProbDiff      float64 // mean |exp(a) − exp(b)|: SkyRL's rollout_train_prob_diff
	SumA, SumB    float64 // Σ log-probabilities of each side (finite pairs)
	PPLA, PPLB    float64 // exp(−SumA/Finite), exp(−SumB/Finite)
	PPLRatio      float64 // PPLA / PPLB
	LogRatioSum   float64 // Σ Δ: a sequence's log importance ratio
	// With logits on both sides (Dist tokens): the full-vocabulary measures and the greedy choice.
	Dist         int64
	GreedyDiffer int64   // positions whose argmax differs
	KL           float64 // mean exact KL(sampler ‖ trainer)
	TV           float64 // mean total variation
	TopKOverlap  float64 // mean |topk(A) ∩ topk(B)| / k

	sumAbs, sumDiff, sumK1, sumK2, sumK3, sumIS, sumR2, sumMult, sumPD float64
	sumKL, sumTV, sumTopK                                              float64
}

// EqualFrac is Equal / Tokens (1 when nothing was compared).
func (s *Stats) EqualFrac() float64 {
	if s.Tokens == 0 {
		return 1
	}
	return float64(s.Equal) / float64(s.Tokens)
}

// ISOutsideFrac is ISOutside / Finite.
func (s *Stats) ISOutsideFrac() float64 { return frac(s.ISOutside, s.Finite) }

// GreedyDifferFrac is GreedyDiffer / Dist.
func (s *Stats) GreedyDifferFrac() float64 { return frac(s.GreedyDiffer, s.Dist) }

// Top1 is the fraction of Dist tokens whose argmax agrees.
func (s *Stats) Top1() float64 {
	if s.Dist == 0 {
		return 0
	}
	return 1 - s.GreedyDifferFrac()
}

func frac(n, d int64) float64 {
	if d == 0 {
		return 0
	}
	return float64(n) / float64(d)
}

// Differs reports whether anything differs: a log-probability's bits, a token id, a position one side lacks.
func (s *Stats) Differs() bool {
	return s.Equal < s.Tokens || s.TokenDiffers > 0 || s.SampleDiffers > 0 || s.OnlyA > 0 || s.OnlyB > 0
}

// SeqStats are one sequence's metrics.
type SeqStats struct {
	Seq int64
	Stats
	PosLo, PosHi int64 // compared positions [PosLo, PosHi) on the comparison's numbering
	FirstDiff    int64 // first position where the sides differ (bits, token id, or one side lacks it); −1 none
	MaxAbsPos    int64 // position of the first largest |Δ| (−1 when nothing differs)
	SeqIS        float64
	// Profile[b] is the largest |Δ| over the positions of bucket b of [PosLo, PosHi) (ProfileBins buckets,
	// fewer for shorter sequences); NaN marks a non-finite difference.
	Profile []float32
	// Detail: for the worst sequences only (Thresholds.Detail), |Δ| at every compared position.
	DetailPos []int32
	DetailAbs []float32
}

// DeltaBins is the number of decades of DeltaHist per sign.
const DeltaBins = 14

// DeltaHistLo is the decade of bin 0: bin j holds 10^(j+DeltaHistLo) ≤ |Δ| < 10^(j+1+DeltaHistLo), bin 0
// everything smaller (but non-zero), the last bin everything larger.
const DeltaHistLo = -12

// DeltaHist is the distribution of Δ over finite pairs: exact zeros, and |Δ| by decade for each sign.
type DeltaHist struct {
	Zero     int64
	Neg, Pos [DeltaBins]int64
}

// Summary is the comparison of two tables.
type Summary struct {
	A, B       *Table
	Positions  Numbering // the numbering positions are reported on
	Thresholds Thresholds
	Overall    Stats
	Hist       DeltaHist
	Seqs       []SeqStats // worst first (Worse)
	OnlyA      []int64    // ids of sequences only A holds
	OnlyB      []int64
	SeqsDiffer int64 // sequences where anything differs
}

// Worse orders sequences worst first: token ids or sampled tokens that differ, or non-finite differences,
// first; then by max |Δ|, mean |Δ|, fewer equal tokens, more positions on one side only, then id.
func Worse(x, y *SeqStats) int {
	bad := func(s *SeqStats) bool { return s.TokenDiffers+s.SampleDiffers+s.NonFinite > 0 }
	if bx, by := bad(x), bad(y); bx != by {
		if bx {
			return -1
		}
		return 1
	}
	return cmp.Or(-cmp.Compare(x.MaxAbs, y.MaxAbs), -cmp.Compare(x.MeanAbs, y.MeanAbs),
		cmp.Compare(x.EqualFrac(), y.EqualFrac()), -cmp.Compare(x.OnlyA+x.OnlyB, y.OnlyA+y.OnlyB), cmp.Compare(x.Seq, y.Seq))
}

// Compare compares two tables sequence by sequence (A the trainer, B the sampler: Δ = A − B). When one
// table numbers its positions Generated and the other Absolute, the absolute side's positions are moved by
// each sequence's prompt length (an error when it is unknown).
func Compare(ctx context.Context, a, b *Table, th Thresholds) (*Summary, error) {
	if th.ISLow == 0 && th.ISHigh == 0 {
		th.ISLow, th.ISHigh = DefaultThresholds.ISLow, DefaultThresholds.ISHigh
	}
	if !(th.ISLow >= 0 && th.ISLow < th.ISHigh) {
		return nil, fmt.Errorf("logprobs: importance-ratio bounds [%v, %v]: want 0 ≤ low < high", th.ISLow, th.ISHigh)
	}
	if th.TopK <= 0 {
		th.TopK = DefaultThresholds.TopK
	}
	s := &Summary{A: a, B: b, Thresholds: th, Positions: a.Positions}
	if a.Positions != b.Positions {
		s.Positions = Generated
	}
	type job struct{ ia, ib int }
	var jobs []job
	i, j := 0, 0
	for i < len(a.Seqs) || j < len(b.Seqs) {
		switch {
		case j >= len(b.Seqs) || i < len(a.Seqs) && a.Seqs[i].ID < b.Seqs[j].ID:
			s.OnlyA = append(s.OnlyA, a.Seqs[i].ID)
			i++
		case i >= len(a.Seqs) || b.Seqs[j].ID < a.Seqs[i].ID:
			s.OnlyB = append(s.OnlyB, b.Seqs[j].ID)
			j++
		default:
			jobs = append(jobs, job{i, j})
			i, j = i+1, j+1
		}
	}
	s.Seqs = make([]SeqStats, len(jobs))
	workers := th.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	cores := workers
	workers = max(1, min(workers, len(jobs)))
	// a batch of sequences per grab (at most 256), small enough that every worker gets some
	chunk := int64(min(256, max(1, len(jobs)/(4*workers))))
	// helpers share the logits measures of sequences (comparer.addDist), which are most of the work when the
	// logits differ and few sequences keep few workers busy. Every worker's sequence offers itself once per
	// helper, so the channel holds the offers of all of them: with room for one worker's only, the other
	// workers' offers were dropped while it was full, and 4 sequences on 16 cores ran one at 16 cores and
	// three at one core each (the helpers idle once the first was done)
	help := make(chan *distJob, max(0, (cores-1)*workers))
	if a.Vocab > 0 && b.Vocab > 0 {
		var hw sync.WaitGroup
		defer func() {
			close(help)
			hw.Wait()
		}()
		for range cores - 1 {
			hw.Add(1)
			go func() {
				defer hw.Done()
				c := &comparer{}
				for j := range help {
					j.work(c)
				}
			}()
		}
	}
	errs := make([]error, workers)
	hists := make([]DeltaHist, workers)
	var wg sync.WaitGroup
	var next int64
	var mu sync.Mutex
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := comparer{hist: &hists[w], help: help, helpers: cores - 1}
			for {
				if ctx.Err() != nil {
					errs[w] = ctx.Err()
					return
				}
				mu.Lock()
				lo := int(next)
				next += chunk
				mu.Unlock()
				if lo >= len(jobs) {
					return
				}
				for k := lo; k < min(lo+int(chunk), len(jobs)); k++ {
					if err := c.seq(s, &a.Seqs[jobs[k].ia], &b.Seqs[jobs[k].ib], &s.Seqs[k]); err != nil {
						errs[w] = err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	for _, h := range hists {
		s.Hist.Zero += h.Zero
		for j := range DeltaBins {
			s.Hist.Neg[j] += h.Neg[j]
			s.Hist.Pos[j] += h.Pos[j]
		}
	}
	// Overall: the sequences' sums in id order (jobs are in id order), then the histogram.
	o := &s.Overall
	o.ISMin, o.ISMax = math.Inf(1), math.Inf(-1)
	for k := range s.Seqs {
		q := &s.Seqs[k]
		o.merge(&q.Stats)
		if q.Differs() {
			s.SeqsDiffer++
		}
	}
	s.SeqsDiffer += int64(len(s.OnlyA) + len(s.OnlyB))
	o.finish()
	perm := make([]int32, len(s.Seqs))
	for k := range perm {
		perm[k] = int32(k)
	}
	slices.SortStableFunc(perm, func(x, y int32) int { return Worse(&s.Seqs[x], &s.Seqs[y]) })
	sorted := make([]SeqStats, len(s.Seqs))
	for k, p := range perm {
		sorted[k] = s.Seqs[p]
	}
	s.Seqs = sorted
	for k := range min(th.Detail, len(s.Seqs)) {
		q := &s.Seqs[k]
		if !q.Differs() {
			break
		}
		s.detail(q)
	}
	return s, nil
}

// comparer holds one worker's scratch space.
type comparer struct {
	lo, hi      float64    // log of the importance-ratio bounds
	equalFinite int64      // this sequence's bitwise-equal finite tokens, added by done
	hist        *DeltaHist // this worker's share of Summary.Hist
	absBuf      []float32
	posBuf      []int32
	topA        []int
	topB        []int
	pairs       [][2]int32 // this sequence's token pairs (A's index, B's) whose logits are measured
	terms       []distTerm
	help        chan *distJob // Compare's helpers, which take blocks of the logits measures
	helpers     int           // how many helpers take from help
	// scratch of dist: a block of a row's shifted logits (or log-probabilities) and their exponentials
	xa, xb, ea, eb [expBlock]float64
}

// expBlock is how many logits dist turns into exponentials at once (expInto): four 4 KiB buffers stay in L1.
const expBlock = 512

// offset is what moves side t's positions of sequence q onto the summary's numbering.
func (s *Summary) offset(t *Table, q *Seq) (int64, error) {
	if t.Positions == s.Positions {
		return 0, nil
	}
	if q.Prompt < 0 {
		return 0, fmt.Errorf("logprobs: %s: sequence %d: its positions are absolute and its prompt length unknown, but the other side's positions count generated tokens: pass --positions generated or absolute to number both alike", t.Path, q.ID)
	}
	return q.Prompt, nil
}

// walk calls fn for each position of the sequence on both sides, in order: ia or ib (token indexes into
// qa, qb) is −1 where a side lacks the position.
func (s *Summary) walk(qa, qb *Seq, fn func(pos int64, ia, ib int)) error {
	oa, err := s.offset(s.A, qa)
	if err != nil {
		return err
	}
	ob, err := s.offset(s.B, qb)
	if err != nil {
		return err
	}
	na, nb := qa.Len(), qb.Len()
	i, j := 0, 0
	// On the Generated numbering a capture's prompt tokens fall below 0: no response table holds them.
	for i < na && qa.PosAt(i)-oa < 0 {
		i++
	}
	for j < nb && qb.PosAt(j)-ob < 0 {
		j++
	}
	if qa.Pos == nil && qb.Pos == nil && i == 0 && j == 0 && int64(qa.Start)-oa == int64(qb.Start)-ob {
		// the common case: both contiguous from the same position
		p0 := int64(qa.Start) - oa
		for i := range min(na, nb) {
			fn(p0+int64(i), i, i)
		}
		for i := nb; i < na; i++ {
			fn(p0+int64(i), i, -1)
		}
		for i := na; i < nb; i++ {
			fn(p0+int64(i), -1, i)
		}
		return nil
	}
	for i < na || j < nb {
		var pa, pb int64 = math.MaxInt64, math.MaxInt64
		if i < na {
			pa = qa.PosAt(i) - oa
		}
		if j < nb {
			pb = qb.PosAt(j) - ob
		}
		switch {
		case pa < pb:
			fn(pa, i, -1)
			i++
		case pb < pa:
			fn(pb, -1, j)
			j++
		default:
			fn(pa, i, j)
			i, j = i+1, j+1
		}
	}
	return nil
}

var f32 = fp.FormatOf(fp.F32)

// seq fills out with one sequence's metrics.
func (c *comparer) seq(s *Summary, qa, qb *Seq, out *SeqStats) error {
	a, b := s.A, s.B
	st := &out.Stats
	*out = SeqStats{Seq: qa.ID, FirstDiff: -1, MaxAbsPos: -1, PosLo: math.MaxInt64, PosHi: math.MinInt64}
	st.ISMin, st.ISMax = math.Inf(1), math.Inf(-1)
	c.lo, c.hi = math.Log(s.Thresholds.ISLow), math.Log(s.Thresholds.ISHigh)
	c.equalFinite = 0
	dist := qa.Logits != nil && qb.Logits != nil && a.Vocab == b.Vocab && a.Vocab > 0
	if p0, ok := s.aligned(qa, qb); ok && !dist && (qa.Sample == nil || qb.Sample == nil) {
		c.seqFast(qa, qb, out, p0)
		c.done(out)
		return nil
	}
	c.absBuf, c.posBuf, c.pairs = c.absBuf[:0], c.posBuf[:0], c.pairs[:0]
	err := s.walk(qa, qb, func(pos int64, ia, ib int) {
		diff := func() {
			if out.FirstDiff < 0 {
				out.FirstDiff = pos
			}
		}
		switch {
		case ia < 0:
			st.OnlyB++
			diff()
			return
		case ib < 0:
			st.OnlyA++
			diff()
			return
		}
		ta, tb := qa.TokenAt(ia), qb.TokenAt(ib)
		if ta != NoToken && tb != NoToken && ta != tb {
			st.TokenDiffers++
			diff()
			return
		}
		out.PosLo, out.PosHi = min(out.PosLo, pos), max(out.PosHi, pos+1)
		if qa.Sample != nil && qb.Sample != nil {
			if sa, sb := qa.Sample[ia], qb.Sample[ib]; sa != NoToken && sb != NoToken && sa != sb {
				st.SampleDiffers++
				diff()
			}
		}
		absd, differs := c.token(out, qa.Logprob[ia], qb.Logprob[ib], pos)
		if differs {
			diff()
		}
		if dist {
			c.pairs = append(c.pairs, [2]int32{int32(ia), int32(ib)})
		}
		c.absBuf = append(c.absBuf, absd)
		c.posBuf = append(c.posBuf, int32(pos))
	})
	if err != nil {
		return err
	}
	if dist {
		c.addDist(s, st, qa, qb)
	}
	if st.Tokens == 0 {
		out.PosLo, out.PosHi = 0, 0
	}
	out.Profile = profile(c.posBuf, c.absBuf, out.PosLo, out.PosHi)
	c.done(out)
	return nil
}

// aligned reports whether both sides hold the sequence as contiguous runs from the same position p0 ≥ 0 on
// the summary's numbering: the common case, compared without walking positions.
func (s *Summary) aligned(qa, qb *Seq) (int64, bool) {
	if qa.Pos != nil || qb.Pos != nil {
		return 0, false
	}
	oa, err := s.offset(s.A, qa)
	if err != nil {
		return 0, false
	}
	ob, err := s.offset(s.B, qb)
	if err != nil {
		return 0, false
	}
	p0 := int64(qa.Start) - oa
	return p0, p0 >= 0 && p0 == int64(qb.Start)-ob
}

// seqFast compares two contiguous runs from p0: the same figures as the walk, in the same order.
func (c *comparer) seqFast(qa, qb *Seq, out *SeqStats, p0 int64) {
	st := &out.Stats
	na, nb := qa.Len(), qb.Len()
	n := min(na, nb)
	la, lb := qa.Logprob[:n], qb.Logprob[:n]
	var ta, tb []int32
	if qa.Token != nil && qb.Token != nil {
		ta, tb = qa.Token[:n], qb.Token[:n]
	}
	first := -1
	bins := min(n, ProfileBins)
	prof := make([]float32, bins)
	for i := range n {
		if ta != nil && ta[i] != tb[i] && ta[i] != NoToken && tb[i] != NoToken {
			st.TokenDiffers++
			if first < 0 {
				first = i
			}
			continue
		}
		if math.Float32bits(la[i]) == math.Float32bits(lb[i]) { // inline: most tokens
			c.equal(st, la[i])
			continue
		}
		absd, _ := c.token(out, la[i], lb[i], p0+int64(i))
		if first < 0 {
			first = i
		}
		k := i * bins / n
		if absd != absd || prof[k] != prof[k] {
			prof[k] = float32(math.NaN())
		} else if absd > prof[k] {
			prof[k] = absd
		}
	}
	st.OnlyA, st.OnlyB = int64(na-n), int64(nb-n)
	if first < 0 && na != nb {
		first = n
	}
	if first >= 0 {
		out.FirstDiff = p0 + int64(first)
	}
	out.PosLo, out.PosHi = 0, 0
	if st.Tokens > 0 {
		out.PosLo, out.PosHi = p0, p0+int64(n)
	}
	if n > 0 {
		out.Profile = prof
	}
}

// equal counts a token whose two log-probabilities have the same bits.
func (c *comparer) equal(st *Stats, x float32) {
	st.Tokens++
	st.Equal++
	if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
		return // the same NaN or ±Inf: equal, but outside the Δ metrics
	}
	c.equalFinite++
	st.SumA += float64(x)
	st.SumB += float64(x)
}

// token compares one token's log-probabilities (Tokens counted here); it returns |Δ| as a float32 (NaN for
// a non-finite difference) and whether the bits differ. Bitwise-equal tokens add Δ = 0, r = 1: their
// count goes into the sums once, at the end of the sequence (done).
func (c *comparer) token(out *SeqStats, xa, xb float32, pos int64) (float32, bool) {
	st := &out.Stats
	ba, bb := math.Float32bits(xa), math.Float32bits(xb)
	if ba == bb {
		c.equal(st, xa)
		return 0, false
	}
	st.Tokens++
	if u := f32.ULP(uint64(ba), uint64(bb)); u > st.MaxULP && u != fp.ULPNaNNumber {
		st.MaxULP = u
	}
	d := float64(xa) - float64(xb)
	if math.IsNaN(d) || math.IsInf(d, 0) {
		st.NonFinite++
		return float32(math.NaN()), true
	}
	st.Finite++
	ad := math.Abs(d)
	switch {
	case d == 0: // +0 against −0
		c.hist.Zero++
	case d < 0:
		c.hist.Neg[decade(ad)]++
	default:
		c.hist.Pos[decade(ad)]++
	}
	if ad > st.MaxAbs {
		st.MaxAbs, out.MaxAbsPos = ad, pos
	}
	r := math.Exp(d)
	st.SumA += float64(xa)
	st.SumB += float64(xb)
	st.sumAbs += ad
	st.sumDiff += d
	st.sumK1 -= d
	st.sumK2 += d * d / 2
	st.sumK3 += r - 1 - d
	st.sumIS += r
	st.sumR2 += r * r
	if d >= 0 {
		st.sumMult += r
	} else {
		st.sumMult += 1 / r
	}
	st.sumPD += math.Exp(float64(xb)) * math.Abs(r-1)
	st.ISMin, st.ISMax = min(st.ISMin, r), max(st.ISMax, r)
	if d < c.lo || d > c.hi {
		st.ISOutside++
	}
	return float32(ad), true
}

// done adds the sequence's bitwise-equal tokens (Δ = 0, r = 1) and turns its sums into means.
func (c *comparer) done(out *SeqStats) {
	st := &out.Stats
	if e := c.equalFinite; e > 0 {
		st.Finite += e
		c.hist.Zero += e
		st.sumIS += float64(e)
		st.sumR2 += float64(e)
		st.sumMult += float64(e)
		st.ISMin, st.ISMax = min(st.ISMin, 1), max(st.ISMax, 1)
	}
	out.LogRatioSum = st.sumDiff
	out.SeqIS = math.Exp(st.sumDiff)
	st.finish()
}

// profile is the largest |Δ| per position bucket (NaN wins: a non-finite difference).
func profile(pos []int32, abs []float32, lo, hi int64) []float32 {
	n := hi - lo
	if n <= 0 {
		return nil
	}
	bins := int(min(n, ProfileBins))
	p := make([]float32, bins)
	for i, x := range abs {
		k := int((int64(pos[i]) - lo) * int64(bins) / n)
		if x != x || p[k] != p[k] {
			p[k] = float32(math.NaN())
		} else if x > p[k] {
			p[k] = x
		}
	}
	return p
}

// distTerm is one token's full-vocabulary measures (docs/rl-metrics.md): computed apart from the walk so that
// the tokens of a sequence can be measured on several cores, then summed in token order (addDist), which keeps
// every sum's order, and so its bits, independent of the cores.
type distTerm struct {
	ok, greedyDiffer bool
	kl, tv, topK     float64 // tv before halving; topK the overlap fraction
}

// dist measures one token's logits rows (log-softmax in float64). Bitwise-equal rows, the common case, need
// no exponentials: their terms are exactly what the full computation gives (every difference is +0, the top k
// coincide), so only the validity scan runs.
func (c *comparer) dist(la, lb []float32, k int) distTerm {
	if bytes.Equal(fp.F32Bytes(la), fp.F32Bytes(lb)) {
		if !validRow(la) {
			return distTerm{}
		}
		return distTerm{ok: true, topK: float64(k) / float64(k)}
	}
	// one pass a row for its maximum, its argmax (the greedy token) and its validity
	mA, gA, okA := rowMax(la)
	mB, gB, okB := rowMax(lb)
	if !okA || !okB {
		return distTerm{}
	}
	lseA, lseB := c.logSumExp(la, mA), c.logSumExp(lb, mB)
	t := distTerm{ok: true, greedyDiffer: gA != gB}
	for j0 := 0; j0 < len(la); j0 += expBlock { // in blocks for expInto; the sums keep index order
		n := min(expBlock, len(la)-j0)
		xa, xb, ea, eb := c.xa[:n], c.xb[:n], c.ea[:n], c.eb[:n]
		for j := range xa {
			xa[j], xb[j] = float64(la[j0+j])-lseA, float64(lb[j0+j])-lseB // the log-probabilities
		}
		expInto(ea, xa)
		expInto(eb, xb)
		for j := range xa {
			lpa, lpb := xa[j], xb[j]
			pa, pb := ea[j], eb[j]
			if pb > 0 {
				t.kl += pb * (lpb - lpa)
			}
			t.tv += math.Abs(pa - pb)
		}
	}
	c.topA = topK(c.topA[:0], la, k)
	c.topB = topK(c.topB[:0], lb, k)
	inter := 0
	for _, x := range c.topA {
		if slices.Contains(c.topB, x) {
			inter++
		}
	}
	t.topK = float64(inter) / float64(k)
	return t
}

// distBlock is how many logits a share of a sequence's measures covers (whole tokens, at least one), so
// that a few long sequences still spread over every core.
const distBlock = 1 << 18

// distJob is one sequence's measures, split into blocks of tokens that any worker of Compare may take.
type distJob struct {
	next    atomic.Int64
	nblocks int
	run     func(c *comparer, block int)
	wg      sync.WaitGroup
}

// work runs blocks of j until none is left (with c's scratch space).
func (j *distJob) work(c *comparer) {
	for b := int(j.next.Add(1) - 1); b < j.nblocks; b = int(j.next.Add(1) - 1) {
		j.run(c, b)
		j.wg.Done()
	}
}

// addDist measures the token pairs c.pairs of one sequence, shared with Compare's idle helpers (c.help), and
// adds them to st in token order.
func (c *comparer) addDist(s *Summary, st *Stats, qa, qb *Seq) {
	v := s.A.Vocab
	k := min(s.Thresholds.TopK, v)
	n := len(c.pairs)
	if cap(c.terms) < n {
		c.terms = make([]distTerm, n)
	}
	terms := c.terms[:n]
	per := max(1, distBlock/v) // tokens per block
	j := &distJob{nblocks: (n + per - 1) / per}
	j.run = func(w *comparer, b int) {
		for i := b * per; i < min(n, (b+1)*per); i++ {
			p := c.pairs[i]
			terms[i] = w.dist(qa.Logits[int(p[0])*v:(int(p[0])+1)*v], qb.Logits[int(p[1])*v:(int(p[1])+1)*v], k)
		}
	}
	j.wg.Add(j.nblocks)
	for range min(c.helpers, j.nblocks-1) { // an offer per helper; one taken after the job is done returns at once
		select {
		case c.help <- j:
		default:
		}
	}
	j.work(c)
	j.wg.Wait()
	for _, t := range terms {
		if !t.ok {
			continue
		}
		st.Dist++
		if t.greedyDiffer {
			st.GreedyDiffer++
		}
		st.sumKL += t.kl
		st.sumTV += t.tv / 2
		st.sumTopK += t.topK
	}
}

// validRow is rowMax's verdict without the maximum: no NaN, no +Inf, some value above −Inf (on the bits).
func validRow(x []float32) bool {
	const negInf = 0xff800000
	var notNegInf uint32
	for _, v := range x {
		b := math.Float32bits(v)
		if b&0x7fffffff >= 0x7f800000 && b != negInf { // NaN or +Inf
			return false
		}
		notNegInf |= b ^ negInf
	}
	return notNegInf != 0
}

// rowMax is a logits row's largest value (as float64(max(...)) gives it: +0 above −0), the argmax
// greedyRow would give (the first of equal maxima) and whether the row is valid: no NaN, no +Inf, some value
// above −Inf. One pass over the bits' ordered images (floats in their order, +0 above −0, +NaNs above +Inf,
// −NaNs below −Inf) with their largest and smallest: what finiteMax and greedyRow gave in two passes, each
// with a branch per element on NaN (TestRowMaxMatchesPlain compares them on random and adversarial rows).
func rowMax(x []float32) (m float64, arg int32, ok bool) {
	const posInf, negInf = 0xff800000, 0x007fffff // ordered images of +Inf and −Inf
	hi, lo := uint32(0), ^uint32(0)
	arg = NoToken
	for i, v := range x {
		b := math.Float32bits(v)
		o := b ^ (uint32(int32(b)>>31) | 0x80000000)
		if o > hi { // the first of the largest images (rarely true after the first elements)
			hi, arg = o, int32(i)
		}
		lo = min(lo, o)
	}
	if hi >= posInf || lo < negInf || hi == negInf || len(x) == 0 { // NaN, +Inf, or every value −Inf
		return 0, NoToken, false
	}
	b := hi ^ (uint32(int32(^hi)>>31) | 0x80000000) // back from the ordered image
	m = float64(math.Float32frombits(b))
	if m == 0 { // ±0 the largest: greedyRow's first zero of either sign, which may be a −0 before the first +0
		arg = greedyRow(x)
	}
	return m, arg, true
}

// logSumExp of a valid logits row of largest value m (rowMax), in float64. The exponentials are math.Exp's
// (expInto, a block at a time), summed in index order.
func (c *comparer) logSumExp(x []float32, m float64) float64 {
	var sum float64
	for j0 := 0; j0 < len(x); j0 += expBlock {
		n := min(expBlock, len(x)-j0)
		xs, es := c.xa[:n], c.ea[:n]
		for j := range xs {
			xs[j] = float64(x[j0+j]) - m
		}
		expInto(es, xs)
		for _, e := range es {
			sum += e
		}
	}
	return m + math.Log(sum)
}

// topK appends the indexes of the k largest values (ties: the lower index first).
func topK(dst []int, x []float32, k int) []int {
	for i, v := range x {
		if len(dst) < k {
			dst = append(dst, i)
		} else if v <= x[dst[k-1]] {
			continue
		} else {
			dst[k-1] = i
		}
		for j := len(dst) - 1; j > 0 && x[dst[j]] > x[dst[j-1]]; j-- {
			dst[j], dst[j-1] = dst[j-1], dst[j]
		}
	}
	return dst
}

// greedyRow is the argmax of a logits row (the first of equal maxima; a row with a NaN gives NoToken).
func greedyRow(row []float32) int32 {
	best := NoToken
	for k, x := range row {
		if x != x {
			return NoToken
		}
		if best == NoToken || x > row[best] {
			best = int32(k)
		}
	}
	return best
}

// merge adds a sequence's counts and sums (in the caller's order).
func (o *Stats) merge(q *Stats) {
	o.Tokens += q.Tokens
	o.Equal += q.Equal
	o.Finite += q.Finite
	o.NonFinite += q.NonFinite
	o.TokenDiffers += q.TokenDiffers
	o.SampleDiffers += q.SampleDiffers
	o.OnlyA += q.OnlyA
	o.OnlyB += q.OnlyB
	o.MaxULP = max(o.MaxULP, q.MaxULP)
	o.MaxAbs = max(o.MaxAbs, q.MaxAbs)
	if q.Finite > 0 {
		o.ISMin, o.ISMax = min(o.ISMin, q.ISMin), max(o.ISMax, q.ISMax)
	}
	o.ISOutside += q.ISOutside
	o.SumA += q.SumA
	o.SumB += q.SumB
	o.Dist += q.Dist
	o.GreedyDiffer += q.GreedyDiffer
	o.sumAbs += q.sumAbs
	o.sumDiff += q.sumDiff
	o.sumK1 += q.sumK1
	o.sumK2 += q.sumK2
	o.sumK3 += q.sumK3
	o.sumIS += q.sumIS
	o.sumR2 += q.sumR2
	o.sumMult += q.sumMult
	o.sumPD += q.sumPD
	o.sumKL += q.sumKL
	o.sumTV += q.sumTV
	o.sumTopK += q.sumTopK
}

// finish turns sums into means.
func (o *Stats) finish() {
	if o.Finite == 0 {
		o.ISMin, o.ISMax = 0, 0
	} else {
		n := float64(o.Finite)
		o.MeanAbs, o.MeanDiff = o.sumAbs/n, o.sumDiff/n
		o.K1, o.K2, o.K3 = o.sumK1/n, o.sumK2/n, o.sumK3/n
		o.ISMean, o.Chi2 = o.sumIS/n, o.sumR2/n-1
		o.MultProbErr, o.ProbDiff = o.sumMult/n, o.sumPD/n
		o.PPLA, o.PPLB = math.Exp(-o.SumA/n), math.Exp(-o.SumB/n)
		o.PPLRatio = math.Exp((o.SumB - o.SumA) / n)
	}
	o.LogRatioSum = o.sumDiff
	if o.Dist > 0 {
		n := float64(o.Dist)
		o.KL, o.TV, o.TopKOverlap = o.sumKL/n, o.sumTV/n, o.sumTopK/n
	}
}

// decades[j] is 10^(j+1+DeltaHistLo), bin j's upper bound.
var decades = func() (d [DeltaBins - 1]float64) {
	for j := range d {
		d[j], _ = strconv.ParseFloat("1e"+strconv.Itoa(j+1+DeltaHistLo), 64)
	}
	return d
}()

// decade is |Δ|'s DeltaHist bin: the number of bounds 10^k it reaches (bounds parsed exactly, no log).
func decade(x float64) int {
	j, _ := slices.BinarySearch(decades[:], x)
	if j < len(decades) && decades[j] == x {
		j++
	}
	return j
}

// detail keeps |Δ| at every compared position of one of the worst sequences.
func (s *Summary) detail(q *SeqStats) {
	qa, qb := &s.A.Seqs[s.A.Find(q.Seq)], &s.B.Seqs[s.B.Find(q.Seq)]
	_ = s.walk(qa, qb, func(pos int64, ia, ib int) {
		if ia < 0 || ib < 0 {
			return
		}
		if ta, tb := qa.TokenAt(ia), qb.TokenAt(ib); ta != NoToken && tb != NoToken && ta != tb {
			return
		}
		d := math.Abs(float64(qa.Logprob[ia]) - float64(qb.Logprob[ib]))
		if qa.Logprob[ia] == qb.Logprob[ib] {
			d = 0
		}
		q.DetailPos = append(q.DetailPos, int32(pos))
		q.DetailAbs = append(q.DetailAbs, float32(d))
	})
}

// Find returns the index in Seqs of sequence id, or −1 (a linear search: Seqs are sorted worst first).
func (s *Summary) Find(id int64) int {
	for i := range s.Seqs {
		if s.Seqs[i].Seq == id {
			return i
		}
	}
	return -1
}
