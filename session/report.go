package session

import (
	"encoding/json"
	"slices"
	"strconv"

	"bitalign/capture"
)

// SchemaVersion is the version of the JSON report (docs/report-schema.md). Adding fields keeps the version;
// renaming, removing or changing the meaning of one bumps it.
const SchemaVersion = 4

// Status is an aligned op's verdict.
type Status string

const (
	StatusIdentical     Status = "identical"      // every compared element has identical bits, nothing missing
	StatusDivergent     Status = "divergent"      // at least one element differs
	StatusIncomplete    Status = "incomplete"     // compared elements identical, but positions missing on a side
	StatusMissingA      Status = "missing_in_a"   // the op is only in B
	StatusMissingB      Status = "missing_in_b"   // the op is only in A
	StatusShapeMismatch Status = "shape_mismatch" // per-token shapes or dtypes disagree: nothing compared
)

// Cause says whether a divergent op's inputs already differed.
type Cause string

const (
	CauseNone       Cause = ""           // not divergent
	CauseLocal      Cause = "local"      // inputs (or producers' outputs) identical where the output differs
	CausePropagated Cause = "propagated" // an input already differed
	CauseUnknown    Cause = "unknown"    // neither inputs nor producers were captured at those positions
)

// CaptureInfo summarises one side's capture.
type CaptureInfo struct {
	Path          string `json:"path"`
	Side          string `json:"side"`
	Architecture  string `json:"architecture,omitempty"`
	Tensors       int    `json:"tensors"`
	Bytes         int64  `json:"bytes"`
	TP            int    `json:"tp"`
	PP            int    `json:"pp"`
	DP            int    `json:"dp"`
	KernelProfile string `json:"kernel_profile"`
	BatchSize     int    `json:"batch_size"`
	Seed          uint64 `json:"seed"`
	Step          int64  `json:"step"`
	Producer      string `json:"producer"`
	// Table describes a logprob table's side ("parquet logprob table, per-sequence, 6 sequences, 114
	// tokens"); "" for a capture.
	Table string `json:"table,omitempty"`
}

func captureInfo(c *capture.Capture) CaptureInfo {
	m := c.Meta()
	info := CaptureInfo{Path: c.Path(), Side: m.Side, Tensors: c.Len(), TP: m.TP, PP: m.PP, DP: m.DP,
		KernelProfile: m.KernelProfile, BatchSize: m.BatchSize, Seed: m.Seed, Step: m.Step, Producer: m.Producer}
	var model struct {
		Architecture string `json:"architecture"`
	}
	if len(m.Model) > 0 && json.Unmarshal(m.Model, &model) == nil {
		info.Architecture = model.Architecture
	}
	for i := 0; i < c.Len(); i++ {
		info.Bytes += c.Entry(i).NBytes
	}
	return info
}

// Coord locates one element: the tensor's step, sequence and token position, and the element's index within
// the per-token feature shape (Element; Col is the same index flattened).
type Coord struct {
	Step    int64
	Seq     int64
	Pos     int64
	Element []int64
	Col     int64
}

// Value is one element's bits and value.
type Value struct {
	Bits    uint64
	Hex     string
	Decimal string
}

func valueOf(f *format, x uint64) Value { return Value{Bits: x, Hex: f.hex(x), Decimal: f.decimal(x)} }

// Divergence is one mismatched element with both values.
type Divergence struct {
	Op       string
	Index    int32
	Role     string
	DType    string
	ULPDType string // the dtype ULP is counted in (OpStat.ULPDType); "" for integers and bools
	At       Coord
	A        Value
	B        Value
	ULP      uint64  // 0 for integers and bools
	RMSRel   float64 // |a−b| / RMS of its row (0 unless both values are finite)
	Class    Class
	Cause    Cause
	Detail   string // which inputs or producers decided the cause
	// Routing is the routing difference at the divergence's token when the op is a MoE layer's router, experts
	// or expert weights and the two sides route that token differently: the divergence is a routing flip.
	Routing *Flip
	// Located: the op was compared through fingerprints (OpStat.Located): A, B, ULP and Class say nothing.
	Located bool
}

