package session

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"bitalign/capture"
	"bitalign/engine"
	"bitalign/session/view"
)

// The audit: every op's local error on both sides (LocalErrors), each op family's noise floor, and the ranked
// suspects — the (op, side) pairs whose local error stands far above what rounding gives. docs/audit.md
// defines every number; this file is the one home of those rules.

// AuditSchemaVersion is the "schema" of the audit's JSON report (docs/audit.md): bump it when a field
// changes meaning or goes away.
const AuditSchemaVersion = 1

// Default audit rules (docs/audit.md).
const (
	// DefaultAuditMargin: a suspect's local error exceeds this many times its noise floor.
	DefaultAuditMargin = 8
	// auditMinFloorULP: no floor is below 1 ULP (a correctly rounded kernel is within half an ULP of every
	// element; one more rounding, one ULP).
	auditMinFloorULP = 1
	// auditMinFloorScale: nor below 2^-16 of the row's RMS (ToleranceScale: a correct float32 accumulation
	// over tens of thousands of terms), which is what bounds float32 outputs.
	auditMinFloorScale = ToleranceScale
)

// AuditNonFiniteULP is the local error of an output that is NaN or Inf where the oracle is a number (or a
// number where it is NaN): larger than any finite error, and a number JSON can hold.
const AuditNonFiniteULP = view.NonFiniteULP

// AuditOptions configure Audit.
type AuditOptions struct {
	Margin   float64 // default DefaultAuditMargin
	Workers  int     // parallel (op, step, seq) measurements (0: GOMAXPROCS)
	Progress func(done, total int)
}

// AuditReport is the result of Audit.
type AuditReport struct {
	Schema   int
	A, B     CaptureInfo
	Model    string // the checkpoint's architecture
	Margin   float64
	Ops      []AuditOp // execution order
	Suspects []Suspect // most severe first
	Measured int       // (op, step, seq) measurements
	Elapsed  time.Duration
}

// AuditOp is one op's local error on both sides, summed over every (step, seq) either side holds.
type AuditOp struct {
	Op     string
	Index  int
	Family string // the op with its layer number replaced by *: "layers.*.mlp.down_proj"
	Layer  int    // -1 outside the layer stack
	Sides  [2]AuditSide
}

// AuditSide is one side's local error of one op (ErrStats over its sequences) and its noise floor.
type AuditSide struct {
	Err            string // why nothing was measured on this side ("" when something was)
	DType          string // the precision the distances are counted in
	Positions      int
	Elements       int64
	Inexact        int64
	OutOfTolerance int64
	MaxULP         uint64  // the largest element-wise distance (NaN against a number left out)
	WorstULP       *Coord  // where
	ScaleULP       float64 // the largest |out − oracle| in ULPs at the row's scale: Scale / Eps(DType)
	WorstScale     *Coord  // where
	LocalULP       float64 // the largest local error of an element (ErrStats.Local): what the rules judge
	WorstLocal     *Coord  // where
	EngineLocalULP float64 // the canonical engine's, from the same inputs (-1: it could not run)
	FloorULP       float64 // the noise floor this side's local error is judged against (ULPs at the row's scale)
}

// Suspect is an (op, side) whose local error stands above its noise floor by more than the margin.
type Suspect struct {
	Op            string
	Index         int
	Side          int // 0 = A, 1 = B
	SideName      string
	Step, Seq     int64
	Pos           int64
	Element       []int64
	LocalULP      float64 // the side's largest local error of an element in this op (what is ranked)
	LocalMaxULP   uint64  // the side's largest element-wise ULP distance from the oracle
	LocalScaleULP float64 // the side's largest distance in ULPs at the row's scale
	NoiseFloorULP float64
	Ratio         float64 // LocalULP / NoiseFloorULP
	Rule          string  // "outlier" (above its own side's family) or "systematic" (the side's whole family)
	Evidence      string
}

// Eps is the ULP of 1.0 in dt: the unit in which ErrStats.Scale becomes ULPs at the row's scale.
func Eps(dt capture.DType) float64 {
	switch dt {
	case capture.BF16:
		return 0x1p-7
	case capture.F16:
		return 0x1p-10
	case capture.F32:
		return 0x1p-23
	case capture.F64:
		return 0x1p-52
	}
	return 1
}

// minFloorULP is the smallest noise floor an op of dtype dt gets, in ULPs at the row's scale.
func minFloorULP(dt capture.DType) float64 {
	return max(auditMinFloorULP, auditMinFloorScale/Eps(dt))
}

// Family names an op's family: the same op in every layer.
func Family(op string) (family string, layer int) {
	if l, suffix, ok := engine.SplitLayerOp(op); ok {
		return "layers.*." + suffix, l
	}
	return op, -1
}

