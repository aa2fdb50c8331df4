package session

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"bitalign/capture"
	"bitalign/engine"
	"bitalign/session/view"
)

// A synthetic MoE pair built with the capture Writer: 2 MoE layers, E experts, top-k, 2 sequences of moeT
// tokens, with crafted routing differences (see moeScenario).
const (
	moeE = 8
	moeK = 2
	moeT = 8
	moeH = 4
)

// moeProducers is the producer graph of the MoE ops (engine.Producers' MoE lines, issue #16's contract).
func moeProducers(op string) []string {
	l, s, ok := engine.SplitLayerOp(op)
	if !ok {
		return nil
	}
	switch s {
	case capture.LayerRouter:
		return []string{engine.LayerOp(l, "mlp_norm")}
	case capture.LayerExperts, capture.LayerExpertWeights:
		return []string{engine.LayerOp(l, capture.LayerRouter)}
	}
	return nil
}

// moeSide is one side's tensors of the synthetic MoE pair, per (layer, seq): mutable before writing.
type moeSide struct {
	norm    [2][2][]byte    // bf16 [T, H]
	router  [2][2][]float32 // [T*E]
	experts [2][2][]int32   // [T*k]
	weights [2][2][]float32 // [T*k]
	logp    [2][]float32    // [T]
}

// route sets the token's experts and weights from its router logits by the canonical rule.
func (s *moeSide) route(l, q, p int) {
	row := s.router[l][q][p*moeE : (p+1)*moeE]
	vals := make([]float64, moeE)
	for i, v := range row {
		vals[i] = float64(v)
	}
	r := RankExperts(vals, nil)
	var sum float64
	for j := 0; j < moeK; j++ {
		sum += math.Exp(r[j].Logit)
	}
	for j := 0; j < moeK; j++ {
		s.experts[l][q][p*moeK+j] = int32(r[j].ID)
		s.weights[l][q][p*moeK+j] = float32(math.Exp(r[j].Logit) / sum)
	}
}

func newMoESide() *moeSide {
	s := &moeSide{}
	for l := 0; l < 2; l++ {
		for q := 0; q < 2; q++ {
			s.norm[l][q] = activation(int64(q), uint64(10+l), 0, moeT, moeH)
			s.router[l][q] = make([]float32, moeT*moeE)
			for i := range s.router[l][q] {
				x := uint64(l*7919+q*131+i) * 0x9e3779b97f4a7c15
				s.router[l][q][i] = float32(int64(x>>40)%2000-1000) / 256 // distinct, exact values
			}
			s.experts[l][q] = make([]int32, moeT*moeK)
			s.weights[l][q] = make([]float32, moeT*moeK)
			for p := 0; p < moeT; p++ {
				s.route(l, q, p)
			}
		}
	}
	for q := 0; q < 2; q++ {
		s.logp[q] = make([]float32, moeT)
		for p := range s.logp[q] {
			s.logp[q][p] = -float32(p+1+q) / 8
		}
	}
	return s
}

func f32Bytes(x []float32) []byte {
	out := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
	}
	return out
}

func i32Bytes(x []int32) []byte {
	out := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(out[4*i:], uint32(v))
	}
	return out
}

func (s *moeSide) tensors() []capture.Tensor {
	var ts []capture.Tensor
	one := func(op string, idx int32, q int, dt capture.DType, w int64, data []byte) {
		ts = append(ts, capture.Tensor{Seq: int64(q), NTok: moeT, Op: op, Index: idx, Role: "out", DType: dt,
			Shape: []int64{moeT, w}, Shard: capture.NoShard, Data: data})
	}
	for q := 0; q < 2; q++ {
		for l := 0; l < 2; l++ {
			base := int32(10 * (l + 1))
			one(engine.LayerOp(l, "mlp_norm"), base, q, capture.BF16, moeH, s.norm[l][q])
			one(engine.LayerOp(l, capture.LayerRouter), base+1, q, capture.F32, moeE, f32Bytes(s.router[l][q]))
			one(engine.LayerOp(l, capture.LayerExperts), base+2, q, capture.I32, moeK, i32Bytes(s.experts[l][q]))
			one(engine.LayerOp(l, capture.LayerExpertWeights), base+3, q, capture.F32, moeK, f32Bytes(s.weights[l][q]))
		}
		ts = append(ts, capture.Tensor{Seq: int64(q), NTok: moeT, Op: engine.OpLogprobs, Index: 40, Role: "out",
			DType: capture.F32, Shape: []int64{moeT}, Shard: capture.NoShard, Data: f32Bytes(s.logp[q])})
	}
	return ts
}

