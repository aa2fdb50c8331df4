package kernels

import (
	"fmt"
	"math"
)

// Reducer is what the vocabulary-parallel ops need from a communicator; nvls.Comm satisfies it. A nil Reducer
// means one rank holding the whole vocabulary.
type Reducer interface {
	Rank() int
	Size() int
	AllReduce(buf []float32) error    // sum, fixed tree over ranks (docs/arithmetic.md §12)
	AllReduceMax(buf []float32) error // max, NaN wins
}

// rowMax is the ascending scan of docs/arithmetic.md §9 (NaN anywhere gives NaN).
func rowMax(x []float32) float32 {
	m := x[0]
	for _, v := range x {
		if v != v {
			return float32(math.NaN())
		}
		if v > m {
			m = v
		}
	}
	return m
}

// logSoftmaxStats computes, per row, the max m (all ranks) and lse = Log(Σ exp(x-m)) for this rank's
// logits (T, vLocal). Canonical: 8-segment tree over the full vocabulary, the rank's subtree finished by the
// all-reduce. Standard: one sequential chain over the local columns.
func logSoftmaxStats(p Profile, logits []float32, T, vLocal int, c Reducer) (m, lse []float32, err error) {
	tp, rank := 1, 0
	if c != nil {
		tp, rank = c.Size(), c.Rank()
	}
	G, err := LocalSegments("LogSoftmax", vLocal, tp)
	if err != nil {
		return nil, nil, err
	}
	_ = rank
	m = make([]float32, T)
	for t := 0; t < T; t++ {
		m[t] = rowMax(logits[t*vLocal : (t+1)*vLocal])
	}
	if c != nil {
		if err := c.AllReduceMax(m); err != nil {
			return nil, nil, fmt.Errorf("kernels: LogSoftmax: max all-reduce: %w", err)
		}
	}
	for t := range m {
		if m[t] == 0 {
			m[t] = 0 // +0: the sign of a zero max must not depend on which rank held it
		}
	}
	bounds := SegBounds(vLocal, G)
	if p == Standard {
		bounds = []int{0, vLocal}
	}
	part := make([]float32, len(bounds)-1)
	sum := make([]float32, T)
	for t := 0; t < T; t++ {
		row := logits[t*vLocal : (t+1)*vLocal]
		for s := range part {
			acc := float32(0)
			for _, v := range row[bounds[s]:bounds[s+1]] {
				acc = float32(acc + Exp(float32(v-m[t])))
			}
			part[s] = acc
		}
		if p == Standard {
			sum[t] = part[0]
		} else {
			sum[t] = TreeSum(part) // the rank's subtree; the all-reduce finishes the same tree
		}
	}
	if c != nil {
		if err := c.AllReduce(sum); err != nil {
			return nil, nil, fmt.Errorf("kernels: LogSoftmax: sum all-reduce: %w", err)
		}
	}
	for t := range sum {
		sum[t] = Log(sum[t])
	}
	return m, sum, nil
}

// LogSoftmaxForward is the log-softmax of every logit (docs/arithmetic.md §9), float32.
// logits is this rank's (T, vLocal) shard of a V = vLocal·tp vocabulary (tp = c.Size(), columns
// [rank·vLocal, (rank+1)·vLocal)), out is (T, vLocal). c may be nil (tp = 1).
func LogSoftmaxForward(p Profile, out, logits []float32, T, vLocal int, c Reducer) error {
	checkLen("LogSoftmaxForward", "logits", logits, T*vLocal)
	checkLen("LogSoftmaxForward", "out", out, T*vLocal)
	m, lse, err := logSoftmaxStats(p, logits, T, vLocal, c)
	if err != nil {
		return err
	}
	for t := 0; t < T; t++ {
		for j, v := range logits[t*vLocal : (t+1)*vLocal] {
			d := float32(float32(v-m[t]) + 0)
			out[t*vLocal+j] = F32.Round(float32(d - lse[t]))
		}
	}
	return nil
}

// LogProbs writes out[t] = log p(targets[t]) under the log-softmax of row t (docs/arithmetic.md §9).
// logits is this rank's (T, vLocal) shard (as LogSoftmaxForward), targets is (T) global token ids, out is (T);
// every rank gets the same bits. A target outside [0, V) is an error; c may be nil (tp = 1).
func LogProbs(p Profile, out, logits []float32, targets []int32, T, vLocal int, c Reducer) error {
	checkLen("LogProbs", "logits", logits, T*vLocal)
	checkLen("LogProbs", "out", out, T)
	if len(targets) < T {
		panic(fmt.Sprintf("kernels: LogProbs: targets has %d elements, T = %d", len(targets), T))
	}
	tp, rank := 1, 0
	if c != nil {
		tp, rank = c.Size(), c.Rank()
	}
	V := vLocal * tp
	for t := 0; t < T; t++ {
		if targets[t] < 0 || int(targets[t]) >= V {
			return fmt.Errorf("kernels: LogProbs: target %d at row %d outside the vocabulary [0, %d)", targets[t], t, V)
		}
	}
	m, lse, err := logSoftmaxStats(p, logits, T, vLocal, c)
	if err != nil {
		return err
	}
	d := make([]float32, T)
	for t := 0; t < T; t++ {
		j := int(targets[t]) - rank*vLocal
		if j >= 0 && j < vLocal {
			d[t] = float32(float32(logits[t*vLocal+j]-m[t]) + 0) // + 0 turns -0 into +0
		}
	}
	if c != nil {
		if err := c.AllReduce(d); err != nil { // one owner, zeros elsewhere: exact
			return fmt.Errorf("kernels: LogProbs: target all-reduce: %w", err)
		}
	}
	for t := 0; t < T; t++ {
		out[t] = F32.Round(float32(d[t] - lse[t]))
	}
	return nil
}
