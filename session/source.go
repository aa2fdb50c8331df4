package session

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"bitalign/engine"
	"bitalign/kernels"
	"bitalign/session/view"
)

// Source adapts a loaded session to view.Source, the TUI's only way into the core: it converts the report
// and pairs to view types once, and replays on the backend Load chose.
func (l *Loaded) Source() view.Source {
	r := convertReport(l.Session)
	return &source{s: l.Session, model: l.Model, backend: l.Backend, backendName: l.BackendName, profile: l.Profile,
		report: &r}
}

// Source adapts a progressive session to view.Source and view.Completer: its report is the verdict until the
// complete report is there, then the complete report (converted in the background). Close stops the
// background and closes the captures.
func (p *Progressive) Source() view.Source {
	a := p.early.Source().(*source)
	if p.Complete() == p.early { // nothing was left for later
		return a
	}
	a.pend = p
	a.report.Pending = p.early.Report.pendingText(hasLogprobs(p.early.Session))
	return a
}

// source implements view.Source over a Loaded session.
type source struct {
	model       *engine.Model         // nil: no checkpoint, no replay
	backend     engine.BackendFactory // nil: the CPU
	backendName string
	profile     kernels.Profile // the replays' kernel profile

	pend    *Progressive // the session whose complete report replaces the verdict's; nil: complete
	smu     sync.Mutex
	s       *Session     // the verdict's session, then the complete one
	report  *view.Report // s's report, converted
	swapped bool         // s is pend's complete session

	mu  sync.Mutex
	run engine.Backend // made at the first replay
	ran string         // where replays run, once known: "CPU" or "GPU cuda:0 (...)"
}

func convertInfo(c CaptureInfo) view.CaptureInfo {
	return view.CaptureInfo{Path: c.Path, Side: c.Side, Producer: c.Producer, Model: c.Architecture,
		BatchSize: c.BatchSize, TP: c.TP, PP: c.PP, DP: c.DP, Ranks: max(c.TP, 1) * max(c.PP, 1) * max(c.DP, 1),
		KernelProfile: c.KernelProfile, Step: c.Step, Seed: c.Seed, Tensors: c.Tensors, Bytes: c.Bytes}
}

func convertStatus(s Status) view.Status {
	switch s {
	case StatusDivergent:
		return view.Divergent
	case StatusMissingA:
		return view.MissingA
	case StatusMissingB:
		return view.MissingB
	case StatusIncomplete:
		return view.Incomplete
	case StatusShapeMismatch:
		return view.ShapeMismatch
	}
	return view.Identical
}

func convertCoord(c *Coord) *view.Coord {
	if c == nil {
		return nil
	}
	return &view.Coord{Step: c.Step, Seq: c.Seq, Pos: c.Pos, Feature: c.Col}
}

// layerOf is an op's layer, -1 outside the layer stack.
func layerOf(op string) int {
	if l, _, ok := engine.SplitLayerOp(op); ok {
		return l
	}
	return -1
}

func convertReport(s *Session) view.Report {
	r := s.Report
	out := view.Report{A: convertInfo(r.A), B: convertInfo(r.B), Identical: r.Identical, Routing: convertRouting(r.Routing)}
	for i := range r.Ops {
		o := &r.Ops[i]
		st := view.OpStat{Op: o.Op, Index: o.Index, Role: o.Role, Layer: layerOf(o.Op), DType: o.DType, Shape: o.Shape,
			Status: convertStatus(o.Status), Elements: o.Elements, Mismatched: o.Mismatched, MaxULP: o.MaxULP,
			MaxAt: convertCoord(o.MaxAt), Hist: o.Hist, MaxAbs: o.MaxAbs, MeanAbs: o.MeanAbs, MaxRel: o.MaxRel,
			NaNA: o.NaNA, NaNB: o.NaNB, InfA: o.InfA, InfB: o.InfB, Cause: string(o.Cause), Located: o.Located,
			Pending: o.pending}
		for _, q := range s.Seqs(o.Op, o.Role) {
			st.Seqs = append(st.Seqs, view.SeqKey{Step: q.Step, Seq: q.Seq})
		}
		out.Ops = append(out.Ops, st)
	}
	if rl := r.RL; rl != nil {
		out.RL = convertRL(r)
	}
	if f := r.First; f != nil {
		d := &view.Divergence{Op: f.Op, Role: f.Role, At: *convertCoord(&f.At), MaxULP: f.ULP}
		if i := r.FindOp(f.Op, f.Role); i >= 0 {
			d.MaxULP = r.Ops[i].MaxULP
		}
		out.First = d
	}
	return out
}