// MissingTensor is a run of positions of one (op, role, step, seq) present on one side only, or a tensor that
// could not be aligned (Reason says why).
type MissingTensor struct {
	MissingIn string `json:"missing_in"` // "A" or "B": the side that lacks it
	Op        string `json:"op"`
	Index     int32  `json:"index"`
	Role      string `json:"role"`
	Step      int64  `json:"step"`
	Seq       int64  `json:"seq"`
	Pos       int64  `json:"pos"`
	NTok      int64  `json:"ntok"`
	Reason    string `json:"reason,omitempty"`
}

// Map is a coarse picture of where an op's mismatches are: Rows × Cols cells over positions
// [PosLo, PosHi) × features [0, Features), over every step and sequence; a cell holds the largest level of
// its elements: 0 equal, b in 1..64 for ULP in [2^(b−1), 2^b), 65 for NaN against a number.
type Map struct {
	Rows, Cols   int
	PosLo, PosHi int64
	Features     int64
	Cells        []uint8
}

// OpStat is the comparison of one aligned (op, role) over every step, sequence and position.
type OpStat struct {
	Op     string
	Index  int32
	Role   string
	Status Status
	DType  string
	Shape  []int64 // per-token feature shape (the whole shape when not per token)
	ShapeB []int64 // B's, when it differs (Status shape_mismatch)
	Detail string

	Elements   int64 // compared
	Mismatched int64 // elements whose bits differ
	// ULPDType is the dtype distances are counted in: DType for floats, except "bf16" for an f32 op whose every
	// compared value on both sides is a bf16 value (the low 16 bits of each f32 zero: bf16 logits widened);
	// "" for integers and bools, which get no distances (MaxULP 0, MaxAt nil, Hist[0] only).
	ULPDType   string
	MaxULP     uint64 // over numeric and NaN-payload mismatches, in ULPDType's ULPs
	MaxAt      *Coord
	MaxA, MaxB *Value
	FirstAt    *Coord // earliest mismatch (step, seq, pos, element)
	// Hist[b]: elements whose distance is in [2^(b−1), 2^b); Hist[0]: equal elements. NaN-against-number
	// mismatches are not in it: Σ Hist + NaNNumber = Elements (floats).
	Hist    [65]uint64
	MaxAbs  float64 // floats only, like MeanAbs, MaxRel and MaxRMSRel
	MeanAbs float64 // Σ|a−b| over finite pairs / Elements
	MaxRel  float64 // largest |a−b| / max(|a|, |b|)
	// MaxRMSRel is the largest |a−b| / RMS of the element's row (both sides' finite values of that token
	// position; the whole tensor when it is not per token) over mismatched finite pairs: a scale-relative
	// error that a sign flip near zero does not inflate.
	MaxRMSRel     float64
	NaNA          int64
	NaNB          int64
	InfA          int64
	InfB          int64
	NaNNumber     int64
	NaNPayload    int64
	InfMismatched int64 // numeric mismatches with ±Inf on a side
	// token positions (rows) present on one side only
	MissingRowsA int64
	MissingRowsB int64
	Cause        Cause
	CauseDetail  string
	Map          *Map
	// Located: a side holds this op only as fingerprints (docs/capture-format.md), so it was compared row by
	// row through fingerprints: Elements and Mismatched count token rows, FirstAt has no element, and there
	// are no values, ULPs, histogram buckets above 0 or map.
	Located bool

	first       hit   // the earliest mismatch, for the report's first divergence (ulp in ULPDType)
	firstCoord  Coord // its coordinates
	firstRMSRel float64
	// pending: DiffVerdict's cheap pass compared the op's rows, not its elements: Status, FirstAt and the
	// cause are known, the statistics (Mismatched, MaxULP, Hist, NaN counts, map, ULPDType) are not.
	pending bool
}

// Divergent reports whether the op has mismatched elements.
func (o *OpStat) Divergent() bool { return o.Mismatched > 0 || o.Status == StatusDivergent }

