package session

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"bitalign/capture"
	"bitalign/engine"
)

// benchMoE is one side of a MoE capture for the routing benchmark: layers MoE layers of seqs sequences of
// tokens each, E experts, top k, every tensor one [tokens, w] per (op, seq); flip moves 1 % of B's router
// logits up by 0.05 (and its top-k follow).
func benchMoE(b *testing.B, path, side string, layers, seqs, tokens, e, k int, flip bool) *capture.Capture {
	r := rand.New(rand.NewPCG(7, 7))
	var ts []capture.Tensor
	put := func(op string, idx int32, q int, dt capture.DType, w int, data []byte) {
		ts = append(ts, capture.Tensor{Seq: int64(q), NTok: int64(tokens), Op: op, Index: idx, Role: "out", DType: dt,
			Shape: []int64{int64(tokens), int64(w)}, Shard: capture.NoShard, Data: data})
	}
	fr := rand.New(rand.NewPCG(9, 9))
	for l := 0; l < layers; l++ {
		for q := 0; q < seqs; q++ {
			logits := make([]float32, tokens*e)
			for i := range logits {
				logits[i] = float32(r.NormFloat64())
				if flip && fr.Float64() < 0.01 {
					logits[i] += 0.05
				}
			}
			ids := make([]byte, 4*tokens*k)
			ws := make([]byte, 4*tokens*k)
			vals := make([]float64, e)
			for t := 0; t < tokens; t++ {
				for j := range vals {
					vals[j] = float64(logits[t*e+j])
				}
				top := RankExperts(vals, nil)
				for j := 0; j < k; j++ {
					binary.LittleEndian.PutUint32(ids[4*(t*k+j):], uint32(top[j].ID))
					binary.LittleEndian.PutUint32(ws[4*(t*k+j):], math.Float32bits(float32(1/float64(k))))
				}
			}
			base := int32(10 * (l + 1))
			put(engine.LayerOp(l, capture.LayerRouter), base+1, q, capture.F32, e, f32Bytes(logits))
			put(engine.LayerOp(l, capture.LayerExperts), base+2, q, capture.I32, k, ids)
			put(engine.LayerOp(l, capture.LayerExpertWeights), base+3, q, capture.F32, k, ws)
		}
	}
	if err := capture.WriteAll(path, meta(side, 1, 0), ts); err != nil {
		b.Fatal(err)
	}
	return openTestCapture(b, path)
}

// BenchmarkDiffMoE is the whole Diff of a MoE pair (8 layers × 8 sequences × 1024 tokens, 64 experts, top 8:
// router logits, experts and weights) and, separately, its routing comparison (compareRouting) over the
// same captures: the routing's share of the diff.
func BenchmarkDiffMoE(b *testing.B) {
	dir := b.TempDir()
	ca := benchMoE(b, filepath.Join(dir, "a.arrow"), "trainer", 8, 8, 1024, 64, 8, false)
	cb := benchMoE(b, filepath.Join(dir, "b.arrow"), "sampler", 8, 8, 1024, 64, 8, true)
	var tDiff, tRoute time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		rep, err := Diff(context.Background(), ca, cb)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := compareRouting(rep, indexSide(ca), indexSide(cb), nil, nil, nil); err != nil {
			b.Fatal(err)
		}
		tRoute += time.Since(t1)
		tDiff += t1.Sub(t0)
		if f, _ := rep.Routing.Flipped(); f == 0 {
			b.Fatal("no flip planted")
		}
	}
	b.ReportMetric(tDiff.Seconds()*1e3/float64(b.N), "diff-ms")
	b.ReportMetric(tRoute.Seconds()*1e3/float64(b.N), "routing-ms")
	b.ReportMetric(tRoute.Seconds()/tDiff.Seconds(), "routing-share")
}