// nudge moves a float32 by n ULPs (positive: away from −Inf).
func nudge(x float32, n int) float32 {
	for ; n > 0; n-- {
		x = math.Nextafter32(x, float32(math.Inf(1)))
	}
	for ; n < 0; n++ {
		x = math.Nextafter32(x, float32(math.Inf(-1)))
	}
	return x
}

// rankOf returns the expert at rank r (0 = highest) of a token's router row.
func (s *moeSide) rankOf(l, q, p, r int) int {
	row := s.router[l][q][p*moeE : (p+1)*moeE]
	vals := make([]float64, moeE)
	for i, v := range row {
		vals[i] = float64(v)
	}
	return RankExperts(vals, nil)[r].ID
}

// moeScenario writes the pair and diffs it. B differs from A at:
//   - layer 0 seq 0 pos 2: A's k-th and (k+1)-th experts are 1 ULP apart; B's logits order them the other
//     way (a flip, its router input identical: local); the logprobs of seq 0 then differ at pos 2, 3 and 5;
//   - layer 0 seq 0 pos 4 (when tie): both sides tie at the k-th place, B picks the higher id (router identical);
//   - layer 0 seq 1 pos 1: B lists the same two experts in the other order;
//   - layer 0 seq 1 pos 3: B's combine weights differ by 1 ULP;
//   - layer 1 seq 1 pos 5: B's mlp_norm differs at the token and its router flips (propagated).
func moeScenario(t *testing.T, tie, onlyTie bool) *Report { return moeSession(t, tie, onlyTie).Report }

// moeSession is moeScenario's pair as a session.
func moeSession(t *testing.T, tie, onlyTie bool) *Session {
	t.Helper()
	a, b := newMoESide(), newMoESide()
	if !onlyTie {
		// the flip: make A's ranks k−1 and k one ULP apart, then swap them on B
		hi, lo := a.rankOf(0, 0, 2, moeK-1), a.rankOf(0, 0, 2, moeK)
		for _, s := range []*moeSide{a, b} {
			row := s.router[0][0][2*moeE:]
			row[hi] = nudge(row[lo], 1)
		}
		b.router[0][0][2*moeE+lo] = nudge(b.router[0][0][2*moeE+hi], 1)
		a.route(0, 0, 2)
		b.route(0, 0, 2)
		for _, p := range []int{2, 3, 5} {
			b.logp[0][p] = nudge(b.logp[0][p], 3)
		}
		// order only
		e := b.experts[0][1][1*moeK:]
		e[0], e[1] = e[1], e[0]
		// weights only
		b.weights[0][1][3*moeK] = nudge(b.weights[0][1][3*moeK], 1)
		// propagated: mlp_norm differs at layer 1 seq 1 pos 5, and the router with it
		flipBit(b.norm[1][1], 5*moeH, 0)
		hi, lo = b.rankOf(1, 1, 5, moeK-1), b.rankOf(1, 1, 5, moeK)
		b.router[1][1][5*moeE+lo] = nudge(b.router[1][1][5*moeE+hi], 1)
		b.route(1, 1, 5)
	}
	if tie {
		hi, lo := a.rankOf(0, 0, 4, moeK-1), a.rankOf(0, 0, 4, moeK)
		for _, s := range []*moeSide{a, b} {
			s.router[0][0][4*moeE+hi] = s.router[0][0][4*moeE+lo]
			s.route(0, 0, 4)
		}
		// B breaks the tie towards the higher id (not the canonical rule): swap in the other expert
		want := max(hi, lo)
		for j := 0; j < moeK; j++ {
			if x := b.experts[0][0][4*moeK+j]; int(x) == min(hi, lo) {
				b.experts[0][0][4*moeK+j] = int32(want)
			}
		}
	}
	dir := t.TempDir()
	ca := writeCapture(t, filepath.Join(dir, "a.arrow"), "trainer", 1, a.tensors())
	cb := writeCapture(t, filepath.Join(dir, "b.arrow"), "sampler", 1, b.tensors())
	rep, err := Diff(context.Background(), ca, cb, WithProducers(moeProducers))
	if err != nil {
		t.Fatal(err)
	}
	return NewSession(ca, cb, rep)
}

