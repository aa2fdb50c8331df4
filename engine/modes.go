package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"bitalign/capture"
	"bitalign/kernels"
)

// Sides of a capture, as Meta.Side spells them.
const (
	SideTrainer = "trainer"
	SideSampler = "sampler"
	SideReplay  = "replay"
)

// SamplingParams is the canonical sampling rule's parameters (temperature ≤ 0: greedy argmax).
type SamplingParams struct {
	Temperature float32 `json:"temperature"`
	TopK        int     `json:"top_k"` // 0: no top-k
	TopP        float32 `json:"top_p"` // 0 or 1: no top-p
}

// DefaultSampling samples from the full distribution at temperature 1.
var DefaultSampling = SamplingParams{Temperature: 1, TopP: 1}

// RunOptions are the options the trainer and the sampler share.
type RunOptions struct {
	TP         int             // tensor-parallel ranks (1, 2, 4, 8); 0 means 1
	Profile    kernels.Profile // canonical (default) or standard (vendor-like kernels and ring all-reduce)
	Seed       uint64          // sampling key
	Step       int64           // the step recorded in the capture
	SeqIDs     []int64         // sequence ids (default 0, 1, 2, ...)
	Sampling   *SamplingParams // nil: DefaultSampling
	CaptureDir string          // "" records nothing; else DIR/rank0.arrow, DIR/rank1.arrow, ... (must not exist)
	Fault      string          // a Faults() name; applied only if the fault arises on this run's side
	FaultLayer int             // the layer of a layered fault
	Backend    BackendFactory  // nil: the CPU backend
	// Collectives makes the TP group's communicators (nil: nvls.NewCPUGroup). CUDACollectives puts them on
	// the GPUs (nvls GPU transport, same bits); the ring order of the standard profile stays on the CPU.
	Collectives CollectivesFactory
	// Routing replays another run's routing in every mixture-of-experts layer (RoutingFromCapture); nil: the
	// run's own router decides.
	Routing *Routing
	// Ops, when set, is which ops the capture records (the others are computed, not written); nil: every op.
	Ops func(op string) bool
	// Fingerprints, when set, is which of the recorded ops are written as fingerprint tensors only (role
	// fp.out, docs/capture-format.md): tokens, logprobs and sample always in full (capture.FullAlways), and
	// column-sharded ops of a TP > 1 run too (a shard's fingerprints are not those of the full rows).
	Fingerprints func(op string) bool
	// Phases, when set, receives the run's phase times (replay --timings).
	Phases *Phases
	// StopLayer > 0 runs layers 0..StopLayer-1 only: the forward stops there (no final norm, logits,
	// logprobs or samples: Output's sequences have none). Train only; 0 or ≥ the model's layers: the whole
	// forward.
	StopLayer int
}

// TrainOptions configure Train.
type TrainOptions struct {
	RunOptions
	Batch      int   // sequences per packed forward; 0: all at once
	PromptLens []int // prompt length P of each sequence: `sample` is recorded at positions P-1..N-2 (default 1)
}

// SampleOptions configure Sample.
type SampleOptions struct {
	RunOptions
	Slots  int   // most sequences in flight (continuous batching); 0: all
	Static bool  // static batching: admit new sequences only when every slot is free
	MaxNew []int // new tokens per prompt (≥ 1); a single value applies to all
	EOS    int32 // a sampled EOS ends its sequence; < 0: none
	UseEOS bool  // whether EOS is used
}

// SeqOutput is one sequence's result: every token, the log-probabilities and the canonical samples.
type SeqOutput struct {
	ID       int64
	Tokens   []int32   // t0..t(N-1)
	Prompt   int       // P
	Logprobs []float32 // positions 0..N-2: log p(t(p+1) | t0..tp)
	Samples  []int32   // positions P-1..N-2: what the sampling rule draws at p
}

// Output is the result of a Train or Sample call, sequences in input order.
type Output struct {
	Seqs []SeqOutput
}

