package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"bitalign/capture"
	"bitalign/kernels"
)

// captureExtra is what the engine adds to a capture's Meta.Extra so that a replay needs nothing else.
type captureExtra struct {
	Sampling *SamplingParams `json:"sampling,omitempty"`
	// FinalTokens: for each sequence, the token after the last processed position (the target of the last
	// log-probability), which `tokens` does not hold: [[step, seq, token], ...].
	FinalTokens [][3]int64 `json:"final_tokens,omitempty"`
}

// ReplayOptions configure Replay.
type ReplayOptions struct {
	TP      int             // default 1
	Profile kernels.Profile // default canonical
	Backend BackendFactory  // default CPU
	// Collectives makes the TP communicators (nil: the CPU transport).
	Collectives CollectivesFactory
	Batch       int // sequences per forward; 0: all
	// Routing replays another capture's routing in the MoE layers (RoutingFromCapture); nil: the model's own.
	Routing *Routing
	// Ops and StopLayer: as RunOptions (record only some ops; stop the forward after the last layer they need).
	Ops       func(op string) bool
	StopLayer int
	// Fingerprints and Phases: as RunOptions (which recorded ops are written as fingerprints; phase times).
	Fingerprints func(op string) bool
	Phases       *Phases
}

// Replay re-executes the step captured at capturePath from its token ids with the trainer mode (every
// sequence in one prefill; with the canonical kernels the bits are those of any batch, TP or schedule) and
// writes the replay capture to outDir (side "replay"). The capture must hold one step with `tokens` covering
// positions 0..n-1 of each sequence. The target of the last position comes from the capture's meta
// (engine captures), else from `sample` there (the sampler's drawn token); when neither exists the last
// position gets no log-probability. `sample` is recorded from the capture's first sampled position.
func (m *Model) Replay(ctx context.Context, capturePath, outDir string, opts ReplayOptions) (*Output, error) {
	start := time.Now()
	c, err := capture.Open(capturePath)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	meta := c.Meta()
	var extra captureExtra
	if len(meta.Extra) > 0 {
		json.Unmarshal(meta.Extra, &extra) // foreign extras are fine: the fields are optional
	}
	type seqInfo struct {
		toks                    map[int]int32
		firstSample, lastSample int
		sampleAt                map[int]int32
	}
	seqs := map[int64]*seqInfo{}
	var step int64
	stepSet := false
	for i := 0; i < c.Len(); i++ {
		e := c.Entry(i)
		if e.Op != OpTokens && e.Op != OpSample {
			continue
		}
		if e.Role != "" && e.Role != "out" {
			continue
		}
		if !stepSet {
			step, stepSet = e.Step, true
		} else if e.Step != step {
			return nil, fmt.Errorf("engine: replay: %s holds steps %d and %d; replay one step at a time", c.Path(), step, e.Step)
		}
		t, err := c.Tensor(i)
		if err != nil {
			return nil, err
		}
		if t.DType != capture.I32 || t.NTok <= 0 || int64(len(t.Data)) != 4*t.NTok {
			return nil, fmt.Errorf("engine: replay: %s: %s seq %d pos %d is not one i32 per position", c.Path(), t.Op, t.Seq, t.Pos)
		}
		si := seqs[t.Seq]
		if si == nil {
			si = &seqInfo{toks: map[int]int32{}, sampleAt: map[int]int32{}, firstSample: -1, lastSample: -1}
			seqs[t.Seq] = si
		}
		vals := make([]int32, t.NTok)
		decodeI32(t.Data, vals)
		for j, v := range vals {
			p := int(t.Pos) + j
			if t.Op == OpTokens {
				si.toks[p] = v
				continue
			}
			si.sampleAt[p] = v
			if si.firstSample < 0 || p < si.firstSample {
				si.firstSample = p
			}
			si.lastSample = max(si.lastSample, p)
		}
	}
	if len(seqs) == 0 {
		return nil, fmt.Errorf("engine: replay: %s has no tokens", c.Path())
	}
	final := map[int64]int32{}
	for _, f := range extra.FinalTokens {
		if f[0] == step {
			final[f[1]] = int32(f[2])
		}
	}
	ids := make([]int64, 0, len(seqs))
	for id := range seqs {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	var inputs [][]int32
	var plen []int
	var open []bool
	for _, id := range ids {
		si := seqs[id]
		n := len(si.toks)
		toks := make([]int32, 0, n+1)
		for p := 0; p < n; p++ {
			v, ok := si.toks[p]
			if !ok {
				return nil, fmt.Errorf("engine: replay: %s: seq %d: tokens cover %d positions but not position %d", c.Path(), id, n, p)
			}
			toks = append(toks, v)
		}
		last, known := final[id]
		if !known {
			last, known = si.sampleAt[n-1]
		}
		toks = append(toks, last) // a placeholder when unknown: its log-probability is not recorded
		P := n + 1                // no samples recorded
		if si.firstSample >= 0 {
			P = si.firstSample + 1
		}
		inputs = append(inputs, toks)
		plen = append(plen, P)
		open = append(open, !known)
	}
	sp := extra.Sampling // nil: the default
	to := TrainOptions{RunOptions: RunOptions{TP: max(opts.TP, 1), Profile: opts.Profile, Seed: meta.Seed, Step: step,
		SeqIDs: ids, Sampling: sp, CaptureDir: outDir, Backend: opts.Backend, Collectives: opts.Collectives,
		Routing: opts.Routing, Ops: opts.Ops, StopLayer: opts.StopLayer, Fingerprints: opts.Fingerprints,
		Phases: opts.Phases}, Batch: opts.Batch, PromptLens: plen}
	opts.Phases.Since("read the capture's tokens, build the batch", start)
	return m.train(ctx, inputs, to, SideReplay, open)
}
