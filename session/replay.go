package session

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"bitalign/capture"
	"bitalign/engine"
	"bitalign/kernels"
)

// ReplayOption configures Replay.
type ReplayOption func(*replayConfig)

type replayConfig struct {
	profile kernels.Profile
	backend engine.Backend
}

// ReplayProfile sets the kernel profile of the replay (default canonical: the engine's reference).
func ReplayProfile(p kernels.Profile) ReplayOption { return func(c *replayConfig) { c.profile = p } }

// ReplayBackend runs the replay on b (default: the CPU backend).
func ReplayBackend(b engine.Backend) ReplayOption { return func(c *replayConfig) { c.backend = b } }

// Verdict is the result of Replay: the op re-executed by the engine once from A's captured inputs and once
// from B's, each compared with both sides' captured outputs.
type Verdict struct {
	Op        string
	Step, Seq int64
	Pos       int64 // positions [Pos, Pos+N) were replayed
	N         int
	Backend   string // "cpu", "cuda:0", ...
	Profile   string
	// InputsDiffer: the producers' outputs the op reads already differ between A and B at these positions
	// (Differing names them). Local: they are identical and the captured outputs differ, so the divergence
	// arises in this op.
	InputsDiffer  bool
	Differing     []string
	Unknown       []string // producers not captured on both sides at these positions
	OutputsDiffer bool     // the two captured outputs of the op differ
	Local         bool
	FromA, FromB  ReplayRun
	// Reproduces says whose captured output the engine reproduces bit for bit from that side's own inputs:
	// "both", "A", "B" or "neither".
	Reproduces string
	// Oracle is each side's local error at these positions: its captured output, and the engine's from the
	// same inputs, against the oracle of that side's own inputs (LocalError). Nil when it could not be
	// measured (OracleErr says why).
	Oracle    *LocalErr
	OracleErr string
	// Text is the verdict in words, "<cause>; <whom the engine reproduces>", as every front end shows it;
	// Summary prefixes where the replay ran, for a log line.
	Text    string
	Summary string
}

// ReplayRun is one re-execution: the replayed output (Rows × Cols elements of DType, row r = position
// Pos+r, laid out like Pair) and how it compares with each side's captured output.
type ReplayRun struct {
	Inputs     string // "A" or "B"
	Err        string // why the op could not be replayed from these inputs ("" when it ran)
	DType      capture.DType
	Rows, Cols int
	Data       []byte
	VsA, VsB   Match
}

// Match compares a replayed output with a captured one over the replayed positions.
type Match struct {
	Identical  bool
	Mismatched int64
	MaxULP     uint64
	First      *Coord // first differing element, nil when identical
}