func (o *RunOptions) fill(n int) error {
	if o.TP == 0 {
		o.TP = 1
	}
	if o.Sampling == nil {
		sp := DefaultSampling
		o.Sampling = &sp
	}
	if o.SeqIDs == nil {
		for i := 0; i < n; i++ {
			o.SeqIDs = append(o.SeqIDs, int64(i))
		}
	}
	if len(o.SeqIDs) != n {
		return fmt.Errorf("engine: %d sequence ids for %d sequences", len(o.SeqIDs), n)
	}
	if o.StopLayer < 0 {
		return fmt.Errorf("engine: stop layer %d: want 0 (the whole forward) or a layer count", o.StopLayer)
	}
	seen := map[int64]bool{}
	for _, id := range o.SeqIDs {
		if seen[id] {
			return fmt.Errorf("engine: sequence id %d used twice", id)
		}
		seen[id] = true
	}
	return nil
}

// meta is a run's capture metadata; seqs (the trainer's full sequences) give the final tokens, except for
// open-ended ones whose last token is a placeholder.
func (o *RunOptions) meta(side string, batch int, p kernels.Profile, seqs [][]int32, openEnded []bool) capture.Meta {
	ex := captureExtra{Sampling: o.Sampling}
	for i, s := range seqs {
		if openEnded != nil && openEnded[i] {
			continue
		}
		ex.FinalTokens = append(ex.FinalTokens, [3]int64{o.Step, o.SeqIDs[i], int64(s[len(s)-1])})
	}
	extra, _ := json.Marshal(ex)
	return capture.Meta{Side: side, KernelProfile: p.String(), BatchSize: batch, Seed: o.Seed, Step: o.Step,
		Producer: "bitalign engine", Extra: extra}
}

// Train runs the trainer mode: each sequence t0..t(N-1) is processed at positions 0..N-2 in one prefill
// forward, Batch sequences packed per forward, over TP ranks. It records the log-probability of each next token
// and the token the sampling rule would draw at positions P-1..N-2.
func (m *Model) Train(ctx context.Context, seqs [][]int32, opts TrainOptions) (*Output, error) {
	return m.train(ctx, seqs, opts, SideTrainer, nil)
}