// Audit measures every op's local error on both sides of s against the oracle of that side's own inputs,
// derives each family's noise floor and ranks the suspects (docs/audit.md).
func Audit(ctx context.Context, s *Session, m *engine.Model, o AuditOptions) (*AuditReport, error) {
	start := time.Now()
	if o.Margin <= 0 {
		o.Margin = DefaultAuditMargin
	}
	errs, err := LocalErrors(ctx, s, m, LocalOptions{Workers: o.Workers, Progress: o.Progress})
	if err != nil {
		return nil, err
	}
	r := &AuditReport{Schema: AuditSchemaVersion, A: s.Report.A, B: s.Report.B, Model: m.Config.Architecture,
		Margin: o.Margin, Measured: len(errs)}
	byOp := map[string]int{}
	for i := range errs {
		e := &errs[i]
		k, ok := byOp[e.Op]
		if !ok {
			fam, layer := Family(e.Op)
			k = len(r.Ops)
			byOp[e.Op] = k
			r.Ops = append(r.Ops, AuditOp{Op: e.Op, Index: e.Index, Family: fam, Layer: layer})
			for j := range r.Ops[k].Sides {
				r.Ops[k].Sides[j].ScaleULP, r.Ops[k].Sides[j].LocalULP, r.Ops[k].Sides[j].EngineLocalULP = -1, -1, -1
			}
		}
		for j, ls := range [2]*LocalSide{&e.A, &e.B} {
			r.Ops[k].Sides[j].add(ls)
		}
	}
	slices.SortStableFunc(r.Ops, func(x, y AuditOp) int { return cmp.Compare(x.Index, y.Index) })
	r.floors()
	r.suspects(s)
	r.Elapsed = time.Since(start)
	return r, nil
}

// add folds one (step, seq)'s measurement into the op's totals.
func (a *AuditSide) add(ls *LocalSide) {
	if ls.Err != "" {
		if a.Positions == 0 && a.Err == "" {
			a.Err = ls.Err
		}
		return
	}
	a.Err = ""
	c := ls.Captured
	a.DType = c.DType.String()
	a.Positions += ls.Positions
	a.Elements += c.Elements
	a.Inexact += c.Inexact
	a.OutOfTolerance += c.OutOfTolerance
	if c.MaxULP > a.MaxULP || a.WorstULP == nil && c.WorstULP != nil {
		a.MaxULP, a.WorstULP = c.MaxULP, c.WorstULP
	}
	sc, lo := finite(c.Scale/Eps(c.DType), c.NaN), finite(c.Local, c.NaN)
	if sc > a.ScaleULP {
		a.ScaleULP, a.WorstScale = sc, c.WorstScale
	}
	if lo > a.LocalULP {
		a.LocalULP, a.WorstLocal = lo, cmpOr(c.WorstLocal, c.WorstULP, c.WorstScale)
	}
	if ls.EngineErr == "" {
		a.EngineLocalULP = max(a.EngineLocalULP, finite(ls.Engine.Local, ls.Engine.NaN))
	}
}

// finite is x, or AuditNonFiniteULP when x is not finite or some element was NaN against a number: no correct
// kernel gives either.
func finite(x float64, nans int64) float64 {
	if nans > 0 || math.IsInf(x, 0) || math.IsNaN(x) {
		return AuditNonFiniteULP
	}
	return x
}

// cmpOr is the first non-nil coordinate.
func cmpOr(cs ...*Coord) *Coord {
	for _, c := range cs {
		if c != nil {
			return c
		}
	}
	return nil
}

func (a *AuditSide) measured() bool { return a.Err == "" && a.Positions > 0 }

// median of xs (xs is reordered).
func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// familyLevel is each side's typical local error in each family: the median over the family's layers.
func (r *AuditReport) familyLevel() map[string][2]float64 {
	vals := map[string][2][]float64{}
	for i := range r.Ops {
		o := &r.Ops[i]
		v := vals[o.Family]
		for j := range o.Sides {
			if o.Sides[j].measured() {
				v[j] = append(v[j], max(o.Sides[j].LocalULP, 0))
			}
		}
		vals[o.Family] = v
	}
	out := map[string][2]float64{}
	for fam, v := range vals {
		var lv [2]float64
		for j := range v {
			lv[j] = -1
			if len(v[j]) > 0 {
				lv[j] = median(v[j])
			}
		}
		out[fam] = lv
	}
	return out
}

// floors sets each op side's noise floor: its own side's family level, never under the dtype's minimum.
func (r *AuditReport) floors() {
	lv := r.familyLevel()
	for i := range r.Ops {
		o := &r.Ops[i]
		for j := range o.Sides {
			sd := &o.Sides[j]
			if !sd.measured() {
				continue
			}
			dt, _ := capture.ParseDType(sd.DType)
			sd.FloorULP = max(minFloorULP(dt), lv[o.Family][j])
		}
	}
}