// Replay re-executes op for (step, seq) with the deterministic engine from A's captured inputs and from B's
// (the outputs of engine.Producers(op) over the positions both sides hold), compares each result with both
// captured outputs, and says whether the inputs already differed (propagated) or not (local) and which side
// the engine reproduces.
func Replay(ctx context.Context, s *Session, m *engine.Model, op string, step, seq int64, opts ...ReplayOption) (*Verdict, error) {
	cfg := replayConfig{profile: kernels.Canonical}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.backend == nil {
		cfg.backend = engine.NewCPU()
	}
	p, err := s.Pair(op, "out", step, seq)
	if err != nil {
		return nil, err
	}
	lo, hi := -1, -1
	for r := 0; r < p.Rows; r++ {
		if p.HasA[r] && p.HasB[r] {
			if lo < 0 {
				lo = r
			}
			hi = r + 1
		}
	}
	if lo < 0 {
		return nil, fmt.Errorf("session: replay %s: no position of step %d seq %d is on both sides", op, step, seq)
	}
	v := &Verdict{Op: op, Step: step, Seq: seq, Pos: p.Pos0 + int64(lo), N: hi - lo, Backend: cfg.backend.Name(),
		Profile: cfg.profile.String()}
	producers := engine.Producers(m.Config, op)
	if producers == nil {
		return nil, fmt.Errorf("session: replay: %s is not an op of the %s model", op, m.Config.Architecture)
	}
	// the attention's q/k after RoPE are not captured from transformers: then its inputs are the projections
	// (engine.AltProducers), with the checkpoint's RoPE
	alt := engine.AltProducers(m.Config, op)
	if len(alt) > 0 && !capturedOnBoth(s, producers, step, seq) && capturedOnBoth(s, alt, step, seq) {
		producers = alt
	}
	// did the inputs already differ? (the attention reads every earlier position)
	var unknown []string
	for _, name := range producers {
		q, err := s.Pair(name, "out", step, seq)
		if err != nil {
			unknown = append(unknown, name)
			continue
		}
		from, to := v.Pos, v.Pos+int64(v.N)
		if name == engine.OpTokens && op == engine.OpLogprobs {
			from, to = from+1, to+1 // the target token
		}
		if isAttention(op) {
			from = 0
		}
		switch q.differs(from, to) {
		case cmpDiffer:
			v.InputsDiffer = true
			v.Differing = append(v.Differing, name)
		case cmpUnknown:
			unknown = append(unknown, name)
		}
	}
	for i, side := range []*capture.Capture{s.A, s.B} {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		run := ReplayRun{Inputs: [...]string{"A", "B"}[i], DType: p.DType, Rows: v.N, Cols: p.Cols}
		in := engine.OpInputs{Step: step, Seq: seq, Pos: int(v.Pos), N: v.N, Tensors: map[string][]capture.Tensor{},
			Seed: side.Meta().Seed, Sampling: samplingOf(side.Meta())}
		need := append(append([]string{engine.OpTokens, engine.OpSample}, producers...), alt...)
		for j := 0; j < side.Len(); j++ {
			e := side.Entry(j)
			if e.Step != step || e.Seq != seq || e.Role != "out" || !contains(need, e.Op) {
				continue
			}
			t, err := side.Tensor(j)
			if err != nil {
				return nil, err
			}
			in.Tensors[e.Op] = append(in.Tensors[e.Op], t)
		}
		out, err := m.RunOp(op, in, engine.WithProfile(cfg.profile), engine.WithBackend(cfg.backend))
		switch {
		case err != nil:
			run.Err = err.Error()
		case out.DType != p.DType || int64(len(out.Data)) != int64(v.N*p.Cols*p.DType.Size()):
			run.Err = fmt.Sprintf("replayed %s %v does not match the captured %s [%d, %d]", out.DType, out.Shape, p.DType, v.N, p.Cols)
		default:
			run.Data = out.Data
			rb := p.Cols * p.DType.Size()
			run.VsA = p.match(out.Data, p.A[lo*rb:hi*rb], v.Pos)
			run.VsB = p.match(out.Data, p.B[lo*rb:hi*rb], v.Pos)
		}
		if i == 0 {
			v.FromA = run
		} else {
			v.FromB = run
		}
	}
	v.Unknown = unknown
	v.OutputsDiffer = p.Mismatched > 0
	v.Local = !v.InputsDiffer && len(unknown) == 0 && v.OutputsDiffer
	a, b := v.FromA.Err == "" && v.FromA.VsA.Identical, v.FromB.Err == "" && v.FromB.VsB.Identical
	switch {
	case a && b:
		v.Reproduces = "both"
	case a:
		v.Reproduces = "A"
	case b:
		v.Reproduces = "B"
	default:
		v.Reproduces = "neither"
	}
	if hasOracle(op) {
		if le, err := LocalError(ctx, s, m, op, step, seq); err != nil {
			v.OracleErr = err.Error()
		} else {
			v.Oracle = le
		}
	}
	v.Text = v.text(s)
	v.Summary = fmt.Sprintf("%s step %d seq %d pos %d..%d on %s: %s", v.Op, v.Step, v.Seq, v.Pos, v.Pos+int64(v.N)-1,
		v.Backend, v.Text)
	return v, nil
}

// text words the verdict: the one place its wording lives.
func (v *Verdict) text(s *Session) string {
	name := func(side string) string {
		if side == "A" && s.Report.A.Side != "" {
			return s.Report.A.Side
		}
		if side == "B" && s.Report.B.Side != "" {
			return s.Report.B.Side
		}
		return side
	}
	var cause string
	switch {
	case !v.OutputsDiffer && !v.InputsDiffer:
		cause = "identical: inputs and outputs agree"
	case v.InputsDiffer:
		cause = "propagated: inputs already differ (" + joinNames(v.Differing) + ")"
	case v.Local:
		cause = "local: inputs identical"
	default:
		cause = "unknown: inputs not captured on both sides (" + joinNames(v.Unknown) + ")"
	}
	var repro string
	switch v.Reproduces {
	case "both":
		repro = "bit for bit, the engine reproduces both sides"
	case "A", "B":
		other := map[string]string{"A": "B", "B": "A"}[v.Reproduces]
		repro = fmt.Sprintf("bit for bit, the engine reproduces %s, not %s", name(v.Reproduces), name(other))
	default:
		repro = "bit for bit, the engine reproduces neither side (its summation order is neither's)"
	}
	return cause + "; " + v.oracleText(name("A"), name("B")) + "; " + repro
}

