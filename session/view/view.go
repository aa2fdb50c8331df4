// Package view holds the plain structs a front end draws and the Source, Loader and Progress through which it
// reads a debugging session. Following Delve's split, the TUI never reaches into the session core: the core
// (session.NewSource, session.Load) fills these structs, and the TUI's tests and screenshots use a fake
// Source. The package imports neither the engine nor the capture format.
package view

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"
)

// Progress is a loader's report of how far it got.
type Progress struct {
	Stage       string // "generating the demo", "opening the captures", "diffing", ...
	Done, Total int64  // Total 0: unknown
}

// Loader opens (or generates) the captures and diffs them. It may run in the background; progress may be
// called from any goroutine.
type Loader func(ctx context.Context, progress func(Progress)) (Source, error)

// ReportFormats are the formats Source.WriteReport writes, as --format names them.
var ReportFormats = []string{"text", "json", "md", "html"}

// FormatOf maps a report file's extension to its format: .md/.markdown, .json, .html/.htm, .txt. The TUI's
// export and `bitalign diff -o FILE` both use it.
func FormatOf(path string) (string, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".md", ".markdown":
		return "md", nil
	case ".json":
		return "json", nil
	case ".html", ".htm":
		return "html", nil
	case ".txt", ".text":
		return "text", nil
	}
	return "", fmt.Errorf("%s: unknown extension for a report (use .md, .json, .html or .txt)", path)
}

// Source is everything the UI asks of a loaded debugging session. Calls other than Report may be slow and
// are always made from a background command, never from Update or View.
type Source interface {
	// Report is the whole-capture diff. It never changes once the source is loaded, except for a Completer's:
	// the verdict first (Report.Pending set), then, once Completer.Wait has returned, the complete report.
	Report() *Report
	// Pair returns both sides of one tensor over tokens × features.
	Pair(ctx context.Context, k Key) (*Pair, error)
	// Replay re-executes k's op from each side's captured inputs. ErrNoReplay when no checkpoint is loaded.
	Replay(ctx context.Context, k Key) (*Replay, error)
	// WriteReport writes the divergence report in one of ReportFormats.
	WriteReport(w io.Writer, format string) error
}

// Completer is a Source whose report comes in two parts: Report is first the verdict (the first divergence
// and its cause, every op's status; Report.Pending says what is still being computed), then the complete
// report, computed in the background.
type Completer interface {
	// Wait returns once Report is the complete report, or with the error that stopped it (ctx's when ctx
	// ends first).
	Wait(ctx context.Context) error
	// Progress is the background's latest progress.
	Progress() Progress
}

// ErrNoReplay is returned by Source.Replay when replay is impossible (no checkpoint).
var ErrNoReplay = fmt.Errorf("replay needs a checkpoint (open with --checkpoint DIR)")

// Key names one tensor of a capture: an op's output (or input) at one step for one sequence.
type Key struct {
	Op   string
	Role string
	Step int64
	Seq  int64
}

func (k Key) String() string {
	return fmt.Sprintf("%s[%s] step %d seq %d", k.Op, k.Role, k.Step, k.Seq)
}

// Status of one op in the report.
type Status int

const (
	Identical     Status = iota // every element bitwise equal
	Divergent                   // at least one element differs
	MissingA                    // captured only by side B
	MissingB                    // captured only by side A
	Incomplete                  // compared elements identical, but positions missing on a side
	ShapeMismatch               // shapes or dtypes disagree: nothing compared
)

