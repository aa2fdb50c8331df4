package engine

import (
	"sync/atomic"
	"testing"

	"bitalign/kernels"
)

// batchingCPU is the CPU backend with AttentionBatch: a layer's sequences through the CPU's own Attention in
// reverse order, counted, so the forward's batched path (the CUDA backend's, one launch a layer) runs on CI.
type batchingCPU struct {
	*CPU
	batches, seqs *atomic.Int64
}

func (b batchingCPU) AttentionBatch(p kernels.Profile, seqs []AttnSeq, heads, kvHeads, hd int, dt kernels.DType, o AttnOptions) bool {
	b.batches.Add(1)
	b.seqs.Add(int64(len(seqs)))
	for i := len(seqs) - 1; i >= 0; i-- {
		a := seqs[i]
		b.CPU.Attention(p, a.Out, a.Q, a.K, a.V, a.Start, a.N, heads, kvHeads, hd, dt, o)
	}
	return true
}

// TestAttentionBatchForward: a forward whose backend batches a layer's attentions (AttentionBatcher) gives the
// bits of one Attention call a sequence: the sampler (continuous batching: prefill chunks and decode steps of
// several sequences in one forward) and the trainer (batch 8), TP 1 and 2, canonical and tc, outputs and
// captures bitwise; and the batched path ran, with more than one sequence a call.
func TestAttentionBatchForward(t *testing.T) {
	for _, p := range []kernels.Profile{kernels.Canonical, kernels.TC} {
		cfg := tcConfigs()[0]
		m := NewRandom(cfg, 5)
		ps, mn := tinyPrompts(cfg)
		for _, tp := range []int{1, 2} {
			var batches, seqs atomic.Int64
			be := func(int) (Backend, error) { return batchingCPU{CPU: NewCPU(), batches: &batches, seqs: &seqs}, nil }
			cs, ct, csd, ctd := sampleThenTrain(t, m, ps, mn, tp, p, nil)
			bs, bt, bsd, btd := sampleThenTrain(t, m, ps, mn, tp, p, be)
			if msg := sameOutputs(cs, bs); msg != "" {
				t.Errorf("%v tp=%d sampler: batched attention vs one a sequence: %s", p, tp, msg)
			}
			if msg := sameOutputs(ct, bt); msg != "" {
				t.Errorf("%v tp=%d trainer: batched attention vs one a sequence: %s", p, tp, msg)
			}
			for _, pair := range [][2]string{{csd, bsd}, {ctd, btd}} {
				if d := compare(t, cfg, pair[0], pair[1]); d != nil {
					t.Errorf("%v tp=%d: the batched forward's capture differs at %v", p, tp, d)
				}
			}
			if batches.Load() == 0 || seqs.Load() <= batches.Load() {
				t.Errorf("%v tp=%d: %d batched calls over %d sequences: the batched path did not run as it should", p, tp, batches.Load(), seqs.Load())
			}
		}
	}
}