// Pending reports whether the op's statistics are still to be computed (a DiffVerdict report): only its
// status, first mismatch and cause are known.
func (o *OpStat) Pending() bool { return o.pending }

// Report is the result of Diff.
type Report struct {
	Command string // the command whose report this is, for the heading: "" (diff) or "replay"
	A, B    CaptureInfo
	// Identical: something was compared, every compared element has identical bits, no op has mismatched
	// shapes, and nothing is on one side only (unless IgnoreMissing).
	Identical bool
	First     *Divergence // nil when nothing differs; the order is firstOrder's
	Ops       []OpStat    // execution order: index, then role (weights, inputs, output), then name
	Missing   []MissingTensor
	// Compared is Σ Elements; Mismatched is Σ Mismatched over ops. For a pair with a logprob table on a side
	// (no ops), they count the tokens compared and those whose log-probabilities differ.
	Compared, Mismatched int64
	// RL is the logprob section (docs/rl-metrics.md): nil unless both sides hold per-token log-probabilities.
	RL            *RLReport
	Filter        []string // WithOps's patterns: only matching ops were compared
	IgnoreMissing bool     // WithIgnoreMissing: absent tensors do not make the report not identical (MissingProblems)
	// Warnings are what the inputs could not decide for sure: a safetensors import whose execution order is
	// the data's (capture.ImportWarnings), op names one side carries with a prefix the other lacks
	// (capture.PrefixHint). Every report format shows them.
	Warnings []string
	Check    *Check // WithTolerance's result, nil without one
	// Routing compares the sides' expert selection per MoE layer; nil when neither capture has MoE layers.
	Routing *Routing
	// Located counts the ops compared through fingerprints (OpStat.Located); LocatedOnly names those of them
	// that diverge, in execution order: the ops whose differing rows are known but not their values.
	Located     int
	LocatedOnly []string

	// pending: a DiffVerdict report, whose first divergence is final but whose other ops' statistics, Check
	// and logprob section are not computed (Pending).
	pending bool
}

// Pending reports whether r is a verdict-first report (DiffVerdict): Identical, First, the first divergent
// op's statistics and every op's status and cause are those of the complete report; the other ops'
// statistics (OpStat.Pending), Mismatched, Check and RL are not computed.
func (r *Report) Pending() bool { return r.pending }

// RecordFull is the bitalign_capture.record line that records in full, next to every op's fingerprints, the
// located-only ops where a divergence starts: those not called propagated (their inputs or producers
// identical, or unknown), the first divergence among them; "" when no divergent op was located only. The
// propagated ones only carry a difference on.
func (r *Report) RecordFull() string {
	var ops []string
	for i := range r.Ops {
		o := &r.Ops[i]
		if o.Located && o.Divergent() && o.Cause != CausePropagated && !slices.Contains(ops, o.Op) {
			ops = append(ops, o.Op)
		}
	}
	if f := r.First; f != nil && f.Located && !slices.Contains(ops, f.Op) {
		ops = append([]string{f.Op}, ops...)
	}
	return RecordLine(ops)
}

// Passed reports whether the diff passes: identical, or within its tolerance (Check). bitalign diff exits 0
// exactly then (and 2 when nothing was compared).
func (r *Report) Passed() bool { return r.Identical || r.Check != nil && r.Check.Within }

// MissingProblems returns the missing tensors that count against the report: all of Missing, or with
// IgnoreMissing only those that could not be aligned (Reason set: incomplete shards, a shape that does not
// split into token rows), which are not merely absent.
func (r *Report) MissingProblems() []MissingTensor {
	if !r.IgnoreMissing {
		return r.Missing
	}
	var out []MissingTensor
	for _, m := range r.Missing {
		if m.Reason != "" {
			out = append(out, m)
		}
	}
	return out
}

// Tolerance bounds the differences a report may show and still pass (bitalign diff --max-ulp, --max-rel).
type Tolerance struct {
	MaxULP uint64  // largest distance in each op's ULPs (OpStat.ULPDType), checked when HasULP
	MaxRel float64 // largest |a−b| / RMS of the row (OpStat.MaxRMSRel), checked when HasRel
	HasULP bool
	HasRel bool
}