// train is Train with the capture's side and, per sequence, whether its last token is unknown (a replay of a
// capture that does not say what followed): then the last position's log-probability is not recorded.
func (m *Model) train(ctx context.Context, seqs [][]int32, opts TrainOptions, side string, openEnded []bool) (*Output, error) {
	if err := opts.fill(len(seqs)); err != nil {
		return nil, err
	}
	v, _, err := runVariant(side, opts.RunOptions, m.Config)
	if err != nil {
		return nil, err
	}
	maxLen := 0
	for i, s := range seqs {
		if len(s) < 2 {
			return nil, fmt.Errorf("engine: train: sequence %d has %d tokens, needs at least 2", i, len(s))
		}
		if err := m.checkTokens(s); err != nil {
			return nil, fmt.Errorf("engine: train: sequence %d: %v", i, err)
		}
		maxLen = max(maxLen, len(s))
	}
	if opts.PromptLens != nil && len(opts.PromptLens) != len(seqs) {
		return nil, fmt.Errorf("engine: train: %d prompt lengths for %d sequences", len(opts.PromptLens), len(seqs))
	}
	batch := opts.Batch
	if batch <= 0 {
		batch = len(seqs)
	}
	g, err := newGroup(m, groupOptions{tp: opts.TP, v: v, backend: opts.Backend, collectives: opts.Collectives, maxPos: maxLen,
		captureDir: opts.CaptureDir, meta: opts.meta(side, batch, opts.Profile, seqs, openEnded), routing: opts.Routing,
		ops: opts.Ops, fps: opts.Fingerprints, stopLayer: opts.StopLayer, phases: opts.Phases})
	if err != nil {
		return nil, err
	}
	out := &Output{}
	err = func() error {
		for b0 := 0; b0 < len(seqs); b0 += batch {
			if err := ctx.Err(); err != nil {
				return err
			}
			var segs []segment
			for i := b0; i < min(b0+batch, len(seqs)); i++ {
				P := 1
				if opts.PromptLens != nil {
					P = opts.PromptLens[i]
				}
				if P < 1 || P > len(seqs[i]) {
					return fmt.Errorf("engine: train: sequence %d: prompt length %d outside [1, %d]", i, P, len(seqs[i]))
				}
				segs = append(segs, segment{seq: opts.SeqIDs[i], start: 0, toks: seqs[i][:len(seqs[i])-1], sampleFrom: P - 1})
			}
			t0 := time.Now()
			res, err := g.forward(segs)
			t0 = opts.Phases.Since("forward (with the recorder's copies)", t0)
			if err != nil {
				return err
			}
			if res == nil { // stopped at StopLayer: no logits, so no logprobs or samples
				for j, s := range segs {
					out.Seqs = append(out.Seqs, SeqOutput{ID: s.seq, Tokens: append([]int32(nil), seqs[b0+j]...), Prompt: s.sampleFrom + 1})
					g.dropCache(s.seq)
				}
				continue
			}
			var targets []int32
			for j, s := range segs {
				targets = append(targets, seqs[b0+j][1:len(s.toks)+1]...)
			}
			lps, err := g.logprobs(targets)
			t0 = opts.Phases.Since("logprobs", t0)
			if err != nil {
				return err
			}
			row := 0
			for j, s := range segs {
				full := seqs[b0+j]
				so := SeqOutput{ID: s.seq, Tokens: append([]int32(nil), full...), Prompt: s.sampleFrom + 1}
				so.Logprobs = lps[row : row+len(s.toks)]
				if openEnded != nil && openEnded[b0+j] {
					so.Logprobs = so.Logprobs[:len(s.toks)-1] // the target of the last position is unknown
				}
				for p := s.sampleFrom; p < len(s.toks); p++ {
					so.Samples = append(so.Samples, drawToken(res.row(row+p), *opts.Sampling, opts.Seed, s.seq, p))
				}
				if len(so.Logprobs) > 0 {
					if err := g.recordF32(OpLogprobs, s.seq, 0, so.Logprobs); err != nil {
						return err
					}
				}
				if len(so.Samples) > 0 {
					if err := g.recordI32(OpSample, s.seq, s.sampleFrom, so.Samples); err != nil {
						return err
					}
				}
				row += len(s.toks)
				g.dropCache(s.seq)
				out.Seqs = append(out.Seqs, so)
			}
			opts.Phases.Since("sample, record logprobs and samples", t0)
		}
		return nil
	}()
	if cerr := g.close(err != nil); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (m *Model) checkTokens(toks []int32) error {
	for p, t := range toks {
		if t < 0 || int(t) >= m.Config.Vocab {
			return fmt.Errorf("token %d at position %d outside the vocabulary [0, %d)", t, p, m.Config.Vocab)
		}
	}
	return nil
}

// active is a sequence in a sampler slot.
type active struct {
	idx       int // index into the prompts
	so        *SeqOutput
	maxNew    int
	prefilled bool
}

// Sample runs the sampler mode: each prompt is prefilled, then decoded one token per step from the KV cache,
// with at most Slots sequences in flight; sequences join as slots free and leave after their MaxNew tokens or
// an EOS. Every forward packs the in-flight sequences (prefill chunks and decode tokens together).
func (m *Model) Sample(ctx context.Context, prompts [][]int32, opts SampleOptions) (*Output, error) {
	if err := opts.fill(len(prompts)); err != nil {
		return nil, err
	}
	if opts.StopLayer > 0 {
		return nil, fmt.Errorf("engine: sample: a stop layer (%d) leaves no logits to sample from", opts.StopLayer)
	}
	v, stale, err := runVariant(SideSampler, opts.RunOptions, m.Config)
	if err != nil {
		return nil, err
	}
	model := m
	if stale >= 0 {
		model = m.withStaleLayer(stale)
	}
	maxNew := func(i int) int {
		if len(opts.MaxNew) == 1 {
			return opts.MaxNew[0]
		}
		return opts.MaxNew[i]
	}
	if len(opts.MaxNew) != 1 && len(opts.MaxNew) != len(prompts) {
		return nil, fmt.Errorf("engine: sample: %d max-new-token counts for %d prompts", len(opts.MaxNew), len(prompts))
	}
	maxLen := 0
	for i, p := range prompts {
		if len(p) < 1 {
			return nil, fmt.Errorf("engine: sample: prompt %d is empty", i)
		}
		if err := m.checkTokens(p); err != nil {
			return nil, fmt.Errorf("engine: sample: prompt %d: %v", i, err)
		}
		if maxNew(i) < 1 {
			return nil, fmt.Errorf("engine: sample: prompt %d: max new tokens %d < 1", i, maxNew(i))
		}
		maxLen = max(maxLen, len(p)+maxNew(i))
	}
	slots := opts.Slots
	if slots <= 0 || slots > len(prompts) {
		slots = len(prompts)
	}
	g, err := newGroup(model, groupOptions{tp: opts.TP, v: v, backend: opts.Backend, collectives: opts.Collectives, maxPos: maxLen,
		captureDir: opts.CaptureDir, meta: opts.meta(SideSampler, slots, opts.Profile, nil, nil), routing: opts.Routing,
		fps: opts.Fingerprints, phases: opts.Phases})
	if err != nil {
		return nil, err
	}
	results := make([]SeqOutput, len(prompts))
	err = func() error {
		inFlight := make([]*active, slots)
		next := 0
		for {
			if err := ctx.Err(); err != nil {
				return err
			}
			busy := 0
			for _, a := range inFlight {
				if a != nil {
					busy++
				}
			}
			if !opts.Static || busy == 0 {
				for s := range inFlight {
					if inFlight[s] == nil && next < len(prompts) {
						so := &results[next]
						*so = SeqOutput{ID: opts.SeqIDs[next], Tokens: append([]int32(nil), prompts[next]...), Prompt: len(prompts[next])}
						inFlight[s] = &active{idx: next, so: so, maxNew: maxNew(next)}
						next++
						busy++
					}
				}
			}
			if busy == 0 {
				return nil
			}
			var segs []segment
			var slotOf []int
			for s, a := range inFlight {
				if a == nil {
					continue
				}
				seg := segment{seq: a.so.ID, slot: s}
				if !a.prefilled {
					seg.toks = a.so.Tokens
					seg.sampleFrom = len(seg.toks) - 1
				} else {
					seg.start = len(a.so.Tokens) - 1
					seg.toks = a.so.Tokens[seg.start:]
					seg.sampleFrom = seg.start
				}
				seg.toks = append([]int32(nil), seg.toks...)
				segs = append(segs, seg)
				slotOf = append(slotOf, s)
			}
			res, err := g.forward(segs)
			if err != nil {
				return err
			}
			// Draw each sequence's next token from its last row, then the log-probabilities of every row's next
			// token (prompt tokens in a prefill chunk, the drawn token last).
			var targets []int32
			row := 0
			for j, seg := range segs {
				a := inFlight[slotOf[j]]
				n := len(seg.toks)
				key := seg.seq
				if v.rngSlot {
					key = int64(seg.slot) // the rng-slot fault: noise keyed by batch slot
				}
				tok := drawToken(res.row(row+n-1), *opts.Sampling, opts.Seed, key, seg.start+n-1)
				a.so.Tokens = append(a.so.Tokens, tok)
				a.so.Samples = append(a.so.Samples, tok)
				targets = append(targets, a.so.Tokens[seg.start+1:seg.start+n+1]...)
				row += n
			}
			lps, err := g.logprobs(targets)
			if err != nil {
				return err
			}
			row = 0
			for j, seg := range segs {
				a := inFlight[slotOf[j]]
				n := len(seg.toks)
				lp := lps[row : row+n]
				a.so.Logprobs = append(a.so.Logprobs, lp...)
				if err := g.recordF32(OpLogprobs, seg.seq, seg.start, lp); err != nil {
					return err
				}
				tok := a.so.Tokens[len(a.so.Tokens)-1]
				if err := g.recordI32(OpSample, seg.seq, seg.start+n-1, []int32{tok}); err != nil {
					return err
				}
				a.prefilled = true
				row += n
				if len(a.so.Tokens)-a.so.Prompt >= a.maxNew || (opts.UseEOS && tok == opts.EOS) {
					g.dropCache(seg.seq)
					inFlight[slotOf[j]] = nil
				}
			}
		}
	}()
	if cerr := g.close(err != nil); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	return &Output{Seqs: results}, nil
}

// drawToken applies the canonical sampling rule to one full logits row with key (seed, seq, pos).
func drawToken(logits []float32, sp SamplingParams, seed uint64, seq int64, pos int) int32 {
	return kernels.Sample(logits, kernels.SampleParams{Temperature: sp.Temperature, TopK: sp.TopK, TopP: sp.TopP, Seed: seed}, seq, int64(pos))
}