func TestRoutingComparison(t *testing.T) {
	rep := moeScenario(t, true, false)
	rt := rep.Routing
	if rt == nil || len(rt.Layers) != 2 {
		t.Fatalf("routing: %+v", rt)
	}
	type counts struct{ tokens, flipped, order, weights, router int64 }
	for i, want := range []counts{{16, 2, 1, 1, 1}, {16, 1, 0, 0, 1}} {
		l := &rt.Layers[i]
		got := counts{l.Tokens, l.Flipped, l.OrderOnly, l.WeightsOnly, l.RouterDiffer}
		if got != want || l.Layer != i || l.K != moeK || l.Detail != "" {
			t.Errorf("layer %d: %+v (detail %q), want %+v", i, got, l.Detail, want)
		}
	}
	f := rt.Layers[0].First
	if f == nil || f.At != (TokenID{0, 0, 2}) || f.Kind != RouteSet {
		t.Fatalf("layer 0 first flip: %+v", f)
	}
	if !f.HasRouter || f.MarginAULP != 1 || f.MarginBULP != 1 || f.MarginA <= 0 || f.MarginB <= 0 || f.RouterSame {
		t.Errorf("margins: %+v", f)
	}
	if f.Cause != CauseLocal || !strings.Contains(f.Detail, "router inputs identical: layers.0.mlp_norm") {
		t.Errorf("cause: %s (%s)", f.Cause, f.Detail)
	}
	if d := f.Downstream; d == nil || *d != (Downstream{Op: "logprobs", From: 2, Tokens: 6, Differ: 3, FirstPos: 2}) {
		t.Errorf("downstream: %+v", f.Downstream)
	}
	if slices.Equal(f.A, f.B) || f.A[0] != f.B[0] {
		t.Errorf("experts: %v vs %v (the top expert agrees, the k-th flips)", f.A, f.B)
	}
	// the first difference of any kind in layer 0 is the flip itself (seq 0 comes before seq 1)
	if rt.Layers[0].FirstAny != f {
		t.Errorf("first difference %+v, want the flip", rt.Layers[0].FirstAny)
	}
	g := rt.Layers[1].First
	if g == nil || g.At != (TokenID{0, 1, 5}) || g.Cause != CausePropagated || !strings.Contains(g.Detail, "layers.1.mlp_norm") {
		t.Errorf("layer 1 flip: %+v", g)
	}
	if g != nil && (g.Downstream == nil || g.Downstream.Tokens != 3 || g.Downstream.Differ != 0) {
		t.Errorf("layer 1 downstream: %+v", g.Downstream)
	}
	if rt.FirstFlip() != f {
		t.Errorf("first flip over layers: %+v", rt.FirstFlip())
	}
	// marks: the tie at seq 0 pos 4, order at seq 1 pos 1, weights at seq 1 pos 3
	mark := func(l int, tok TokenID) RouteMark {
		i := slices.Index(rt.Tokens, tok)
		if i < 0 {
			t.Fatalf("token %+v not compared", tok)
		}
		return rt.Layers[l].Marks[i]
	}
	for _, c := range []struct {
		l    int
		tok  TokenID
		want RouteMark
	}{{0, TokenID{0, 0, 2}, RouteSet}, {0, TokenID{0, 0, 4}, RouteSet}, {0, TokenID{0, 1, 1}, RouteOrder},
		{0, TokenID{0, 1, 3}, RouteWeights}, {0, TokenID{0, 0, 3}, RouteSame}, {1, TokenID{0, 1, 5}, RouteSet}} {
		if got := mark(c.l, c.tok); got != c.want {
			t.Errorf("layer %d %+v: %s, want %s", c.l, c.tok, got, c.want)
		}
	}
	// the first divergence is layer 0's router at the flipped token: named as a routing flip
	fd := rep.First
	if fd == nil || fd.Op != "layers.0.mlp.router" || fd.Routing != f {
		t.Fatalf("first divergence: %+v", fd)
	}
	v := rep.Verdict()
	want := "; routing flip: " + f.String()
	if !strings.HasPrefix(v, "first divergence: layers.0.mlp.router, step 0 seq 0 pos 2") || !strings.HasSuffix(v, want) {
		t.Errorf("verdict %q, want it to end %q", v, want)
	}
	if !strings.HasSuffix(f.String(), ", margin 1 ULP") {
		t.Errorf("flip %q", f.String())
	}
}

