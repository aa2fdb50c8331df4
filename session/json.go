package session

import (
	"encoding/json"
	"io"
	"math"

	"bitalign/logprobs"
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
	Routing         []jsonRouting   `json:"routing"`
	Logprobs        *jsonLogprobs   `json:"logprobs"`     // version 3: null unless both sides hold logprobs
	Sequences       []jsonSeq       `json:"sequences"`    // version 3: every compared sequence, worst first
	Located         int             `json:"located"`      // version 4: ops compared through fingerprints
	LocatedOnly     []string        `json:"located_only"` // version 4: the divergent ones among them
	RecordFull      *string         `json:"record_full"`  // version 4: the record line for located_only, or null
}

type jsonRouting struct {
	Layer        int       `json:"layer"`
	Op           string    `json:"op"`
	K            int       `json:"k"`
	Tokens       int64     `json:"tokens"`
	Flipped      int64     `json:"flipped"`
	OrderOnly    int64     `json:"order_only"`
	WeightsOnly  int64     `json:"weights_only"`
	RouterDiffer *int64    `json:"router_differ"`
	Detail       string    `json:"detail,omitempty"`
	FirstFlip    *jsonFlip `json:"first_flip"`
	FirstDiff    *jsonFlip `json:"first_difference"`
}

type jsonMargin struct {
	ULP      uint64 `json:"ulp"`
	ULPDType string `json:"ulp_dtype"`
	Value    jnum   `json:"value"`
}

// jfloats is x as jnums (nil stays nil).
func jfloats(x []float64) []jnum {
	if x == nil {
		return nil
	}
	out := make([]jnum, len(x))
	for i, v := range x {
		out[i] = jf(v)
	}
	return out
}

type jsonFlip struct {
	Step        int64           `json:"step"`
	Seq         int64           `json:"seq"`
	Pos         int64           `json:"pos"`
	Kind        string          `json:"kind"`
	AExperts    []int64         `json:"a_experts"`
	BExperts    []int64         `json:"b_experts"`
	AWeights    []jnum          `json:"a_weights"`
	BWeights    []jnum          `json:"b_weights"`
	MarginA     *jsonMargin     `json:"margin_a"`
	MarginB     *jsonMargin     `json:"margin_b"`
	RouterSame  *bool           `json:"router_identical"`
	Cause       string          `json:"cause"`
	CauseDetail string          `json:"cause_detail"`
	Downstream  *jsonDownstream `json:"downstream"`
	Text        string          `json:"text"`
}

type jsonDownstream struct {
	Op       string `json:"op"`
	From     int64  `json:"from"`
	Tokens   int64  `json:"tokens"`
	Differ   int64  `json:"differ"`
	FirstPos *int64 `json:"first_pos"`
}