// pendingText says what a verdict report (Pending) leaves for later: "every op's statistics, the logprob
// section" (logprobs: both sides capture them).
func (r *Report) pendingText(logprobs bool) string {
	var parts []string
	if r.pending {
		parts = append(parts, "every op's statistics")
	}
	if logprobs {
		parts = append(parts, "the logprob section")
	}
	return strings.Join(parts, ", ")
}

// state is the current session and its report: the verdict's until complete has returned, then the
// complete ones (so that Report changes only once a Wait has returned, as view.Completer says).
func (a *source) state() (*Session, *view.Report) {
	a.smu.Lock()
	defer a.smu.Unlock()
	return a.s, a.report
}

// session is the current session.
func (a *source) session() *Session {
	s, _ := a.state()
	return s
}

// complete waits for the complete session (at once when there is no background) and makes it current.
func (a *source) complete(ctx context.Context) (*Session, error) {
	if a.pend == nil {
		return a.session(), nil
	}
	l, err := a.pend.Wait(ctx)
	if err != nil {
		return nil, err
	}
	a.smu.Lock()
	defer a.smu.Unlock()
	if !a.swapped {
		a.s, a.report, a.swapped = l.Session, a.pend.fullView, true
	}
	return a.s, nil
}

// Report implements view.Source.
func (a *source) Report() *view.Report {
	_, r := a.state()
	return r
}

// Wait implements view.Completer.
func (a *source) Wait(ctx context.Context) error {
	_, err := a.complete(ctx)
	return err
}

// Progress implements view.Completer.
func (a *source) Progress() view.Progress {
	if a.pend == nil {
		return view.Progress{}
	}
	return a.pend.Progress()
}

// Pair implements view.Source: the pair's bytes and the levels the core computed for it (Session.Pair).
func (a *source) Pair(ctx context.Context, k view.Key) (*view.Pair, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s, r := a.state()
	if i := r.FindOp(k.Op, k.Role); i >= 0 && r.Ops[i].Pending && r.Ops[i].DType == "f32" {
		// whether an f32 op's ULPs are bf16's is one of the statistics the complete report decides
		var err error
		if s, err = a.complete(ctx); err != nil {
			return nil, err
		}
	}
	p, err := s.Pair(k.Op, k.Role, k.Step, k.Seq)
	if err != nil {
		return nil, err
	}
	out := &view.Pair{Key: k, DType: p.DType.String(), ULPDType: p.ULPDType.String(), Rows: p.Rows, Cols: p.Cols, Pos0: p.Pos0,
		A: p.A, B: p.B, HasA: p.HasA, HasB: p.HasB,
		Levels: p.Levels, Hist: p.Hist, MaxULP: p.MaxULP, MaxAt: p.MaxAt, MissingRow: p.MissingRow}
	if !anyTrue(p.HasA) {
		out.A = nil
	}
	if !anyTrue(p.HasB) {
		out.B = nil
	}
	return out, nil
}

func anyTrue(b []bool) bool {
	for _, x := range b {
		if x {
			return true
		}
	}
	return false
}

// ReplayBackend names where replays run, once known (after the first replay).
func (a *source) ReplayBackend() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ran
}