// TestRoutingTie: the sides' router logits are identical and tie at the k-th place; B breaks the tie
// the other way. The experts op is the first divergence, named as a routing flip with margin 0.
func TestRoutingTie(t *testing.T) {
	rep := moeScenario(t, true, true)
	f := rep.Routing.Layers[0].First
	if f == nil || f.At != (TokenID{0, 0, 4}) || f.MarginAULP != 0 || f.MarginBULP != 0 || !f.RouterSame {
		t.Fatalf("tie: %+v", f)
	}
	if f.Cause != CauseLocal || !strings.Contains(f.Detail, "top-k selection differs") {
		t.Errorf("cause %s (%s)", f.Cause, f.Detail)
	}
	want := "first divergence: layers.0.mlp.experts: expert set differs at seq 0 pos 4: " + ids(f.A) + " vs " + ids(f.B) + ", margin 0 ULP"
	if v := rep.Verdict(); v != want {
		t.Errorf("verdict %q, want %q", v, want)
	}
	if rep.Routing.Layers[0].RouterDiffer != 0 || rep.Routing.Layers[1].Flipped != 0 {
		t.Errorf("layers: %+v", rep.Routing.Layers)
	}
}

// TestRoutingIdentical: an identical MoE pair has every token compared and nothing flipped; a dense pair
// has no routing section (JSON: an empty list).
func TestRoutingIdentical(t *testing.T) {
	rep := moeScenario(t, false, true)
	if !rep.Identical || rep.Routing == nil || rep.Routing.FirstFlip() != nil {
		t.Fatalf("identical MoE pair: %+v", rep.Routing)
	}
	for _, l := range rep.Routing.Layers {
		if l.Tokens != 16 || l.Flipped+l.OrderOnly+l.WeightsOnly+l.RouterDiffer != 0 || l.First != nil || l.FirstAny != nil {
			t.Errorf("layer %d: %+v", l.Layer, l)
		}
	}
	dense := scenario(t, true)
	if dense.Routing != nil {
		t.Errorf("dense pair has routing %+v", dense.Routing)
	}
	var b bytes.Buffer
	if err := WriteJSON(&b, dense); err != nil {
		t.Fatal(err)
	}
	var j struct {
		Version int               `json:"version"`
		Routing []json.RawMessage `json:"routing"`
	}
	if err := json.Unmarshal(b.Bytes(), &j); err != nil || j.Version != SchemaVersion || j.Routing == nil || len(j.Routing) != 0 {
		t.Errorf("dense JSON: version %d routing %v (%v)", j.Version, j.Routing, err)
	}
}

