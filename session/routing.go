package session

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"bitalign/capture"
	"bitalign/engine"
)

// RouteMark is how one token's routing compares in one layer.
type RouteMark uint8

const (
	RouteAbsent  RouteMark = iota // not compared (a side lacks the token)
	RouteSame                     // same experts, same order, same weights (the router logits may differ)
	RouteWeights                  // same experts in the same order, combine weights differ
	RouteOrder                    // same set of experts, in another order
	RouteSet                      // the expert sets differ: a routing flip
)

func (k RouteMark) String() string {
	switch k {
	case RouteSame:
		return "same"
	case RouteWeights:
		return "weights"
	case RouteOrder:
		return "order"
	case RouteSet:
		return "set"
	}
	return "absent"
}

// Routing compares the two sides' expert selection in every MoE layer (one whose mlp.experts both captured).
type Routing struct {
	Layers []RoutingLayer // in layer order
	// Tokens are every token (step, seq, pos) some layer compared, in order; RoutingLayer.Marks index them.
	Tokens []TokenID
}

// TokenID is one token of one forward pass.
type TokenID struct{ Step, Seq, Pos int64 }

func (t TokenID) cmp(o TokenID) int {
	return cmp.Or(cmp.Compare(t.Step, o.Step), cmp.Compare(t.Seq, o.Seq), cmp.Compare(t.Pos, o.Pos))
}

// RoutingLayer is one MoE layer's routing comparison.
type RoutingLayer struct {
	Layer int
	Op    string // layers.L.mlp.experts
	K     int    // experts per token
	// Tokens compared (both sides captured the token's experts); of them, Flipped select another set of
	// experts, OrderOnly the same set in another order, WeightsOnly the same experts in the same order with other
	// combine weights. RouterDiffer counts the tokens whose router logits differ in any bit (-1: not compared).
	Tokens, Flipped, OrderOnly, WeightsOnly, RouterDiffer int64
	First                                                 *Flip       // the earliest token whose expert set differs, nil when none
	FirstAny                                              *Flip       // the earliest token whose routing differs in any way (set, order or weights)
	Detail                                                string      // why the layer could not be compared ("" when it was)
	Marks                                                 []RouteMark // per Routing.Tokens
}

// Flip is one token whose routing differs between the sides.
type Flip struct {
	Layer     int
	Op        string // layers.L.mlp.experts
	At        TokenID
	Kind      RouteMark
	A, B      []int64   // the selected experts, in each side's order
	WA, WB    []float64 // the combine weights (nil when not captured)
	HasRouter bool      // the router logits were captured on both sides: the margins below are known
	// MarginA is A's router logit of its k-th expert minus that of its (k+1)-th (in A's canonical order:
	// score descending, id ascending), exact; MarginAULP the same gap in the router dtype's ULPs. Likewise B.
	MarginA, MarginB       float64
	MarginAULP, MarginBULP uint64
	// MarginDType is the dtype the margins' ULPs are counted in: the router op's (OpStat.ULPDType), so "bf16"
	// for float32 logits whose every value is a bf16 value (a bf16 model's router, widened).
	MarginDType string
	RouterSame  bool   // both sides' router logits of the token are bitwise identical
	Cause       Cause  // local: the router's inputs are identical at the token; propagated: they differ
	Detail      string // which inputs decided the cause
	// Downstream is the flip's effect on the outputs: the logprobs of the flip's sequence from its position on.
	Downstream *Downstream
}

// Downstream counts the tokens of one sequence, from a position on, whose output differs.
type Downstream struct {
	Op       string // "logprobs"
	From     int64  // the first position counted
	Tokens   int64  // positions ≥ From both sides captured
	Differ   int64  // of them, those whose output differs
	FirstPos int64  // the first differing position, −1 when none
}

// What names the kind of difference: "expert set differs", "expert order differs", "expert weights differ".
func (f *Flip) What() string {
	switch f.Kind {
	case RouteSet:
		return "expert set differs"
	case RouteOrder:
		return "expert order differs"
	}
	return "expert weights differ"
}

// Margin is the router margin in words: "margin 1 ULP", "margin 1 ULP vs 3 ULP", "" when not captured.
func (f *Flip) Margin() string {
	if !f.HasRouter {
		return ""
	}
	u := f.ulpUnit()
	if f.MarginAULP == f.MarginBULP {
		return "margin " + ulpString(f.MarginAULP) + " " + u
	}
	return "margin " + ulpString(f.MarginAULP) + " " + u + " vs " + ulpString(f.MarginBULP) + " " + u
}