// replayBackend makes the backend Load chose, at the first replay.
func (a *source) replayBackend() (engine.Backend, string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ran != "" {
		return a.run, a.ran, nil
	}
	if a.backend == nil {
		a.ran = "CPU"
		return nil, a.ran, nil
	}
	b, err := a.backend(0)
	if err != nil {
		return nil, "", err
	}
	a.run, a.ran = b, "GPU "+a.backendName
	return a.run, a.ran, nil
}

// Replay implements view.Source: the core's verdict (Replay), converted.
func (a *source) Replay(ctx context.Context, k view.Key) (*view.Replay, error) {
	if a.model == nil {
		return nil, view.ErrNoReplay
	}
	b, name, err := a.replayBackend()
	if err != nil {
		return nil, err
	}
	opts := []ReplayOption{ReplayProfile(a.profile)}
	if b != nil {
		opts = append(opts, ReplayBackend(b))
	}
	start := time.Now()
	s := a.session()
	v, err := Replay(ctx, s, a.model, k.Op, k.Step, k.Seq, opts...)
	if err != nil {
		return nil, err
	}
	if v.FromA.Err != "" && v.FromB.Err != "" {
		return nil, fmt.Errorf("session: cannot replay %s: %s", k.Op, v.FromA.Err)
	}
	p, err := s.Pair(k.Op, k.Role, k.Step, k.Seq)
	if err != nil {
		return nil, err
	}
	row0 := int(v.Pos - p.Pos0)
	side := func(r ReplayRun, own Match) view.ReplaySide {
		return view.ReplaySide{Reproduces: r.Err == "" && own.Identical, Mismatched: own.Mismatched, MaxULP: own.MaxULP,
			Out: r.Data, Row0: row0, Err: r.Err}
	}
	return &view.Replay{Key: k, Backend: name, InputsIdentical: !v.InputsDiffer && len(v.Unknown) == 0,
		FromA: side(v.FromA, v.FromA.VsA), FromB: side(v.FromB, v.FromB.VsB), Local: v.Local,
		Verdict: v.Text, Elapsed: time.Since(start)}, nil
}

// WriteReport implements view.Source: the complete report (it waits for it).
func (a *source) WriteReport(w io.Writer, format string) error {
	s, err := a.complete(context.Background())
	if err != nil {
		return err
	}
	return WriteReport(w, s.Report, format)
}

// Route implements view.Router: one token's routing in one MoE layer on both sides (Session.Route).
func (a *source) Route(ctx context.Context, layer int, at view.Coord) (*view.TokenRoute, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return a.session().Route(layer, TokenID{at.Step, at.Seq, at.Pos})
}

// Close closes the session's captures (and stops a progressive session's background first).
func (a *source) Close() error {
	if a.pend != nil {
		return a.pend.Close()
	}
	return a.s.Close()
}

// Audit implements view.Auditor.
func (a *source) Audit(ctx context.Context, progress func(done, total int)) (*view.Audit, error) {
	if a.model == nil {
		return nil, view.ErrNoReplay
	}
	r, err := Audit(ctx, a.session(), a.model, AuditOptions{Progress: progress})
	if err != nil {
		return nil, err
	}
	return r.View(), nil
}

// FirstDivergenceOf implements view.SeqFirst (Session.FirstDivergenceOf).
func (a *source) FirstDivergenceOf(ctx context.Context, step, seq int64) (view.Key, int64, bool, error) {
	if err := ctx.Err(); err != nil {
		return view.Key{}, 0, false, err
	}
	s, err := a.complete(ctx)
	if err != nil {
		return view.Key{}, 0, false, err
	}
	if s.A == nil || s.B == nil {
		return view.Key{}, 0, false, fmt.Errorf("session: a logprob table has no ops: record these sequences in full (bitalign diff --sequences)")
	}
	d, err := s.FirstDivergenceOf(step, seq)
	if err != nil || d == nil {
		return view.Key{}, 0, false, err
	}
	return view.Key{Op: d.Op, Role: d.Role, Step: d.Step, Seq: d.Seq}, d.Pos, true, nil
}