// Check is a report checked against a Tolerance.
type Check struct {
	Tolerance
	// Within: something was compared, every bound set held over every compared element, and no problem.
	Within  bool
	ULPHeld bool // every float op's MaxULP ≤ MaxULP and no NaN against a number (true when not HasULP)
	RelHeld bool // every float op's MaxRMSRel ≤ MaxRel and no mismatch with a NaN or ±Inf on one side (true when not HasRel)
	// the largest MaxULP and MaxRMSRel over float ops, and where ("op [role]")
	WorstULP   uint64
	WorstULPOp string
	WorstRel   float64
	WorstRelOp string
	NaNOp      string // the first op with a NaN against a number (it fails both bounds), or ""
	InfOp      string // the first op with a mismatch against ±Inf (it fails the rel bound), or ""
	// Problems fail the check whatever the bounds: nothing compared, integer values that differ, shapes
	// that disagree, tensors on one side only (unless IgnoreMissing).
	Problems []string
}

// Within checks r against t.
func (r *Report) Within(t Tolerance) Check {
	c := Check{Tolerance: t, ULPHeld: true, RelHeld: true}
	if r.Compared == 0 {
		c.Problems = append(c.Problems, "nothing compared")
	}
	if r.TablePair() {
		r.RL.within(&c, r.IgnoreMissing)
		c.Within = len(c.Problems) == 0 && (t.HasULP || t.HasRel) && c.ULPHeld && c.RelHeld
		return c
	}
	for i := range r.Ops {
		o := &r.Ops[i]
		name := o.Op + " [" + o.Role + "]"
		switch {
		case o.Status == StatusShapeMismatch:
			c.Problems = append(c.Problems, name+": shapes differ")
		case !o.Divergent():
		case o.ULPDType == "":
			c.Problems = append(c.Problems, name+": "+differing(o.Mismatched))
		default:
			if o.MaxULP > c.WorstULP || c.WorstULPOp == "" {
				c.WorstULP, c.WorstULPOp = o.MaxULP, name
			}
			if o.MaxRMSRel > c.WorstRel || c.WorstRelOp == "" {
				c.WorstRel, c.WorstRelOp = o.MaxRMSRel, name
			}
			if o.NaNNumber > 0 && c.NaNOp == "" {
				c.NaNOp = name
			}
			if o.InfMismatched > 0 && c.InfOp == "" {
				c.InfOp = name
			}
			c.ULPHeld = c.ULPHeld && (!t.HasULP || o.MaxULP <= t.MaxULP && o.NaNNumber == 0)
			c.RelHeld = c.RelHeld && (!t.HasRel || o.MaxRMSRel <= t.MaxRel && o.NaNNumber+o.InfMismatched == 0)
		}
	}
	if n := len(r.MissingProblems()); n > 0 {
		c.Problems = append(c.Problems, plural(n, "missing tensor"))
	}
	c.Within = len(c.Problems) == 0 && (t.HasULP || t.HasRel) && c.ULPHeld && c.RelHeld
	return c
}

// differing says how many integer values differ.
func differing(n int64) string {
	if n == 1 {
		return "1 value differs"
	}
	return strconv.FormatInt(n, 10) + " values differ"
}

// Divergent returns the indexes into r.Ops of the divergent ops, in execution order.
func (r *Report) Divergent() []int {
	var out []int
	for i := range r.Ops {
		if r.Ops[i].Divergent() {
			out = append(out, i)
		}
	}
	return out
}

// Title heads the report: "bitalign diff" or "bitalign replay".
func (r *Report) Title() string {
	if r.Command == "" {
		return "bitalign diff"
	}
	return "bitalign " + r.Command
}

// FindOp returns the index into r.Ops of (op, role), or −1.
func (r *Report) FindOp(op, role string) int {
	for i := range r.Ops {
		if r.Ops[i].Op == op && r.Ops[i].Role == role {
			return i
		}
	}
	return -1
}
