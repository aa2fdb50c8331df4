package session

import (
	"bitalign/capture"
	"fmt"

	"bitalign/engine"
	"bitalign/session/view"
)

// The routing view's data: the report's routing comparison converted once, and one token's routing on both
// sides read from the captures (the routing view's detail panel).

// topExtra is how many experts past the k selected the detail panel lists per side.
const topExtra = 2

func convertRouting(r *Routing) *view.Routing {
	if r == nil {
		return nil
	}
	out := &view.Routing{Summary: r.Summary()}
	if f := r.FirstFlip(); f != nil {
		out.First = f.String()
	}
	for _, t := range r.Tokens {
		out.Tokens = append(out.Tokens, view.Coord{Step: t.Step, Seq: t.Seq, Pos: t.Pos})
	}
	for i := range r.Layers {
		l := &r.Layers[i]
		vl := view.RoutingLayer{Layer: l.Layer, Op: l.Op, Tokens: l.Tokens, Flipped: l.Flipped, OrderOnly: l.OrderOnly,
			WeightsOnly: l.WeightsOnly, FirstFlip: -1, Detail: l.Detail, Marks: make([]view.RouteMark, len(l.Marks))}
		for j, m := range l.Marks {
			vl.Marks[j] = view.RouteMark(m)
		}
		for j, t := range r.Tokens {
			if l.First != nil && l.First.At == t {
				vl.FirstFlip = j
			}
		}
		out.Layers = append(out.Layers, vl)
	}
	return out
}

// Route reads one token's routing in one MoE layer on both sides: the experts, their weights, the router's best
// k+2 experts with their logits, how the sides compare and the margin, in the words of the report.
func (s *Session) Route(layer int, at TokenID) (*view.TokenRoute, error) {
	rowOf := func(op string) (a, b []byte, t *rowTable, err error) {
		p, err := s.Pair(op, "out", at.Step, at.Seq)
		if err != nil {
			return nil, nil, nil, err
		}
		r := int(at.Pos - p.Pos0)
		if r < 0 || r >= p.Rows {
			return nil, nil, nil, fmt.Errorf("session: %s has no position %d in step %d seq %d", op, at.Pos, at.Step, at.Seq)
		}
		rb := p.Cols * p.f.size
		t = &rowTable{f: p.f, rowLen: int64(p.Cols)}
		if p.HasA[r] {
			a = p.A[r*rb : (r+1)*rb]
		}
		if p.HasB[r] {
			b = p.B[r*rb : (r+1)*rb]
		}
		return a, b, t, nil
	}
	xa, xb, et, err := rowOf(engine.LayerOp(layer, capture.LayerExperts))
	if err != nil {
		return nil, err
	}
	if xa == nil || xb == nil || et.f.kind == kindFloat {
		return nil, fmt.Errorf("session: %s at %s: not captured as expert ids on both sides", engine.LayerOp(layer, capture.LayerExperts), at.where())
	}
	a, b := et.ints(xa), et.ints(xb)
	k := len(a)
	f := &Flip{Layer: layer, Op: engine.LayerOp(layer, capture.LayerExperts), At: at, A: a, B: b}
	tr := &view.TokenRoute{Layer: layer, At: view.Coord{Step: at.Step, Seq: at.Seq, Pos: at.Pos}, K: k,
		A: view.RouteSide{Experts: toInts(a)}, B: view.RouteSide{Experts: toInts(b)}}
	var wa, wb []byte
	if ya, yb, wt, err := rowOf(engine.LayerOp(layer, capture.LayerExpertWeights)); err == nil && ya != nil && yb != nil && wt.rowLen == int64(k) {
		wa, wb = ya, yb
		f.WA, f.WB = wt.floats(ya), wt.floats(yb)
		tr.A.Weights, tr.B.Weights = f.WA, f.WB
	}
	f.Kind = classify(a, b, wa, wb)
	tr.Mark = view.RouteMark(f.Kind)
	router := engine.LayerOp(layer, capture.LayerRouter)
	if ra, rb, rt, err := rowOf(router); err == nil && ra != nil && rb != nil && rt.f.kind == kindFloat {
		f.setMargins(rt, ra, rb, k, marginDType(s.Report, layer, rt))
		tr.Margin = f.Margin()
		tr.A.Top, tr.B.Top = rt.top(ra, k+topExtra, a), rt.top(rb, k+topExtra, b)
	}
	if f.Kind == RouteSame {
		tr.Text = fmt.Sprintf("%s at %s: same experts %s", f.Op, at.where(), ids(a))
		if tr.Margin != "" {
			tr.Text += ", " + tr.Margin
		}
	} else {
		tr.Text = f.String()
	}
	return tr, nil
}

// top lists a router row's n best experts by the canonical order, marking those in selected.
func (t *rowTable) top(row []byte, n int, selected []int64) []view.ExpertScore {
	vals := t.floats(row)
	bits := make([]uint64, len(vals))
	for i := range bits {
		bits[i] = t.f.load(row, i)
	}
	r := RankExperts(vals, bits)
	var out []view.ExpertScore
	for _, e := range r[:min(n, len(r))] {
		sel := false
		for _, x := range selected {
			sel = sel || x == int64(e.ID)
		}
		out = append(out, view.ExpertScore{ID: e.ID, Logit: t.f.decimal(e.Bits), Selected: sel})
	}
	return out
}

func toInts(x []int64) []int {
	out := make([]int, len(x))
	for i, v := range x {
		out[i] = int(v)
	}
	return out
}
