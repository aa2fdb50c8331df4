package ui

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"bitalign/engine"
	"bitalign/session"
	"bitalign/session/view"
)

// sessionSource adapts a *session.Session to the UI's Source.
type sessionSource struct {
	s      *session.Session
	model  *engine.Model // nil: no checkpoint, no replay
	device string        // engine.SelectBackend's device: "auto", "cpu", "cuda"
	report view.Report

	mu          sync.Mutex
	backend     engine.Backend // chosen at the first replay
	backendName string
}

// FromSession adapts an open session (captures diffed) to the UI's Source. With the checkpoint's model,
// replay runs on device ("auto": the GPU when one is usable, else the CPU; "cpu"; "cuda").
func FromSession(s *session.Session, model *engine.Model, device string) Source {
	if device == "" {
		device = "auto"
	}
	return &sessionSource{s: s, model: model, device: device, report: convertReport(s)}
}

func convertInfo(c session.CaptureInfo) view.CaptureInfo {
	return view.CaptureInfo{Path: c.Path, Side: c.Side, Producer: c.Producer, Model: c.Architecture,
		BatchSize: c.BatchSize, TP: c.TP, PP: c.PP, DP: c.DP, Ranks: max(c.TP, 1) * max(c.PP, 1) * max(c.DP, 1),
		KernelProfile: c.KernelProfile, Step: c.Step, Seed: c.Seed, Tensors: c.Tensors, Bytes: c.Bytes}
}

func convertStatus(s session.Status) view.Status {
	switch s {
	case session.StatusDivergent:
		return view.Divergent
	case session.StatusMissingA:
		return view.MissingA
	case session.StatusMissingB:
		return view.MissingB
	case session.StatusIncomplete:
		return view.Incomplete
	case session.StatusShapeMismatch:
		return view.ShapeMismatch
	}
	return view.Identical
}

func convertCoord(c *session.Coord) *view.Coord {
	if c == nil {
		return nil
	}
	return &view.Coord{Step: c.Step, Seq: c.Seq, Pos: c.Pos, Feature: c.Col}
}

// layerOf parses "layers.N." from an op name, -1 outside the layer stack.
func layerOf(op string) int {
	rest, ok := strings.CutPrefix(op, "layers.")
	if !ok {
		return -1
	}
	n := 0
	for i, c := range rest {
		if c == '.' && i > 0 {
			return n
		}
		if c < '0' || c > '9' {
			return -1
		}
		n = 10*n + int(c-'0')
	}
	return -1
}