// ulpUnit is "ULP", or "bf16 ULP" when the margins are counted in bf16.
func (f *Flip) ulpUnit() string {
	if f.MarginDType == capture.BF16.String() {
		return "bf16 ULP"
	}
	return "ULP"
}

// String is the flip in one line, the same in every report and the TUI:
// "layers.7.mlp.experts: expert set differs at seq 3 pos 41: [2, 5] vs [2, 6], margin 1 ULP".
func (f *Flip) String() string {
	s := fmt.Sprintf("%s: %s at %s: %s vs %s", f.Op, f.What(), f.At.where(), ids(f.A), ids(f.B))
	if f.Kind == RouteWeights && f.WA != nil && f.WB != nil {
		s += fmt.Sprintf(", weights %s vs %s", weights(f.WA), weights(f.WB))
	}
	if m := f.Margin(); m != "" {
		s += ", " + m
	}
	return s
}

// where is "seq 3 pos 41", with the step first when it is not 0.
func (t TokenID) where() string {
	s := fmt.Sprintf("seq %d pos %d", t.Seq, t.Pos)
	if t.Step != 0 {
		s = fmt.Sprintf("step %d ", t.Step) + s
	}
	return s
}

func ids(x []int64) string {
	s := make([]string, len(x))
	for i, v := range x {
		s[i] = strconv.FormatInt(v, 10)
	}
	return "[" + strings.Join(s, ", ") + "]"
}