// TestRoutingReports: every format carries the routing table and the first flip; the JSON's routing section
// holds the schema's fields.
func TestRoutingReports(t *testing.T) {
	rep := moeScenario(t, true, false)
	flip := rep.Routing.FirstFlip().String()
	for _, format := range []string{"text", "md", "html", "json"} {
		var b bytes.Buffer
		if err := WriteReport(&b, rep, format); err != nil {
			t.Fatal(err)
		}
		s := b.String()
		if format == "html" {
			s = strings.ReplaceAll(s, "&#39;", "'")
		}
		if format != "json" && (!strings.Contains(s, flip) || !strings.Contains(s, "order only") || !strings.Contains(s, "local (router inputs identical")) {
			t.Errorf("%s report lacks the routing table or flip %q:\n%s", format, flip, s)
		}
		if format == "text" && !strings.Contains(s, "downstream: 3 of the 6 logprobs positions from pos 2 on differ (first at pos 2)") {
			t.Errorf("text report lacks the downstream line:\n%s", s)
		}
	}
	var b bytes.Buffer
	if err := WriteJSON(&b, rep); err != nil {
		t.Fatal(err)
	}
	var j struct {
		First struct {
			RoutingFlip *struct {
				Kind string `json:"kind"`
			} `json:"routing_flip"`
		} `json:"first_divergence"`
		Routing []struct {
			Layer, Tokens, Flipped int64
			OrderOnly              int64 `json:"order_only"`
			WeightsOnly            int64 `json:"weights_only"`
			FirstFlip              *struct {
				Seq, Pos   int64
				AExperts   []int64               `json:"a_experts"`
				BExperts   []int64               `json:"b_experts"`
				MarginA    *struct{ ULP uint64 } `json:"margin_a"`
				MarginB    *struct{ ULP uint64 } `json:"margin_b"`
				Cause      string
				Downstream *struct{ Tokens, Differ int64 }
			} `json:"first_flip"`
		} `json:"routing"`
	}
	if err := json.Unmarshal(b.Bytes(), &j); err != nil {
		t.Fatal(err)
	}
	if len(j.Routing) != 2 || j.First.RoutingFlip == nil || j.First.RoutingFlip.Kind != "set" {
		t.Fatalf("JSON routing: %s", b.String())
	}
	r0 := j.Routing[0]
	ff := r0.FirstFlip
	if r0.Tokens != 16 || r0.Flipped != 2 || r0.OrderOnly != 1 || r0.WeightsOnly != 1 || ff == nil || ff.Seq != 0 || ff.Pos != 2 ||
		len(ff.AExperts) != moeK || slices.Equal(ff.AExperts, ff.BExperts) || ff.MarginA == nil || ff.MarginA.ULP != 1 ||
		ff.MarginB == nil || ff.MarginB.ULP != 1 || ff.Cause != "local" || ff.Downstream == nil || ff.Downstream.Differ != 3 {
		t.Errorf("JSON layer 0: %+v %+v", r0, ff)
	}
}

// TestRoutingBadInput: expert ids that are not integers, or a different k per side, are reported on the
// layer, not compared and never a panic.
func TestRoutingBadInput(t *testing.T) {
	a := newMoESide()
	ta := a.tensors()
	tb := a.tensors()
	for i := range tb {
		if tb[i].Op == "layers.1.mlp.experts" { // B: one expert per token
			tb[i].Shape = []int64{moeT, 1}
			tb[i].Data = tb[i].Data[:moeT*4]
		}
	}
	dir := t.TempDir()
	ca := writeCapture(t, filepath.Join(dir, "a.arrow"), "trainer", 1, ta)
	cb := writeCapture(t, filepath.Join(dir, "b.arrow"), "sampler", 1, tb)
	rep, err := Diff(context.Background(), ca, cb, WithProducers(moeProducers))
	if err != nil {
		t.Fatal(err)
	}
	if l := rep.Routing.Layers[1]; l.Detail != "A selects 2 experts per token, B 1" || l.Tokens != 0 {
		t.Errorf("layer 1: %+v", l)
	}
}

