package session

import (
	"encoding/json"
	"io"
)

// The JSON report (docs/report-schema.md). These types are the schema: field names and meanings change only
// with SchemaVersion.
type jsonReport struct {
	Schema          string          `json:"schema"`
	Version         int             `json:"version"`
	Identical       bool            `json:"identical"`
	A               CaptureInfo     `json:"a"`
	B               CaptureInfo     `json:"b"`
	Compared        int64           `json:"compared"`
	Mismatched      int64           `json:"mismatched"`
	OpsFilter       []string        `json:"ops_filter"`
	IgnoreMissing   bool            `json:"ignore_missing"`
	Warnings        []string        `json:"warnings,omitempty"`
	Tolerance       *jsonTolerance  `json:"tolerance"`
	FirstDivergence *jsonDivergence `json:"first_divergence"`
	Ops             []jsonOp        `json:"ops"`
	Missing         []MissingTensor `json:"missing"`
}

type jsonTolerance struct {
	MaxULP     *uint64  `json:"max_ulp"`
	MaxRel     *float64 `json:"max_rel"`
	Within     bool     `json:"within"`
	ULPHeld    *bool    `json:"ulp_held"`
	RelHeld    *bool    `json:"rel_held"`
	WorstULP   uint64   `json:"worst_ulp"`
	WorstULPOp string   `json:"worst_ulp_op"`
	WorstRel   float64  `json:"worst_rel"`
	WorstRelOp string   `json:"worst_rel_op"`
	NaNOp      string   `json:"nan_op"`
	InfOp      string   `json:"inf_op"`
	Problems   []string `json:"problems"`
}

type jsonValue struct {
	Hex     string `json:"hex"`
	Decimal string `json:"decimal"`
}

type jsonCoord struct {
	Step    int64   `json:"step"`
	Seq     int64   `json:"seq"`
	Pos     int64   `json:"pos"`
	Element []int64 `json:"element"`
}

type jsonDivergence struct {
	Op       string  `json:"op"`
	Index    int32   `json:"index"`
	Role     string  `json:"role"`
	DType    string  `json:"dtype"`
	ULPDType *string `json:"ulp_dtype"`
	jsonCoord
	A           jsonValue `json:"a"`
	B           jsonValue `json:"b"`
	ULP         *uint64   `json:"ulp"`
	RMSRel      float64   `json:"rms_rel"`
	Class       string    `json:"class"`
	Cause       string    `json:"cause"`
	CauseDetail string    `json:"cause_detail"`
}

type jsonBucket struct {
	Log2  int    `json:"log2"`
	Count uint64 `json:"count"`
}

type jsonOp struct {
	Op           string       `json:"op"`
	Index        int32        `json:"index"`
	Role         string       `json:"role"`
	Status       Status       `json:"status"`
	DType        string       `json:"dtype"`
	Shape        []int64      `json:"shape"`
	ShapeB       []int64      `json:"shape_b,omitempty"`
	Detail       string       `json:"detail,omitempty"`
	Elements     int64        `json:"elements"`
	Mismatched   int64        `json:"mismatched"`
	ULPDType     *string      `json:"ulp_dtype"`
	MaxULP       uint64       `json:"max_ulp"`
	MaxAt        *jsonCoord   `json:"max_at"`
	MaxA         *jsonValue   `json:"max_a"`
	MaxB         *jsonValue   `json:"max_b"`
	FirstAt      *jsonCoord   `json:"first_at"`
	Hist         []jsonBucket `json:"ulp_hist"`
	MaxAbs       float64      `json:"max_abs"`
	MeanAbs      float64      `json:"mean_abs"`
	MaxRel       float64      `json:"max_rel"`
	MaxRMSRel    float64      `json:"max_rms_rel"`
	NaNA         int64        `json:"nan_a"`
	NaNB         int64        `json:"nan_b"`
	InfA         int64        `json:"inf_a"`
	InfB         int64        `json:"inf_b"`
	NaNNumber    int64        `json:"nan_vs_number"`
	NaNPayload   int64        `json:"nan_payload"`
	InfMismatch  int64        `json:"inf_mismatched"`
	MissingRowsA int64        `json:"missing_rows_a"`
	MissingRowsB int64        `json:"missing_rows_b"`
	Cause        string       `json:"cause,omitempty"`
	CauseDetail  string       `json:"cause_detail,omitempty"`
}