func jflip(f *Flip) *jsonFlip {
	if f == nil {
		return nil
	}
	j := &jsonFlip{Step: f.At.Step, Seq: f.At.Seq, Pos: f.At.Pos, Kind: f.Kind.String(), AExperts: f.A, BExperts: f.B,
		AWeights: jfloats(f.WA), BWeights: jfloats(f.WB), Cause: string(f.Cause), CauseDetail: f.Detail, Text: f.String()}
	if f.HasRouter {
		j.MarginA, j.MarginB = &jsonMargin{f.MarginAULP, f.MarginDType, jf(f.MarginA)}, &jsonMargin{f.MarginBULP, f.MarginDType, jf(f.MarginB)}
		same := f.RouterSame
		j.RouterSame = &same
	}
	if d := f.Downstream; d != nil {
		j.Downstream = &jsonDownstream{Op: d.Op, From: d.From, Tokens: d.Tokens, Differ: d.Differ}
		if d.FirstPos >= 0 {
			fp := d.FirstPos
			j.Downstream.FirstPos = &fp
		}
	}
	return j
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
	RoutingFlip *jsonFlip `json:"routing_flip"`
	Located     bool      `json:"located"` // version 4: a fingerprint divergence (a, b, ulp, class say nothing)
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
	Located      bool         `json:"located"` // version 4: compared through fingerprints (elements are rows)
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
		Ops: []jsonOp{}, Missing: nonNil(r.Missing), Located: r.Located, LocatedOnly: nonNil(r.LocatedOnly), RecordFull: orNull(r.RecordFull())}
	out.Logprobs, out.Sequences = jsonRL(r.RL)
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
			RMSRel: f.RMSRel, Class: f.Class.String(), Cause: string(f.Cause), CauseDetail: f.Detail, Located: f.Located}
		if f.ULPDType != "" {
			out.FirstDivergence.ULP = &f.ULP
		}
		out.FirstDivergence.RoutingFlip = jflip(f.Routing)
	}
	out.Routing = []jsonRouting{}
	if rt := r.Routing; rt != nil {
		for i := range rt.Layers {
			l := &rt.Layers[i]
			jr := jsonRouting{Layer: l.Layer, Op: l.Op, K: l.K, Tokens: l.Tokens, Flipped: l.Flipped, OrderOnly: l.OrderOnly,
				WeightsOnly: l.WeightsOnly, Detail: l.Detail, FirstFlip: jflip(l.First), FirstDiff: jflip(l.FirstAny)}
			if l.RouterDiffer >= 0 {
				n := l.RouterDiffer
				jr.RouterDiffer = &n
			}
			out.Routing = append(out.Routing, jr)
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
			MissingRowsA: o.MissingRowsA, MissingRowsB: o.MissingRowsB, Cause: string(o.Cause), CauseDetail: o.CauseDetail,
			Located: o.Located}
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

// jnum is a float that is null in JSON when it is not finite (a pointer: encoding/json's fast path, where a
// MarshalJSON method would cost a call and a validation per figure, seconds for 100k sequences).
type jnum = *float64

// jf is x as a jnum.
func jf(x float64) jnum {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}

type jsonTable struct {
	Path      string `json:"path"`
	Format    string `json:"format"`
	Layout    string `json:"layout"`
	Side      string `json:"side"`
	Tokens    int    `json:"tokens"`
	Sequences int    `json:"sequences"`
	Logits    bool   `json:"logits"`
}

type jsonDist struct {
	Tokens           int64 `json:"tokens"`
	KL               jnum  `json:"kl"`
	TV               jnum  `json:"tv"`
	Top1             jnum  `json:"top1_agreement"`
	TopK             int   `json:"topk"`
	TopKOverlap      jnum  `json:"topk_overlap"`
	GreedyDifferFrac jnum  `json:"greedy_differ_frac"`
}

// jsonStats are the metrics both the overall figures and each sequence carry (docs/rl-metrics.md).
type jsonStats struct {
	Tokens        int64     `json:"tokens"`
	EqualTokens   int64     `json:"equal_tokens"`
	EqualFrac     jnum      `json:"equal_frac"`
	NonFinite     int64     `json:"non_finite"`
	TokenDiffers  int64     `json:"token_differs"`
	SampleDiffers int64     `json:"sample_differs"`
	OnlyA         int64     `json:"only_a"`
	OnlyB         int64     `json:"only_b"`
	MaxULP        uint64    `json:"max_ulp"`
	MaxAbsDiff    jnum      `json:"max_abs_diff"`
	MeanAbsDiff   jnum      `json:"mean_abs_diff"`
	MeanDiff      jnum      `json:"mean_diff"`
	K1            jnum      `json:"kl_k1"`
	K2            jnum      `json:"kl_k2"`
	K3            jnum      `json:"kl_k3"`
	ISMin         jnum      `json:"is_ratio_min"`
	ISMax         jnum      `json:"is_ratio_max"`
	ISMean        jnum      `json:"is_ratio_mean"`
	ISOutsideFrac jnum      `json:"is_outside_frac"`
	Chi2          jnum      `json:"chi2"`
	MultProbErr   jnum      `json:"token_mult_prob_error"`
	ProbDiff      jnum      `json:"rollout_train_prob_diff"`
	PPLA          jnum      `json:"ppl_a"`
	PPLB          jnum      `json:"ppl_b"`
	PPLRatio      jnum      `json:"ppl_ratio"`
	LogRatioSum   jnum      `json:"log_ratio_sum"`
	Dist          *jsonDist `json:"full_vocab"`
}

type jsonHist struct {
	Zero     int64   `json:"zero"`
	LoDecade int     `json:"lo_decade"`
	Neg      []int64 `json:"neg"`
	Pos      []int64 `json:"pos"`
}

type jsonLogprobs struct {
	A               jsonTable `json:"a"`
	B               jsonTable `json:"b"`
	Positions       string    `json:"positions"`
	Step            int64     `json:"step"`
	ISLow           float64   `json:"is_low"`
	ISHigh          float64   `json:"is_high"`
	Sequences       int       `json:"sequences"`
	SequencesDiffer int64     `json:"sequences_differ"`
	SeqsOnlyA       []int64   `json:"sequences_only_a"`
	SeqsOnlyB       []int64   `json:"sequences_only_b"`
	jsonStats
	Hist jsonHist `json:"delta_hist"`
}

type jsonFirstOp struct {
	Op    string `json:"op"`
	Role  string `json:"role"`
	Index int32  `json:"index"`
	Step  int64  `json:"step"`
	Pos   int64  `json:"pos"`
}

type jsonSeq struct {
	Seq int64 `json:"seq"`
	jsonStats
	PosLo        int64        `json:"pos_lo"`
	PosHi        int64        `json:"pos_hi"`
	FirstDiffPos *int64       `json:"first_diff_pos"`
	MaxAbsPos    *int64       `json:"max_abs_pos"`
	SeqISRatio   jnum         `json:"seq_is_ratio"`
	FirstOp      *jsonFirstOp `json:"first_divergent_op"`
}

func jstats(s *logprobs.Stats, topk int) jsonStats {
	j := jsonStats{Tokens: s.Tokens, EqualTokens: s.Equal, EqualFrac: jf(s.EqualFrac()), NonFinite: s.NonFinite,
		TokenDiffers: s.TokenDiffers, SampleDiffers: s.SampleDiffers, OnlyA: s.OnlyA, OnlyB: s.OnlyB, MaxULP: s.MaxULP, MaxAbsDiff: jf(s.MaxAbs),
		MeanAbsDiff: jf(s.MeanAbs), MeanDiff: jf(s.MeanDiff), K1: jf(s.K1), K2: jf(s.K2), K3: jf(s.K3),
		ISMin: jf(s.ISMin), ISMax: jf(s.ISMax), ISMean: jf(s.ISMean), ISOutsideFrac: jf(s.ISOutsideFrac()),
		Chi2: jf(s.Chi2), MultProbErr: jf(s.MultProbErr), ProbDiff: jf(s.ProbDiff), PPLA: jf(s.PPLA),
		PPLB: jf(s.PPLB), PPLRatio: jf(s.PPLRatio), LogRatioSum: jf(s.LogRatioSum)}
	if s.Dist > 0 {
		j.Dist = &jsonDist{Tokens: s.Dist, KL: jf(s.KL), TV: jf(s.TV), Top1: jf(s.Top1()), TopK: topk,
			TopKOverlap: jf(s.TopKOverlap), GreedyDifferFrac: jf(s.GreedyDifferFrac())}
	}
	return j
}

func jtable(t *logprobs.Table) jsonTable {
	return jsonTable{Path: t.Path, Format: t.Format, Layout: t.Layout, Side: t.Side, Tokens: t.Tokens(),
		Sequences: len(t.Seqs), Logits: t.Vocab > 0}
}

// jsonRL is the report's logprobs and sequences (version 3).
func jsonRL(r *RLReport) (*jsonLogprobs, []jsonSeq) {
	if r == nil {
		return nil, []jsonSeq{}
	}
	th := r.Thresholds
	lp := &jsonLogprobs{A: jtable(r.A), B: jtable(r.B), Positions: r.Positions.String(), Step: r.Step, ISLow: th.ISLow,
		ISHigh: th.ISHigh, Sequences: len(r.Seqs) + len(r.OnlyA) + len(r.OnlyB), SequencesDiffer: r.SeqsDiffer,
		SeqsOnlyA: nonNil(r.OnlyA), SeqsOnlyB: nonNil(r.OnlyB), jsonStats: jstats(&r.Overall, th.TopK),
		Hist: jsonHist{Zero: r.Hist.Zero, LoDecade: logprobs.DeltaHistLo, Neg: r.Hist.Neg[:], Pos: r.Hist.Pos[:]}}
	seqs := make([]jsonSeq, len(r.Seqs))
	for i := range r.Seqs {
		q := &r.Seqs[i]
		js := jsonSeq{Seq: q.Seq, jsonStats: jstats(&q.Stats, th.TopK), PosLo: q.PosLo, PosHi: q.PosHi, SeqISRatio: jf(q.SeqIS)}
		if q.FirstDiff >= 0 {
			js.FirstDiffPos = &q.FirstDiff
		}
		if q.MaxAbsPos >= 0 {
			js.MaxAbsPos = &q.MaxAbsPos
		}
		if d := r.First[q.Seq]; d != nil {
			js.FirstOp = &jsonFirstOp{Op: d.Op, Role: d.Role, Index: d.Index, Step: d.Step, Pos: d.Pos}
		}
		seqs[i] = js
	}
	return lp, seqs
}