// TestRoutingBF16Margin: a bf16 model's router logits (float32 values that are all bf16 values) get their
// margins in bf16 ULPs, as the diff counts the op's distances.
func TestRoutingBF16Margin(t *testing.T) {
	a, b := newMoESide(), newMoESide()
	for _, s := range []*moeSide{a, b} {
		for l := 0; l < 2; l++ {
			for q := 0; q < 2; q++ {
				for i, v := range s.router[l][q] {
					s.router[l][q][i] = math.Float32frombits(math.Float32bits(v) &^ 0xffff) // a bf16 value
				}
				for p := 0; p < moeT; p++ {
					s.route(l, q, p)
				}
			}
		}
	}
	up := func(x float32) float32 { return math.Float32frombits(math.Float32bits(x) + 0x10000) } // +1 bf16 ULP (x > 0)
	hi, lo := a.rankOf(0, 1, 6, moeK-1), a.rankOf(0, 1, 6, moeK)
	for _, s := range []*moeSide{a, b} {
		row := s.router[0][1][6*moeE:]
		row[lo] = float32(math.Abs(float64(row[lo])) + 1) // positive and apart from the others
		row[hi] = up(row[lo])
	}
	b.router[0][1][6*moeE+lo] = up(b.router[0][1][6*moeE+hi])
	a.route(0, 1, 6)
	b.route(0, 1, 6)
	dir := t.TempDir()
	ca := writeCapture(t, filepath.Join(dir, "a.arrow"), "trainer", 1, a.tensors())
	cb := writeCapture(t, filepath.Join(dir, "b.arrow"), "sampler", 1, b.tensors())
	rep, err := Diff(context.Background(), ca, cb, WithProducers(moeProducers))
	if err != nil {
		t.Fatal(err)
	}
	f := rep.Routing.Layers[0].First
	if f == nil || f.At != (TokenID{0, 1, 6}) || f.MarginDType != "bf16" || f.MarginAULP != 1 || f.MarginBULP != 1 {
		t.Fatalf("flip %+v", f)
	}
	if !strings.HasSuffix(f.String(), "margin 1 bf16 ULP") {
		t.Errorf("flip %q", f.String())
	}
}

// TestRouteView: the routing view's data: the grid converted once (marks, first flips), and one token's
// routing read from the captures with the same words as the report.
func TestRouteView(t *testing.T) {
	s := moeSession(t, true, false)
	src := (&Loaded{Session: s}).Source()
	vr := src.Report().Routing
	if vr == nil || len(vr.Layers) != 2 || len(vr.Tokens) != 16 || vr.First != s.Report.Routing.FirstFlip().String() {
		t.Fatalf("view routing: %+v", vr)
	}
	l0 := vr.Layers[0]
	if l0.FirstFlip < 0 || vr.Tokens[l0.FirstFlip] != (view.Coord{Seq: 0, Pos: 2}) || l0.Marks[l0.FirstFlip] != view.RouteSet || l0.Flipped != 2 {
		t.Errorf("layer 0: %+v", l0)
	}
	rt, ok := src.(view.Router)
	if !ok {
		t.Fatal("the session's source is no view.Router")
	}
	tr, err := rt.Route(context.Background(), 0, view.Coord{Seq: 0, Pos: 2})
	if err != nil {
		t.Fatal(err)
	}
	f := s.Report.Routing.Layers[0].First
	if tr.Mark != view.RouteSet || tr.Text != f.String() || tr.Margin != "margin 1 ULP" || tr.K != moeK ||
		len(tr.A.Top) != moeK+topExtra || len(tr.B.Top) != moeK+topExtra {
		t.Fatalf("route: %+v", tr)
	}
	// A's top k are its selection, in order; B's k-th is the expert A ranks (k+1)-th
	for j := 0; j < moeK; j++ {
		if !tr.A.Top[j].Selected || int64(tr.A.Top[j].ID) != f.A[j] || int64(tr.B.Top[j].ID) != f.B[j] {
			t.Errorf("top %d: A %+v B %+v (experts %v vs %v)", j, tr.A.Top[j], tr.B.Top[j], f.A, f.B)
		}
	}
	if tr.A.Top[moeK].Selected || tr.A.Top[moeK].ID != tr.B.Top[moeK-1].ID {
		t.Errorf("A's (k+1)-th %+v, B's k-th %+v", tr.A.Top[moeK], tr.B.Top[moeK-1])
	}
	same, err := rt.Route(context.Background(), 0, view.Coord{Seq: 0, Pos: 3})
	if err != nil || same.Mark != view.RouteSame || !strings.Contains(same.Text, "same experts") {
		t.Errorf("same token: %+v %v", same, err)
	}
	if _, err := rt.Route(context.Background(), 0, view.Coord{Seq: 0, Pos: 99}); err == nil {
		t.Error("a position outside the capture: no error")
	}
}

