package session

import (
	"encoding/json"

	"bitalign/capture"
)

// SchemaVersion is the version of the JSON report (docs/report-schema.md). Adding fields keeps the version;
// renaming, removing or changing the meaning of one bumps it.
const SchemaVersion = 1

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
	Op     string
	Index  int32
	Role   string
	DType  string
	At     Coord
	A      Value
	B      Value
	ULP    uint64
	Class  Class
	Cause  Cause
	Detail string // which inputs or producers decided the cause
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

	Elements   int64  // compared
	Mismatched int64  // elements whose bits differ
	MaxULP     uint64 // over numeric and NaN-payload mismatches
	MaxAt      *Coord
	MaxA, MaxB *Value
	FirstAt    *Coord // earliest mismatch (step, seq, pos, element)
	// Hist[b]: elements whose distance is in [2^(b−1), 2^b); Hist[0]: equal elements. NaN-against-number
	// mismatches are not in it: Σ Hist + NaNNumber = Elements.
	Hist       [65]uint64
	MaxAbs     float64
	MeanAbs    float64 // Σ|a−b| over finite pairs / Elements
	MaxRel     float64
	NaNA       int64
	NaNB       int64
	InfA       int64
	InfB       int64
	NaNNumber  int64
	NaNPayload int64
	// token positions (rows) present on one side only
	MissingRowsA int64
	MissingRowsB int64
	Cause        Cause
	CauseDetail  string
	Map          *Map

	first      hit   // the earliest mismatch, for the report's first divergence
	firstCoord Coord // its coordinates
}

// Divergent reports whether the op has mismatched elements.
func (o *OpStat) Divergent() bool { return o.Mismatched > 0 }

// Report is the result of Diff.
type Report struct {
	Command   string // the command whose report this is, for the heading: "" (diff) or "replay"
	A, B      CaptureInfo
	Identical bool
	First     *Divergence // nil when nothing differs
	Ops       []OpStat    // execution order: index, then role (weights, inputs, output), then name
	Missing   []MissingTensor
	// Compared is Σ Elements; Mismatched is Σ Mismatched over ops.
	Compared, Mismatched int64
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