func jcoord(c *Coord) *jsonCoord {
	if c == nil {
		return nil
	}
	return &jsonCoord{Step: c.Step, Seq: c.Seq, Pos: c.Pos, Element: nonNil(c.Element)}
}

func jvalue(v *Value) *jsonValue {
	if v == nil {
		return nil
	}
	return &jsonValue{Hex: v.Hex, Decimal: v.Decimal}
}

// orNull is s, or nil (JSON null) when s is "".
func orNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// WriteJSON writes r as the versioned JSON report of docs/report-schema.md (indented, deterministic).
func WriteJSON(w io.Writer, r *Report) error {
	out := jsonReport{Schema: "bitalign.diff", Version: SchemaVersion, Identical: r.Identical, A: r.A, B: r.B,
		Compared: r.Compared, Mismatched: r.Mismatched, OpsFilter: nonNil(r.Filter), IgnoreMissing: r.IgnoreMissing, Warnings: r.Warnings,
		Ops: []jsonOp{}, Missing: nonNil(r.Missing)}
	if c := r.Check; c != nil {
		t := &jsonTolerance{Within: c.Within, WorstULP: c.WorstULP, WorstULPOp: c.WorstULPOp, WorstRel: c.WorstRel,
			WorstRelOp: c.WorstRelOp, NaNOp: c.NaNOp, InfOp: c.InfOp, Problems: nonNil(c.Problems)}
		if c.HasULP {
			t.MaxULP, t.ULPHeld = &c.MaxULP, &c.ULPHeld
		}
		if c.HasRel {
			t.MaxRel, t.RelHeld = &c.MaxRel, &c.RelHeld
		}
		out.Tolerance = t
	}
	if f := r.First; f != nil {
		out.FirstDivergence = &jsonDivergence{Op: f.Op, Index: f.Index, Role: f.Role, DType: f.DType, ULPDType: orNull(f.ULPDType),
			jsonCoord: *jcoord(&f.At), A: jsonValue{f.A.Hex, f.A.Decimal}, B: jsonValue{f.B.Hex, f.B.Decimal},
			RMSRel: f.RMSRel, Class: f.Class.String(), Cause: string(f.Cause), CauseDetail: f.Detail}
		if f.ULPDType != "" {
			out.FirstDivergence.ULP = &f.ULP
		}
	}
	for i := range r.Ops {
		o := &r.Ops[i]
		jo := jsonOp{Op: o.Op, Index: o.Index, Role: o.Role, Status: o.Status, DType: o.DType, Shape: nonNil(o.Shape),
			ShapeB: o.ShapeB, Detail: o.Detail, Elements: o.Elements, Mismatched: o.Mismatched,
			ULPDType: orNull(o.ULPDType), MaxULP: o.MaxULP, MaxRMSRel: o.MaxRMSRel, InfMismatch: o.InfMismatched,
			MaxAt: jcoord(o.MaxAt), MaxA: jvalue(o.MaxA), MaxB: jvalue(o.MaxB), FirstAt: jcoord(o.FirstAt),
			Hist: []jsonBucket{}, MaxAbs: o.MaxAbs, MeanAbs: o.MeanAbs, MaxRel: o.MaxRel, NaNA: o.NaNA, NaNB: o.NaNB,
			InfA: o.InfA, InfB: o.InfB, NaNNumber: o.NaNNumber, NaNPayload: o.NaNPayload,
			MissingRowsA: o.MissingRowsA, MissingRowsB: o.MissingRowsB, Cause: string(o.Cause), CauseDetail: o.CauseDetail}
		for b, n := range o.Hist {
			if n > 0 {
				jo.Hist = append(jo.Hist, jsonBucket{b, n})
			}
		}
		out.Ops = append(out.Ops, jo)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