// TestRoutingInconsistentSide: one side's experts tensors disagree on k between sequences: the layer names
// the file and the problem and compares nothing; the diff itself goes on.
func TestRoutingInconsistentSide(t *testing.T) {
	a := newMoESide()
	tb := a.tensors()
	for i := range tb {
		if tb[i].Op == "layers.0.mlp.experts" && tb[i].Seq == 1 {
			tb[i].Shape = []int64{moeT, 1}
			tb[i].Data = tb[i].Data[:moeT*4]
		}
	}
	dir := t.TempDir()
	ca := writeCapture(t, filepath.Join(dir, "a.arrow"), "trainer", 1, a.tensors())
	cb := writeCapture(t, filepath.Join(dir, "b.arrow"), "sampler", 1, tb)
	rep, err := Diff(context.Background(), ca, cb, WithProducers(moeProducers))
	if err != nil {
		t.Fatal(err)
	}
	l := rep.Routing.Layers[0]
	if l.Tokens != 0 || !strings.Contains(l.Detail, "b.arrow: layers.0.mlp.experts holds rows of 2 i32 and 1 i32 elements") {
		t.Errorf("layer 0: %+v", l)
	}
	if rep.Routing.Layers[1].Tokens != 16 {
		t.Errorf("layer 1: %+v", rep.Routing.Layers[1])
	}
}

// TestRoutingReportGolden: the MoE pair's reports in text, Markdown and JSON (golden files; go test ./session
// -update regenerates them).
func TestRoutingReportGolden(t *testing.T) {
	rep := moeScenario(t, true, false)
	rep.A.Path, rep.B.Path = "trainer.arrow", "sampler.arrow"
	for _, f := range []struct{ format, ext string }{{"text", "txt"}, {"md", "md"}, {"json", "json"}} {
		var b bytes.Buffer
		if err := WriteReport(&b, rep, f.format); err != nil {
			t.Fatal(err)
		}
		goldenReport(t, "report-moe."+f.ext, b.Bytes())
	}
}

// TestRoutingOddInput: MoE ops of odd dtypes and shapes on either side (float ids, negative or huge ids,
// routers narrower than k, one token, NaN logits, a whole-tensor experts op) give a report, never a panic.
func TestRoutingOddInput(t *testing.T) {
	dts := []capture.DType{capture.I32, capture.I64, capture.F32, capture.BF16, capture.U8}
	r := rand.New(rand.NewPCG(3, 3))
	compared := 0
	for trial := 0; trial < 40; trial++ {
		var sides [2][]capture.Tensor
		type shape struct {
			dt   capture.DType
			n, w int64
		}
		pick := func() shape { return shape{dts[r.IntN(len(dts))], int64(1 + r.IntN(4)), int64(1 + r.IntN(5))} }
		base := [3]shape{pick(), {capture.I32, int64(1 + r.IntN(4)), int64(1 + r.IntN(3))}, pick()}
		for s := range sides {
			for o, op := range []struct {
				suf string
				idx int32
			}{{capture.LayerRouter, 11}, {capture.LayerExperts, 12}, {capture.LayerExpertWeights, 13}} {
				sh := base[o]
				if r.IntN(4) == 0 { // this side's op is odd
					sh = pick()
				}
				dt, n, w := sh.dt, sh.n, sh.w
				data := make([]byte, n*w*int64(dt.Size()))
				for i := range data {
					data[i] = byte(r.Uint32())
				}
				tn := capture.Tensor{NTok: n, Op: engine.LayerOp(0, op.suf), Index: op.idx, Role: "out", DType: dt,
					Shape: []int64{n, w}, Shard: capture.NoShard, Data: data}
				if r.IntN(8) == 0 { // not per token
					tn.NTok, tn.Shape = 0, []int64{n * w}
				}
				sides[s] = append(sides[s], tn)
			}
		}
		dir := t.TempDir()
		ca := writeCapture(t, filepath.Join(dir, "a.arrow"), "trainer", 1, sides[0])
		cb := writeCapture(t, filepath.Join(dir, "b.arrow"), "sampler", 1, sides[1])
		rep, err := Diff(context.Background(), ca, cb, WithProducers(moeProducers))
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		if rep.Routing == nil || len(rep.Routing.Layers) != 1 {
			t.Fatalf("trial %d: routing %+v", trial, rep.Routing)
		}
		for _, format := range []string{"text", "md", "html", "json"} {
			if err := WriteReport(io.Discard, rep, format); err != nil {
				t.Fatalf("trial %d: %s: %v", trial, format, err)
			}
		}
		s := NewSession(ca, cb, rep)
		for _, tok := range rep.Routing.Tokens {
			s.Route(0, tok) // an error is fine, a panic is not
		}
		if rep.Routing.Layers[0].Tokens > 0 {
			compared++
		}
	}
	if compared < 3 {
		t.Errorf("only %d of 40 trials compared a token: the test hardly reaches the comparison", compared)
	}
}