// suspects applies the two rules of docs/audit.md and ranks what they find, most severe first.
//
//   - outlier: the side's local error exceeds margin × the side's own family level (one layer out of line);
//   - systematic: the side's family level itself exceeds margin × the other side's (every layer of the family
//     on that side), and so does this op's local error. Families of one op (embed, final_norm, logits,
//     logprobs) can only be systematic.
func (r *AuditReport) suspects(s *Session) {
	lv := r.familyLevel()
	names := [2]string{sideName(r.A, "A"), sideName(r.B, "B")}
	for i := range r.Ops {
		o := &r.Ops[i]
		members := 0
		for k := range r.Ops {
			if r.Ops[k].Family == o.Family {
				members++
			}
		}
		for j := range o.Sides {
			sd, other := &o.Sides[j], &o.Sides[1-j]
			if !sd.measured() {
				continue
			}
			dt, _ := capture.ParseDType(sd.DType)
			minFloor := minFloorULP(dt)
			rule, floor := "", 0.0
			if members > 2 && sd.LocalULP > r.Margin*sd.FloorULP {
				rule, floor = "outlier", sd.FloorULP
			}
			if ol := lv[o.Family][1-j]; other.measured() && ol >= 0 {
				cross := max(minFloor, ol)
				if max(lv[o.Family][j], minFloor) > r.Margin*cross && sd.LocalULP > r.Margin*cross && rule == "" {
					rule, floor = "systematic", cross
				}
			}
			if rule == "" {
				continue
			}
			at := cmpOr(sd.WorstLocal, sd.WorstScale, sd.WorstULP)
			su := Suspect{Op: o.Op, Index: o.Index, Side: j, SideName: names[j], LocalULP: sd.LocalULP,
				LocalMaxULP: sd.MaxULP, LocalScaleULP: sd.ScaleULP, NoiseFloorULP: floor, Ratio: sd.LocalULP / floor, Rule: rule}
			if at != nil {
				su.Step, su.Seq, su.Pos, su.Element = at.Step, at.Seq, at.Pos, at.Element
			}
			su.Evidence = su.evidence(o, names)
			r.Suspects = append(r.Suspects, su)
		}
	}
	slices.SortStableFunc(r.Suspects, func(x, y Suspect) int {
		return cmp.Or(cmp.Compare(y.Ratio, x.Ratio), cmp.Compare(x.Index, y.Index), cmp.Compare(x.Side, y.Side))
	})
}

func sideName(c CaptureInfo, fallback string) string {
	if c.Side != "" {
		return c.Side
	}
	return fallback
}

// evidence says in one sentence why su is a suspect.
func (su *Suspect) evidence(o *AuditOp, names [2]string) string {
	sd, other := &o.Sides[su.Side], &o.Sides[1-su.Side]
	var b strings.Builder
	fmt.Fprintf(&b, "%s's %s is %s ULP from the correctly rounded result of its own inputs at seq %d pos %d",
		su.SideName, su.Op, fmtULP(sd.LocalULP), su.Seq, su.Pos)
	if len(su.Element) > 0 {
		fmt.Fprintf(&b, " element %v", su.Element)
	}
	switch su.Rule {
	case "outlier":
		fmt.Fprintf(&b, "; the same op in %s's other layers is at %s", su.SideName, fmtULP(su.NoiseFloorULP))
	case "systematic":
		fmt.Fprintf(&b, "; every layer's %s on %s is, on %s only %s", strings.TrimPrefix(o.Family, "layers.*."),
			su.SideName, names[1-su.Side], fmtULP(su.NoiseFloorULP))
	}
	if other.measured() {
		fmt.Fprintf(&b, "; %s's own %s is %s", names[1-su.Side], o.Op, fmtULP(other.LocalULP))
	}
	if sd.EngineLocalULP >= 0 {
		fmt.Fprintf(&b, "; the canonical engine from %s's inputs %s", su.SideName, fmtULP(sd.EngineLocalULP))
	}
	return b.String()
}

// fmtULP prints a ULP figure (view.FormatULPs: the TUI prints them the same way).
func fmtULP(x float64) string { return view.FormatULPs(x) }

// Exit is the audit's exit status: 0 without suspects, 1 with.
func (r *AuditReport) Exit() int {
	if len(r.Suspects) > 0 {
		return 1
	}
	return 0
}

// View is the audit as view types, for the TUI.
func (r *AuditReport) View() *view.Audit {
	out := &view.Audit{Headline: r.Headline(), Local: map[string][2]float64{}, Elapsed: r.Elapsed}
	for _, o := range r.Ops {
		var l [2]float64
		for j, sd := range o.Sides {
			l[j] = -1
			if sd.measured() {
				l[j] = sd.LocalULP
			}
		}
		out.Local[o.Op] = l
	}
	for _, s := range r.Suspects {
		var col int64
		if len(s.Element) > 0 {
			col = s.Element[0]
		}
		out.Suspects = append(out.Suspects, view.Suspect{Op: s.Op, Side: s.Side, SideName: s.SideName,
			At: view.Coord{Step: s.Step, Seq: s.Seq, Pos: s.Pos, Feature: col}, LocalULP: s.LocalULP,
			FloorULP: s.NoiseFloorULP, Ratio: s.Ratio, Evidence: s.Evidence})
	}
	return out
}

// fmtRatio prints a local error's multiple of its floor.
func fmtRatio(x float64) string {
	if x >= AuditNonFiniteULP/1e3 {
		return "∞"
	}
	return fmtULP(x)
}