// oracleText words each side's local error: whether a side computed this op correctly from its own inputs.
func (v *Verdict) oracleText(nameA, nameB string) string {
	le := v.Oracle
	if le == nil {
		if v.OracleErr != "" {
			return "no oracle: " + v.OracleErr
		}
		return "no oracle for " + v.Op
	}
	sides := [2]*LocalSide{&le.A, &le.B}
	names := [2]string{nameA, nameB}
	var figs, off []string
	eng := -1.0
	for i, sd := range sides {
		if sd.Err != "" {
			figs = append(figs, names[i]+" not measured ("+sd.Err+")")
			continue
		}
		l := finite(sd.Captured.Local, sd.Captured.NaN)
		figs = append(figs, names[i]+" "+fmtULP(l))
		if sd.EngineErr == "" {
			eng = max(eng, finite(sd.Engine.Local, sd.Engine.NaN))
		}
		if l > DefaultAuditMargin*minFloorULP(sd.Captured.DType) {
			off = append(off, names[i])
		}
	}
	t := "ULPs from the correctly rounded result of each side's own inputs: " + joinNames(figs)
	if eng >= 0 {
		t += " (the engine's " + fmtULP(eng) + ")"
	}
	switch len(off) {
	case 0:
		t += ": both within rounding"
	case 1:
		t += ": " + off[0] + " computes this op wrongly"
	default:
		t += ": both sides are far off (a wrong checkpoint?)"
	}
	return t
}

// capturedOnBoth reports whether every op in ops is captured on both sides at (step, seq).
func capturedOnBoth(s *Session, ops []string, step, seq int64) bool {
	for _, name := range ops {
		q, err := s.Pair(name, "out", step, seq)
		if err != nil || !slices.Contains(q.HasA, true) || !slices.Contains(q.HasB, true) {
			return false
		}
	}
	return true
}

func joinNames(ns []string) string {
	var b bytes.Buffer
	for i, n := range ns {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(n)
	}
	return b.String()
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func isAttention(op string) bool {
	_, s, ok := engine.SplitLayerOp(op)
	return ok && s == "attn.sdpa"
}

// samplingOf reads the sampling parameters an engine capture records in Meta.Extra (nil: the default).
func samplingOf(m capture.Meta) *engine.SamplingParams {
	var ex struct {
		Sampling *engine.SamplingParams `json:"sampling"`
	}
	if len(m.Extra) > 0 && json.Unmarshal(m.Extra, &ex) == nil {
		return ex.Sampling
	}
	return nil
}

type cmpResult int

const (
	cmpSame    cmpResult = iota
	cmpDiffer            // some element differs
	cmpUnknown           // nothing differs, but a side lacks some of the positions
)

// differs compares the rows for positions [from, to) that either side holds; positions neither side holds
// are ignored (e.g. the target token after a trainer's last position).
func (p *Pair) differs(from, to int64) cmpResult {
	res := cmpSame
	for pos := max(from, p.Pos0); pos < min(to, p.Pos0+int64(p.Rows)); pos++ {
		r := int(pos - p.Pos0)
		if !p.HasA[r] || !p.HasB[r] {
			res = cmpUnknown
			continue
		}
		rb := p.Cols * p.f.size
		if !bytes.Equal(p.A[r*rb:(r+1)*rb], p.B[r*rb:(r+1)*rb]) {
			return cmpDiffer
		}
	}
	return res
}

// match compares a replayed output x with captured rows y (both Rows × Cols of the pair's dtype starting at
// position pos0).
func (p *Pair) match(x, y []byte, pos0 int64) Match {
	m := Match{Identical: bytes.Equal(x, y)}
	if m.Identical {
		return m
	}
	for i := 0; i < len(x)/p.f.size; i++ {
		a, b := p.f.load(x, i), p.f.load(y, i)
		if a == b {
			continue
		}
		m.Mismatched++
		cls, d := p.f.compare(a, b)
		if cls != ClassNaNNumber && d > m.MaxULP {
			m.MaxULP = d
		}
		if m.First == nil {
			col := int64(i % p.Cols)
			m.First = &Coord{Step: p.Step, Seq: p.Seq, Pos: pos0 + int64(i/p.Cols), Col: col, Element: unravel(col, p.Feat)}
		}
	}
	return m
}