// TestRoutingCauseFromCapturedInputs: without a producer graph, the router's own captured input (role "in",
// record_inputs) decides whether a flip is local; without either the cause is unknown.
func TestRoutingCauseFromCapturedInputs(t *testing.T) {
	a, b := newMoESide(), newMoESide()
	hi, lo := a.rankOf(0, 0, 2, moeK-1), a.rankOf(0, 0, 2, moeK)
	b.router[0][0][2*moeE+lo] = nudge(b.router[0][0][2*moeE+hi], 1)
	b.route(0, 0, 2)
	withIn := func(s *moeSide) []capture.Tensor {
		ts := s.tensors()
		for q := 0; q < 2; q++ {
			ts = append(ts, capture.Tensor{Seq: int64(q), NTok: moeT, Op: engine.LayerOp(0, capture.LayerRouter), Index: 11, Role: "in",
				DType: capture.BF16, Shape: []int64{moeT, moeH}, Shard: capture.NoShard, Data: s.norm[0][q]})
		}
		return ts
	}
	for _, c := range []struct {
		in   bool
		want Cause
		det  string
	}{{true, CauseLocal, "router inputs identical: layers.0.mlp.router[in]"}, {false, CauseUnknown, "neither captured nor in a producer graph"}} {
		ta, tb := a.tensors(), b.tensors()
		if c.in {
			ta, tb = withIn(a), withIn(b)
		}
		dir := t.TempDir()
		ca := writeCapture(t, filepath.Join(dir, "a.arrow"), "trainer", 1, ta)
		cb := writeCapture(t, filepath.Join(dir, "b.arrow"), "sampler", 1, tb)
		rep, err := Diff(context.Background(), ca, cb) // no producer graph
		if err != nil {
			t.Fatal(err)
		}
		f := rep.Routing.Layers[0].First
		if f == nil || f.Cause != c.want || !strings.Contains(f.Detail, c.det) {
			t.Errorf("router input captured %v: flip %+v", c.in, f)
		}
	}
}

// TestRouterMarginULPs: a router margin counts last-bit steps of the larger of the two logits, also when the
// k-th and (k+1)-th logits straddle zero (the ordered-integer distance would count every float in between:
// about 2.09e9 for 0.3 against −0.2).
func TestRouterMarginULPs(t *testing.T) {
	row := func(v ...float32) []byte {
		b := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
		return b
	}
	tab := &rowTable{f: formats[capture.F32], rowLen: 3}
	for _, c := range []struct {
		logits []float32
		bf16   bool
		gap    float64
		ulp    uint64
	}{
		{[]float32{0.3, -0.2, -1}, false, float64(float32(0.3)) - float64(float32(-0.2)), 1 << 24}, // 0.5 / 2^-25
		{[]float32{1.5, math.Nextafter32(1.5, 0), -1}, false, 1.5 - float64(math.Nextafter32(1.5, 0)), 1},
		{[]float32{0.75, 0.5, 0.25}, true, 0.25, 64},                   // 0.25 / 2^-8 (bf16 steps of 0.75)
		{[]float32{2, -2, -3}, true, 4, 256},                           // 4 / 2^-6
		{[]float32{float32(math.Inf(1)), 1, 0}, false, math.Inf(1), 0}, // non-finite: the ordered distance
	} {
		gap, ulp, ok := tab.margin(row(c.logits...), 1, c.bf16)
		if !ok || gap != c.gap || (c.ulp != 0 && ulp != c.ulp) {
			t.Errorf("%v (bf16 %t): gap %v, %d ULP; want %v, %d", c.logits, c.bf16, gap, ulp, c.gap, c.ulp)
		}
	}
}