func (s Status) String() string {
	switch s {
	case Identical:
		return "identical"
	case Divergent:
		return "divergent"
	case MissingA:
		return "missing in A"
	case MissingB:
		return "missing in B"
	case Incomplete:
		return "incomplete"
	case ShapeMismatch:
		return "shape mismatch"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// Missing reports whether one side lacks the tensor.
func (s Status) Missing() bool { return s == MissingA || s == MissingB }

// Problem reports a status that is neither identical nor divergent: something was not compared.
func (s Status) Problem() bool { return s != Identical && s != Divergent }

// CaptureInfo is one capture's metadata as shown side by side in the overview.
type CaptureInfo struct {
	Path          string
	Side          string // "trainer", "sampler", ...
	Producer      string
	Model         string // architecture and size, e.g. "llama 4L h256"
	DType         string
	BatchSize     int
	TP, PP, DP    int
	Ranks         int
	KernelProfile string
	Step          int64
	Seed          uint64
	Tensors       int
	Bytes         int64
	Created       time.Time
}

// Coord locates one element: a token (step, seq, pos) and a flat feature index.
type Coord struct {
	Step, Seq, Pos int64
	Feature        int64
}

// Divergence is the first op (in execution order) whose outputs differ.
type Divergence struct {
	Op     string
	Role   string
	At     Coord
	MaxULP uint64
}

// SeqKey names one (step, seq) slice of an op.
type SeqKey struct{ Step, Seq int64 }

// OpStat is one op's row in the report.
type OpStat struct {
	Op         string
	Index      int32
	Role       string
	Layer      int // -1 for ops outside the layer stack
	DType      string
	Shape      []int64 // per-token feature shape (the whole shape when the tensor is not per token)
	Status     Status
	Elements   int64
	Mismatched int64
	MaxULP     uint64
	MaxAt      *Coord
	Hist       [65]uint64 // bucket b: ULP in [2^(b-1), 2^b); bucket 0: equal
	MaxAbs     float64
	MeanAbs    float64
	MaxRel     float64
	NaNA, NaNB int64
	InfA, InfB int64
	Cause      string   // "", "local", "propagated" (from the diff, when known)
	Seqs       []SeqKey // the (step, seq) slices captured for this op, in order
	// Located: compared through fingerprints (a side holds no values): Elements and Mismatched count token
	// rows, and Source.Pair says why there is no heatmap.
	Located bool
	// Pending: only Status, Cause and where the op first differs are known yet (Report.Pending); Elements
	// is known, Mismatched, MaxULP, Hist and the other statistics are zero until the report completes.
	Pending bool
}

// MismatchFrac is the fraction of elements that differ.
func (o *OpStat) MismatchFrac() float64 {
	if o.Elements == 0 {
		return 0
	}
	return float64(o.Mismatched) / float64(o.Elements)
}

// Key returns the key of the op's most interesting slice: where its maximum ULP is, else its first slice.
func (o *OpStat) Key() Key {
	k := Key{Op: o.Op, Role: o.Role}
	switch {
	case o.MaxAt != nil:
		k.Step, k.Seq = o.MaxAt.Step, o.MaxAt.Seq
	case len(o.Seqs) > 0:
		k.Step, k.Seq = o.Seqs[0].Step, o.Seqs[0].Seq
	}
	return k
}

// Report is the result of diffing two captures.
type Report struct {
	A, B      CaptureInfo
	Identical bool
	First     *Divergence
	Ops       []OpStat // execution order
	Routing   *Routing // the MoE layers' routing comparison; nil when the captures have none
	RL        *RL      // both sides' per-token log-probabilities compared; nil when a side has none
	// Pending says what is still being computed ("every op's statistics, the logprob section") while the
	// report is a Completer's verdict; "" once the report is complete. Identical, First, the first divergent
	// op's row and every op's Status and Cause are final; ops marked Pending have no statistics yet.
	Pending string
}

// RouteMark is how one token's routing compares in one layer (session.RouteMark).
type RouteMark uint8

const (
	RouteAbsent  RouteMark = iota // not compared: a side lacks the token
	RouteSame                     // same experts, order and weights
	RouteWeights                  // same experts in the same order, other combine weights
	RouteOrder                    // the same set of experts in another order
	RouteSet                      // another set of experts: a routing flip
)

// Routing is the routing comparison of every MoE layer, as the core computed it once (session.Routing).
type Routing struct {
	Summary string  // one line: "3 of 512 token-layers flipped (expert set differs) in 2 of 4 MoE layers"
	First   string  // the first flip over every layer in one line, "" when no expert set differs
	Tokens  []Coord // every compared token (Feature 0), in order: the grid's columns
	Layers  []RoutingLayer
}

// RoutingLayer is one MoE layer's row of the routing grid.
type RoutingLayer struct {
	Layer                                   int
	Op                                      string // layers.L.mlp.experts: the op the tensor view opens
	Tokens, Flipped, OrderOnly, WeightsOnly int64
	Marks                                   []RouteMark // per Routing.Tokens
	FirstFlip                               int         // index into Routing.Tokens of the layer's first flip, -1 when none
	Detail                                  string      // why the layer could not be compared, "" when it was
}

// Router is a Source that can show one token's routing in one MoE layer on both sides (the session's source
// implements it; a source without MoE layers returns an error).
type Router interface {
	Route(ctx context.Context, layer int, at Coord) (*TokenRoute, error)
}

// TokenRoute is one token's routing in one layer on both sides: what the routing view's detail panel shows.
type TokenRoute struct {
	Layer  int
	At     Coord
	Mark   RouteMark
	Text   string // the core's one line: the flip ("layers.7.mlp.experts: expert set differs at ...") or "same experts"
	Margin string // "margin 1 ULP", "" when the router logits were not captured
	K      int
	A, B   RouteSide
}

// RouteSide is one side's routing of a token.
type RouteSide struct {
	Experts []int         // selected, in the side's order
	Weights []float64     // their combine weights (nil when not captured)
	Top     []ExpertScore // the router's best experts by the canonical order (score descending, id ascending): k + 2 of them; nil without router logits
}

// ExpertScore is one expert's router logit on one side.
type ExpertScore struct {
	ID       int
	Logit    string // the value as the capture holds it (shortest decimal)
	Selected bool   // the side selected it
}

// RL is the logprob comparison (docs/rl-metrics.md) as the sequences view draws it.
type RL struct {
	Headline string  // the core's one-line figures ("logprobs: 5 of 8 sequences differ, ...")
	Verdict  string  // for a logprob-only pair (no ops): the report's verdict
	Captures bool    // both sides are captures: a sequence's first divergent op can be found (SeqFirst)
	Seqs     []RLSeq // worst first
	Step     int64   // the captures' step the logprobs come from
}

// RLSeq is one sequence's logprob figures.
type RLSeq struct {
	Seq          int64
	Tokens       int64 // compared
	Equal        int64 // bitwise-equal log-probabilities
	FirstDiff    int64 // first position where the sides differ, −1 none
	MaxAbs       float64
	MeanAbs      float64
	K3           float64
	ISMax        float64
	Note         string // "4 draws differ", "1 token id differs", "5 positions on one side only"
	Differs      bool
	PosLo, PosHi int64
	// Profile is the largest |Δ| per bucket of positions [PosLo, PosHi) (NaN: a non-finite difference).
	Profile []float32
}

// SeqFirst is what a Source implements when it can find one sequence's first divergent op (both sides
// captures): the earliest position where any divergent op differs for that sequence, then execution order.
type SeqFirst interface {
	// FirstDivergenceOf returns that op's key and position; ok false when the sequence's tensors agree.
	FirstDivergenceOf(ctx context.Context, step, seq int64) (k Key, pos int64, ok bool, err error)
}

// FirstDivergent returns the index in Ops of the first divergent op, or -1.
func (r *Report) FirstDivergent() int {
	for i := range r.Ops {
		if r.Ops[i].Status == Divergent {
			return i
		}
	}
	return -1
}

// Pair holds both sides of one tensor slice over Rows tokens × Cols features (trailing dims flattened).
type Pair struct {
	Key   Key
	DType string // capture dtype name: "bf16", "f16", "f32", "f64", "f8e4m3", "f8e5m2", "i32", "i64", "u8", "bool"
	// ULPDType is the dtype ULP distances are counted in ("" = DType): "bf16" for f32 tensors whose values are
	// all bf16 values on both sides (bf16 logits widened to float32), so that one bf16 step is 1 ULP, not 65536.
	ULPDType   string
	Rows       int
	Cols       int
	Pos0       int64  // position of row 0
	A, B       []byte // little-endian, Rows*Cols elements each; nil when that side lacks the tensor
	HasA, HasB []bool // per row: whether the side captured it (nil: every row)

	// The core's comparison of the pair, computed once per pair. Levels is nil when the source did not
	// compare the pair (then a front end compares A and B itself).
	Levels     []uint8    // per element: 0 equal (or a side lacks the row), 1..64 log2 ULP bucket, LevelNaN
	Hist       [65]uint64 // elements per level; missing rows count as equal, NaN against a number in 64
	MaxULP     uint64     // largest ULP distance over rows both sides hold
	MaxAt      int        // element index of the first largest ULP (0 when all equal)
	MissingRow int        // rows a side did not capture
}

// LevelNaN is the level of a NaN against a number; levels 1..64 are log2 ULP buckets: ULP in [2^(l−1), 2^l).
const LevelNaN = 65

// Has reports whether side 0 (A) or 1 (B) captured row r.
func (p *Pair) Has(side, r int) bool {
	data, has := p.A, p.HasA
	if side == 1 {
		data, has = p.B, p.HasB
	}
	return data != nil && (has == nil || has[r])
}

// Replay is the verdict of re-executing one op from each side's captured inputs.
type Replay struct {
	Key             Key
	Backend         string // "CPU" or "GPU (NVIDIA H200)"
	InputsIdentical bool   // both sides fed the op bitwise-equal inputs
	FromA, FromB    ReplaySide
	Local           bool   // the divergence starts in this op (not propagated from upstream)
	Verdict         string // one line for the status line and the panel
	Elapsed         time.Duration
}

// ReplaySide is the replay of the op from one side's inputs, compared with that side's captured output.
type ReplaySide struct {
	Reproduces bool   // replay output is bitwise equal to the side's captured output
	Mismatched int64  // elements that differ from the captured output
	MaxULP     uint64 // largest ULP distance to the captured output
	Out        []byte // the replayed output: rows of Pair.Cols elements, row r is the pair's row Row0+r; nil if unavailable
	Row0       int
	Err        string // why the op could not be replayed from these inputs
}

// Bits returns element (row, col) of the replayed output, false when it was not replayed.
func (r *ReplaySide) Bits(size, cols, row, col int) ([]byte, bool) {
	i := (row-r.Row0)*cols + col
	if row < r.Row0 || i < 0 || (i+1)*size > len(r.Out) {
		return nil, false
	}
	return r.Out[i*size : (i+1)*size], true
}

// Auditor is a Source that can audit its captures (session.Audit: every op's local error on both sides
// against the oracle of that side's own inputs, and the suspects). Only sources with a checkpoint implement it
// usefully; the others return ErrNoReplay.
type Auditor interface {
	Audit(ctx context.Context, progress func(done, total int)) (*Audit, error)
}

// Audit is the audit as the TUI shows it.
type Audit struct {
	Headline string                // the one-line verdict, as every report words it
	Local    map[string][2]float64 // op → each side's local error in ULPs at the row's scale; -1: not measured
	Suspects []Suspect             // most severe first
	Elapsed  time.Duration
}

// Suspect is an (op, side) whose local error stands far above its noise floor (docs/audit.md).
type Suspect struct {
	Op       string
	Side     int // 0: A, 1: B
	SideName string
	At       Coord // where its error is largest
	LocalULP float64
	FloorULP float64
	Ratio    float64
	Evidence string
}

// SuspectOf reports the rank (1 = most severe) of op's suspect on side, 0 when it is none.
func (a *Audit) SuspectOf(op string, side int) int {
	if a == nil {
		return 0
	}
	for i, s := range a.Suspects {
		if s.Op == op && s.Side == side {
			return i + 1
		}
	}
	return 0
}

// FindOp returns the index in Ops of (op, role), or -1.
func (r *Report) FindOp(op, role string) int {
	for i := range r.Ops {
		if r.Ops[i].Op == op && r.Ops[i].Role == role {
			return i
		}
	}
	return -1
}

// NonFiniteULP is the local error of an output that is NaN or Inf where the correctly rounded result is a
// number (or a number where it is NaN): larger than any finite error, and a number JSON can hold.
const NonFiniteULP = 1e30

// FormatULPs writes a local error in ULPs with the precision it deserves: "—" when not measured (negative),
// "NaN/Inf" for NonFiniteULP, two significant digits under 10, whole numbers above.
func FormatULPs(x float64) string {
	switch {
	case x < 0:
		return "—"
	case x >= NonFiniteULP:
		return "NaN/Inf"
	case x == 0:
		return "0"
	case x < 10:
		return fmt.Sprintf("%.2g", x)
	case x < 1e6:
		return fmt.Sprintf("%.0f", x)
	}
	return fmt.Sprintf("%.3g", x)
}