func weights(x []float64) string {
	s := make([]string, len(x))
	for i, v := range x {
		s[i] = strconv.FormatFloat(v, 'g', -1, 32)
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// CauseText is the flip's cause in words: "local (router inputs identical: layers.7.mlp_norm)".
func (f *Flip) CauseText() string {
	if f.Cause == CauseNone {
		return ""
	}
	return string(f.Cause) + " (" + f.Detail + ")"
}

// DownstreamText is the flip's downstream effect in words, "" when the logprobs were not compared.
func (f *Flip) DownstreamText() string {
	d := f.Downstream
	if d == nil || d.Tokens == 0 {
		return ""
	}
	s := fmt.Sprintf("%s of the %s from pos %d on differ", strconv.FormatInt(d.Differ, 10), plural(int(d.Tokens), d.Op+" position"), d.From)
	if d.FirstPos >= 0 {
		s += fmt.Sprintf(" (first at pos %d)", d.FirstPos)
	}
	return s
}

// FirstFlip is the earliest expert-set flip over every layer (by step, seq, pos, then layer), nil when none.
func (r *Routing) FirstFlip() *Flip {
	if r == nil {
		return nil
	}
	var best *Flip
	for i := range r.Layers {
		f := r.Layers[i].First
		if f != nil && (best == nil || cmp.Or(f.At.cmp(best.At), cmp.Compare(f.Layer, best.Layer)) < 0) {
			best = f
		}
	}
	return best
}

// Flipped is Σ Flipped over layers, and Tokens Σ Tokens.
func (r *Routing) Flipped() (flipped, tokens int64) {
	if r == nil {
		return 0, 0
	}
	for i := range r.Layers {
		flipped += r.Layers[i].Flipped
		tokens += r.Layers[i].Tokens
	}
	return flipped, tokens
}

// Summary is the routing comparison in one line: "3 of 512 token-layers flipped in 2 of 4 MoE layers".
func (r *Routing) Summary() string {
	if r == nil || len(r.Layers) == 0 {
		return ""
	}
	flipped, tokens := r.Flipped()
	n := 0
	for i := range r.Layers {
		if r.Layers[i].Flipped > 0 {
			n++
		}
	}
	return fmt.Sprintf("%d of %d token-layers flipped (expert set differs) in %d of %s", flipped, tokens, n,
		plural(len(r.Layers), "MoE layer"))
}

// rowTable is one side's rows of one op: per (step, seq), non-overlapping spans of positions sorted by
// position (spansBySeq: where two tensors hold a row the first wins, as in Diff).
type rowTable struct {
	f      *format
	rowLen int64
	spans  map[seqKey][]span
}

// row is the bytes of position pos in spans (sorted, non-overlapping), nil when none holds it; *i is a cursor
// that only moves forward, so a walk over increasing positions costs one step per span.
func (t *rowTable) row(spans []span, i *int, pos int64) []byte {
	for *i < len(spans) && spans[*i].hi <= pos {
		*i++
	}
	if *i >= len(spans) || spans[*i].lo > pos {
		return nil
	}
	u := spans[*i].u
	rb := u.rowLen * int64(t.f.size)
	r := pos - u.pos
	return u.data[r*rb : (r+1)*rb]
}

// sideRows reassembles side's (op, out) into rows; nil when the side did not capture op, and a problem (the
// layer's Detail) when its tensors do not agree on a row's dtype and length.
func sideRows(s *sideIndex, op string) (*rowTable, string, error) {
	us, _, err := buildUnits(s.c, s.byOp[opKey{op, "out"}])
	if err != nil || len(us) == 0 {
		return nil, "", err
	}
	f, err := formatOf(us[0].dt)
	if err != nil {
		return nil, "", err
	}
	for _, u := range us {
		if u.dt != us[0].dt || u.rowLen != us[0].rowLen {
			return nil, fmt.Sprintf("%s: %s holds rows of %d %s and %d %s elements", s.c.Path(), op, us[0].rowLen, us[0].dt, u.rowLen, u.dt), nil
		}
	}
	return &rowTable{f: f, rowLen: us[0].rowLen, spans: spansBySeq(us)}, "", nil
}

// ints decodes an integer row.
func (t *rowTable) ints(row []byte) []int64 { return t.intsInto(nil, row) }

// intsInto decodes an integer row into buf's storage.
func (t *rowTable) intsInto(buf []int64, row []byte) []int64 {
	out := slices.Grow(buf[:0], int(t.rowLen))[:t.rowLen]
	if t.f.dt == capture.I32 { // the contract's dtype: decoded directly
		for i := range out {
			out[i] = int64(int32(binary.LittleEndian.Uint32(row[4*i:])))
		}
		return out
	}
	for i := range out {
		out[i] = int64(t.f.value(t.f.load(row, i)))
	}
	return out
}

// floats decodes a float row (exactly, to float64).
func (t *rowTable) floats(row []byte) []float64 {
	out := make([]float64, t.rowLen)
	for i := range out {
		out[i] = t.f.value(t.f.load(row, i))
	}
	return out
}

// ExpertScore is one expert's router logit.
type ExpertScore struct {
	ID    int
	Logit float64
	Bits  uint64
}

// RankExperts orders a token's router logits by the canonical total order: score descending, expert id
// ascending (a NaN scores below every number), so ties never depend on the batch.
func RankExperts(logits []float64, bits []uint64) []ExpertScore {
	out := make([]ExpertScore, len(logits))
	for i, v := range logits {
		out[i] = ExpertScore{ID: i, Logit: v}
		if bits != nil {
			out[i].Bits = bits[i]
		}
	}
	slices.SortStableFunc(out, func(x, y ExpertScore) int {
		xn, yn := math.IsNaN(x.Logit), math.IsNaN(y.Logit)
		switch {
		case xn && yn:
		case xn:
			return 1
		case yn:
			return -1
		case x.Logit != y.Logit:
			return -cmp.Compare(x.Logit, y.Logit)
		}
		return cmp.Compare(x.ID, y.ID)
	})
	return out
}

// margin is the gap between the k-th and the (k+1)-th expert of a router row, as a value and in ULPs of the
// larger of the two logits in the router dtype (bf16 when every value is a bf16 value): how many last-bit steps
// of that logit separate them, which stays meaningful when the two straddle zero (the ordered-integer distance
// would count every float in between); ok = false when the row has no (k+1)-th expert. Non-finite logits fall
// back to the ordered-integer distance.
func (t *rowTable) margin(row []byte, k int, bf16 bool) (gap float64, ulp uint64, ok bool) {
	if k <= 0 || int64(k) >= t.rowLen {
		return 0, 0, false
	}
	vals := t.floats(row)
	bits := make([]uint64, len(vals))
	for i := range bits {
		bits[i] = t.f.load(row, i)
	}
	r := RankExperts(vals, bits)
	a, b := r[k-1].Logit, r[k].Logit
	gap = a - b
	if math.IsNaN(gap) || math.IsInf(gap, 0) {
		_, d := t.f.compare(r[k-1].Bits, r[k].Bits)
		if bf16 { // every value is a bf16 value: its top 16 bits are the bf16 bits
			_, d = formats[capture.BF16].compare(r[k-1].Bits>>16, r[k].Bits>>16)
		}
		return gap, d, true
	}
	mant, minExp := 24, -149 // float32: 24 significant bits, smallest subnormal 2^-149
	switch {
	case bf16 || t.f.dt == capture.BF16:
		mant, minExp = 8, -133
	case t.f.dt == capture.F16:
		mant, minExp = 11, -24
	}
	_, e := math.Frexp(max(math.Abs(a), math.Abs(b))) // larger = f·2^e, f in [0.5, 1)
	step := math.Ldexp(1, max(e-mant, minExp))
	return gap, uint64(math.Floor(gap / step)), true
}

// marginDType is the dtype a layer's router margins are counted in: the router op's ULP dtype in the report
// (bf16 for float32 logits that are all bf16 values), else the router's dtype.
func marginDType(rep *Report, layer int, router *rowTable) string {
	if j := rep.FindOp(engine.LayerOp(layer, capture.LayerRouter), "out"); j >= 0 && rep.Ops[j].ULPDType != "" {
		return rep.Ops[j].ULPDType
	}
	return router.f.dt.String()
}

// setMargins sets the flip's router margins from both sides' router rows (t's layout) in dtype mdt's ULPs.
func (f *Flip) setMargins(t *rowTable, rowA, rowB []byte, k int, mdt string) {
	bf16 := mdt == capture.BF16.String() && t.f.dt == capture.F32
	ga, ua, okA := t.margin(rowA, k, bf16)
	gb, ub, okB := t.margin(rowB, k, bf16)
	if okA && okB {
		f.HasRouter, f.MarginA, f.MarginAULP, f.MarginB, f.MarginBULP, f.MarginDType = true, ga, ua, gb, ub, mdt
	}
}

// routingLayers lists the layers whose mlp.experts either side captured (and WithOps kept), in layer order.
func routingLayers(ia, ib *sideIndex, filtered map[string]bool) []int {
	seen := map[int]bool{}
	var out []int
	for _, s := range []*sideIndex{ia, ib} {
		for k := range s.byOp {
			l, suf, ok := engine.SplitLayerOp(k.op)
			if ok && suf == capture.LayerExperts && k.role == "out" && !filtered[k.op] && !seen[l] {
				seen[l] = true
				out = append(out, l)
			}
		}
	}
	slices.Sort(out)
	return out
}

// compareRouting builds the report's routing comparison from both sides' experts, weights and router
// logits; rows are Diff's compared and mismatched positions (for local/propagated and downstream), producers the
// session's producer graph.
func compareRouting(rep *Report, ia, ib *sideIndex, rows map[opKey]*rowSets, producers func(string) []string, filtered map[string]bool) (*Routing, error) {
	layers := routingLayers(ia, ib, filtered)
	if len(layers) == 0 {
		return nil, nil
	}
	r := &Routing{}
	tokenSet := map[seqKey]*bitset{}
	type layerRows struct {
		ea, eb, wa, wb, ra, rb *rowTable
		problem                string
	}
	all := make([]layerRows, len(layers))
	for i, l := range layers {
		lr := &all[i]
		for _, x := range []struct {
			t   **rowTable
			s   *sideIndex
			suf string
		}{{&lr.ea, ia, capture.LayerExperts}, {&lr.eb, ib, capture.LayerExperts}, {&lr.wa, ia, capture.LayerExpertWeights}, {&lr.wb, ib, capture.LayerExpertWeights},
			{&lr.ra, ia, capture.LayerRouter}, {&lr.rb, ib, capture.LayerRouter}} {
			op := engine.LayerOp(l, x.suf)
			if filtered[op] {
				continue
			}
			t, problem, err := sideRows(x.s, op)
			if err != nil {
				return nil, err
			}
			*x.t = t
			if problem != "" && lr.problem == "" {
				lr.problem = problem
			}
		}
		if lr.problem != "" { // a layer whose tensors disagree is reported, not compared
			lr.ea, lr.eb = nil, nil
		}
		if lr.ea != nil && lr.eb != nil { // the tokens both sides hold
			for k, as := range lr.ea.spans {
				bs := lr.eb.spans[k]
				for i, j := 0, 0; i < len(as) && j < len(bs); {
					lo, hi := max(as[i].lo, bs[j].lo), min(as[i].hi, bs[j].hi)
					if lo < hi {
						if tokenSet[k] == nil {
							tokenSet[k] = &bitset{}
						}
						tokenSet[k].setRange(lo, hi)
					}
					if as[i].hi < bs[j].hi {
						i++
					} else {
						j++
					}
				}
			}
		}
	}
	var seqs []seqKey
	for k := range tokenSet {
		seqs = append(seqs, k)
	}
	slices.SortFunc(seqs, func(x, y seqKey) int { return cmp.Or(cmp.Compare(x.step, y.step), cmp.Compare(x.seq, y.seq)) })
	for _, k := range seqs {
		b := tokenSet[k]
		for p := int64(0); p < int64(len(b.w))*64; p++ {
			if b.has(p) {
				r.Tokens = append(r.Tokens, TokenID{k.step, k.seq, p})
			}
		}
	}
	for i, l := range layers {
		mdt := ""
		if all[i].ra != nil {
			mdt = marginDType(rep, l, all[i].ra)
		}
		lay, err := compareLayer(l, all[i].ea, all[i].eb, all[i].wa, all[i].wb, all[i].ra, all[i].rb, r.Tokens, mdt)
		if err != nil {
			return nil, err
		}
		if all[i].problem != "" {
			lay.Detail = all[i].problem
		}
		for _, f := range []*Flip{lay.First, lay.FirstAny} {
			if f != nil && f.Downstream == nil {
				flipCause(f, rows, producers, filtered)
				f.Downstream = downstream(rows, f.At)
			}
		}
		r.Layers = append(r.Layers, lay)
	}
	return r, nil
}

// compareLayer compares one layer's routing over tokens (the union of every layer's compared tokens).
func compareLayer(l int, ea, eb, wa, wb, ra, rb *rowTable, tokens []TokenID, marginDType string) (RoutingLayer, error) {
	lay := RoutingLayer{Layer: l, Op: engine.LayerOp(l, capture.LayerExperts), RouterDiffer: -1, Marks: make([]RouteMark, len(tokens))}
	switch {
	case ea == nil || eb == nil:
		lay.Detail = map[bool]string{true: "A", false: "B"}[ea == nil] + " did not capture " + lay.Op
		return lay, nil
	case ea.f.kind == kindFloat || eb.f.kind == kindFloat:
		lay.Detail = "expert ids are not integers (" + ea.f.dt.String() + ", " + eb.f.dt.String() + ")"
		return lay, nil
	case ea.rowLen != eb.rowLen:
		lay.Detail = fmt.Sprintf("A selects %d experts per token, B %d", ea.rowLen, eb.rowLen)
		return lay, nil
	}
	lay.K = int(ea.rowLen)
	useW := wa != nil && wb != nil && wa.f.kind == kindFloat && wa.f.dt == wb.f.dt && wa.rowLen == ea.rowLen && wb.rowLen == eb.rowLen
	useR := ra != nil && rb != nil && ra.f.kind == kindFloat && ra.f.dt == rb.f.dt && ra.rowLen == rb.rowLen
	if useR {
		lay.RouterDiffer = 0
	}
	// one cursor per table over the spans of the token's sequence (tokens come sorted: each walk moves forward)
	tables := [6]*rowTable{ea, eb, wa, wb, ra, rb}
	var spans [6][]span
	var at [6]int
	cur := seqKey{-1, -1}
	var bufA, bufB []int64
	for ti, tok := range tokens {
		if k := (seqKey{tok.Step, tok.Seq}); k != cur {
			cur = k
			for i, t := range tables {
				spans[i], at[i] = nil, 0
				if t != nil {
					spans[i] = t.spans[k]
				}
			}
		}
		row := func(i int) []byte {
			if tables[i] == nil {
				return nil
			}
			return tables[i].row(spans[i], &at[i], tok.Pos)
		}
		xa, xb := row(0), row(1)
		if xa == nil || xb == nil {
			continue
		}
		lay.Tokens++
		bufA, bufB = ea.intsInto(bufA, xa), eb.intsInto(bufB, xb)
		a, b := bufA, bufB
		var rowWA, rowWB []byte
		if useW {
			rowWA, rowWB = row(2), row(3)
		}
		mark := classify(a, b, rowWA, rowWB)
		var rowRA, rowRB []byte
		if useR {
			rowRA, rowRB = row(4), row(5)
			if rowRA != nil && rowRB != nil && string(rowRA) != string(rowRB) {
				lay.RouterDiffer++
			}
		}
		lay.Marks[ti] = mark
		switch mark {
		case RouteSet:
			lay.Flipped++
		case RouteOrder:
			lay.OrderOnly++
		case RouteWeights:
			lay.WeightsOnly++
		}
		if mark == RouteSame || lay.First != nil && lay.FirstAny != nil {
			continue
		}
		f := &Flip{Layer: l, Op: lay.Op, At: tok, Kind: mark, A: slices.Clone(a), B: slices.Clone(b)}
		if rowWA != nil && rowWB != nil {
			f.WA, f.WB = wa.floats(rowWA), wb.floats(rowWB)
		}
		if rowRA != nil && rowRB != nil {
			f.setMargins(ra, rowRA, rowRB, lay.K, marginDType)
			f.RouterSame = string(rowRA) == string(rowRB)
		}
		if lay.FirstAny == nil {
			lay.FirstAny = f
		}
		if mark == RouteSet && lay.First == nil {
			lay.First = f
		}
	}
	return lay, nil
}

// classify compares one token's routing: the experts each side selected (in its order) and their combine
// weights' bytes (nil when not captured).
func classify(a, b []int64, wa, wb []byte) RouteMark {
	switch {
	case !slices.Equal(a, b):
		sa, sb := slices.Clone(a), slices.Clone(b)
		slices.Sort(sa)
		slices.Sort(sb)
		if slices.Equal(sa, sb) {
			return RouteOrder
		}
		return RouteSet
	case wa != nil && wb != nil && string(wa) != string(wb):
		return RouteWeights
	}
	return RouteSame
}

// flipCause decides whether a flip is local (the router's inputs identical at the token, through the
// session's producer graph) or propagated (they differ).
func flipCause(f *Flip, rows map[opKey]*rowSets, producers func(string) []string, filtered map[string]bool) {
	router := engine.LayerOp(f.Layer, capture.LayerRouter)
	// the router's own captured inputs (record_inputs) decide first, as for any op; else its producers
	var srcs []opKey
	for k := range rows {
		if k.op == router && roleRank(k.role) == 1 {
			srcs = append(srcs, k)
		}
	}
	slices.SortFunc(srcs, func(x, y opKey) int { return cmp.Compare(x.role, y.role) })
	if len(srcs) == 0 && producers != nil {
		for _, p := range producers(router) {
			srcs = append(srcs, opKey{p, "out"})
		}
	}
	f.Cause = CauseUnknown
	if len(srcs) == 0 {
		f.Detail = "the router's inputs are not known (neither captured nor in a producer graph)"
		return
	}
	name := func(s opKey) string {
		if s.role != "out" {
			return s.op + "[" + s.role + "]"
		}
		return s.op
	}
	k := seqKey{f.At.Step, f.At.Seq}
	var names, differ, unknown []string
	for _, s := range srcs {
		names = append(names, name(s))
		rs := rows[s]
		switch {
		case filtered[s.op] || rs == nil || rs.compared[k] == nil || !rs.compared[k].has(f.At.Pos):
			unknown = append(unknown, name(s))
		case rs.mismatched[k] != nil && rs.mismatched[k].has(f.At.Pos):
			differ = append(differ, name(s))
		}
	}
	switch {
	case len(differ) > 0:
		f.Cause, f.Detail = CausePropagated, "router inputs differ: "+strings.Join(differ, ", ")
	case len(unknown) > 0:
		f.Detail = "router inputs not captured: " + strings.Join(unknown, ", ")
	default:
		f.Cause, f.Detail = CauseLocal, "router inputs identical: "+strings.Join(names, ", ")
		switch {
		case f.HasRouter && f.RouterSame:
			f.Detail += "; router logits identical too: the top-k selection differs"
		case f.HasRouter:
			f.Detail += "; the router's logits differ"
		}
	}
}

// downstream counts the logprobs of the flip's sequence from its position on that differ.
func downstream(rows map[opKey]*rowSets, at TokenID) *Downstream {
	d := &Downstream{Op: engine.OpLogprobs, From: at.Pos, FirstPos: -1}
	rs := rows[opKey{engine.OpLogprobs, "out"}]
	if rs == nil {
		return d
	}
	k := seqKey{at.Step, at.Seq}
	c, m := rs.compared[k], rs.mismatched[k]
	if c == nil {
		return d
	}
	for p := at.Pos; p < int64(len(c.w))*64; p++ {
		if !c.has(p) {
			continue
		}
		d.Tokens++
		if m != nil && m.has(p) {
			d.Differ++
			if d.FirstPos < 0 {
				d.FirstPos = p
			}
		}
	}
	return d
}

// nameFlip attaches the routing difference to the report's first divergence when it is one: the op is a MoE
// layer's router, experts or expert weights, and the layer routes the divergence's token differently.
func nameFlip(rep *Report) {
	f := rep.First
	if f == nil || rep.Routing == nil {
		return
	}
	l, suf, ok := engine.SplitLayerOp(f.Op)
	if !ok || suf != capture.LayerRouter && suf != capture.LayerExperts && suf != capture.LayerExpertWeights {
		return
	}
	at := TokenID{f.At.Step, f.At.Seq, f.At.Pos}
	for i := range rep.Routing.Layers {
		lay := &rep.Routing.Layers[i]
		if lay.Layer != l {
			continue
		}
		for _, fl := range []*Flip{lay.First, lay.FirstAny} {
			if fl != nil && fl.At == at {
				f.Routing = fl
				return
			}
		}
	}
}

// routingHeader heads the routing-agreement table of the text, Markdown and HTML reports.
var routingHeader = []string{"layer", "tokens", "flipped", "order only", "weights only", "router differs", "first flip",
	"margin A", "margin B", "cause"}

// routingRows are the routing-agreement table's rows, one per MoE layer.
func routingRows(r *Routing) [][]string {
	var out [][]string
	for i := range r.Layers {
		l := &r.Layers[i]
		router := "—"
		if l.RouterDiffer >= 0 {
			router = strconv.FormatInt(l.RouterDiffer, 10)
		}
		row := []string{strconv.Itoa(l.Layer), strconv.FormatInt(l.Tokens, 10),
			strconv.FormatInt(l.Flipped, 10) + pctSuffix(l.Flipped, l.Tokens),
			strconv.FormatInt(l.OrderOnly, 10), strconv.FormatInt(l.WeightsOnly, 10), router, "", "", "", ""}
		if l.Detail != "" {
			row[6] = l.Detail
		}
		if f := l.First; f != nil {
			row[6] = fmt.Sprintf("%s: %s vs %s", f.At.where(), ids(f.A), ids(f.B))
			if f.HasRouter {
				row[7] = marginCell(f, f.MarginA, f.MarginAULP)
				row[8] = marginCell(f, f.MarginB, f.MarginBULP)
			}
			row[9] = string(f.Cause)
		}
		out = append(out, row)
	}
	return out
}

func pctSuffix(n, d int64) string {
	if p := pct(n, d); p != "" {
		return " (" + p + ")"
	}
	return ""
}

// marginCell is a margin in a table cell: "1 ULP (5.96e-08)", "1 bf16 ULP (0.0078)".
func marginCell(f *Flip, v float64, ulp uint64) string {
	return ulpString(ulp) + " " + f.ulpUnit() + " (" + strconv.FormatFloat(v, 'g', 3, 64) + ")"
}

// flipLines describe the first flip over all layers: where, cause, downstream effect.
func flipLines(r *Routing) []string {
	f := r.FirstFlip()
	if f == nil {
		return []string{"no expert set differs in any layer"}
	}
	out := []string{"first flip: " + f.String()}
	if f.HasRouter {
		out = append(out, fmt.Sprintf("router margin (k-th − (k+1)-th logit): A %s, B %s",
			marginCell(f, f.MarginA, f.MarginAULP), marginCell(f, f.MarginB, f.MarginBULP)))
	}
	if c := f.CauseText(); c != "" {
		out = append(out, "cause: "+c)
	}
	if d := f.DownstreamText(); d != "" {
		out = append(out, "downstream: "+d)
	}
	return out
}