func convertReport(s *session.Session) view.Report {
	r := s.Report
	out := view.Report{A: convertInfo(r.A), B: convertInfo(r.B), Identical: r.Identical}
	for i := range r.Ops {
		o := &r.Ops[i]
		st := view.OpStat{Op: o.Op, Index: o.Index, Role: o.Role, Layer: layerOf(o.Op), DType: o.DType, Shape: o.Shape,
			Status: convertStatus(o.Status), Elements: o.Elements, Mismatched: o.Mismatched, MaxULP: o.MaxULP,
			MaxAt: convertCoord(o.MaxAt), Hist: o.Hist, MaxAbs: o.MaxAbs, MeanAbs: o.MeanAbs, MaxRel: o.MaxRel,
			NaNA: o.NaNA, NaNB: o.NaNB, InfA: o.InfA, InfB: o.InfB, Cause: string(o.Cause)}
		for _, q := range s.Seqs(o.Op, o.Role) {
			st.Seqs = append(st.Seqs, view.SeqKey{Step: q.Step, Seq: q.Seq})
		}
		out.Ops = append(out.Ops, st)
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

// Report implements Source.
func (a *sessionSource) Report() *view.Report { return &a.report }

// Pair implements Source.
func (a *sessionSource) Pair(ctx context.Context, k view.Key) (*view.Pair, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p, err := a.s.Pair(k.Op, k.Role, k.Step, k.Seq)
	if err != nil {
		return nil, err
	}
	out := &view.Pair{Key: k, DType: p.DType.String(), Rows: p.Rows, Cols: p.Cols, Pos0: p.Pos0,
		A: p.A, B: p.B, HasA: p.HasA, HasB: p.HasB}
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
func (a *sessionSource) ReplayBackend() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.backendName
}

// replayBackend picks the backend at the first replay: the GPU when the engine finds a usable one.
func (a *sessionSource) replayBackend() (engine.Backend, string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.backendName != "" {
		return a.backend, a.backendName, nil
	}
	f, desc, err := engine.SelectBackend(a.device)
	if err != nil {
		return nil, "", err
	}
	a.backendName = "CPU"
	if f != nil {
		b, err := f(0)
		if err != nil {
			return nil, "", err
		}
		a.backend, a.backendName = b, "GPU "+desc
	}
	return a.backend, a.backendName, nil
}

// Replay implements Source.
func (a *sessionSource) Replay(ctx context.Context, k view.Key) (*view.Replay, error) {
	if a.model == nil {
		return nil, view.ErrNoReplay
	}
	b, name, err := a.replayBackend()
	if err != nil {
		return nil, err
	}
	var opts []session.ReplayOption
	if b != nil {
		opts = append(opts, session.ReplayBackend(b))
	}
	start := time.Now()
	v, err := session.Replay(ctx, a.s, a.model, k.Op, k.Step, k.Seq, opts...)
	if err != nil {
		return nil, err
	}
	if v.FromA.Err != "" && v.FromB.Err != "" {
		return nil, fmt.Errorf("cannot replay %s: %s", k.Op, v.FromA.Err)
	}
	p, err := a.s.Pair(k.Op, k.Role, k.Step, k.Seq)
	if err != nil {
		return nil, err
	}
	row0 := int(v.Pos - p.Pos0)
	side := func(r session.ReplayRun, own session.Match) view.ReplaySide {
		return view.ReplaySide{Reproduces: r.Err == "" && own.Identical, Mismatched: own.Mismatched, MaxULP: own.MaxULP,
			Out: r.Data, Row0: row0, Err: r.Err}
	}
	out := &view.Replay{Key: k, Backend: name, InputsIdentical: !v.InputsDiffer && len(v.Unknown) == 0,
		FromA: side(v.FromA, v.FromA.VsA), FromB: side(v.FromB, v.FromB.VsB), Local: v.Local,
		Elapsed: time.Since(start)}
	out.Local = v.Local && p.Mismatched > 0 // a divergence starts here only if the outputs differ
	var cause string
	switch {
	case p.Mismatched == 0 && !v.InputsDiffer:
		cause = "identical: inputs and outputs agree"
	case v.InputsDiffer:
		cause = "propagated: inputs already differ (" + strings.Join(v.Differing, ", ") + ")"
	case v.Local:
		cause = "local: inputs identical"
	default:
		cause = "unknown: inputs not captured on both sides (" + strings.Join(v.Unknown, ", ") + ")"
	}
	sideName := map[string]string{"A": a.report.A.Side, "B": a.report.B.Side}
	switch v.Reproduces {
	case "both":
		out.Verdict = cause + "; the engine reproduces both sides"
	case "A", "B":
		other := map[string]string{"A": "B", "B": "A"}[v.Reproduces]
		out.Verdict = fmt.Sprintf("%s; the engine reproduces %s, not %s", cause, sideName[v.Reproduces], sideName[other])
	default:
		out.Verdict = cause + "; the engine reproduces neither side"
	}
	return out, nil
}

// WriteReport implements Source.
func (a *sessionSource) WriteReport(w io.Writer, format string) error {
	switch format {
	case "json":
		return session.WriteJSON(w, a.s.Report)
	case "md":
		return session.WriteMarkdown(w, a.s.Report)
	case "html":
		return session.WriteHTML(w, a.s.Report)
	}
	return fmt.Errorf("unknown report format %q", format)
}

// Close closes the session's captures.
func (a *sessionSource) Close() error { return a.s.Close() }
