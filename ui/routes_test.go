package ui

import (
	"strconv"
	"strings"
	"testing"

	"bitalign/session/view"
	"bitalign/ui/internal/fake"
)

// TestRoutingView: x opens the routing view of a MoE pair with the cursor on the first flip and its detail
// read through view.Router; n/N walk the flips; enter opens the experts op's tensor view at the token, esc
// comes back to the routing view, esc again to the overview.
func TestRoutingView(t *testing.T) {
	m := loaded(t, fake.MoEDefault(), 120, 40)
	r := m.rep.Routing
	if r == nil || r.First == "" {
		t.Fatalf("the MoE fake has no flip: %+v", r)
	}
	press(t, m, "x")
	if m.screen != routingScreen {
		t.Fatalf("x: screen %d", m.screen)
	}
	checkFrame(t, m)
	goldenFrame(t, "routing-120x40", text(m))
	l, at, ok := m.route.Target()
	if !ok || l.FirstFlip < 0 || r.Tokens[l.FirstFlip] != at || l.Marks[l.FirstFlip] != view.RouteSet {
		t.Fatalf("cursor on %+v %+v, want the first flip", l, at)
	}
	if got := text(m); !strings.Contains(got, r.First) && !strings.Contains(got, "expert set differs") {
		t.Errorf("the detail lacks the flip %q:\n%s", r.First, got)
	}
	// n goes to the next flip, N back
	press(t, m, "n")
	l2, at2, _ := m.route.Target()
	row, col, _ := m.route.Cursor()
	if m.rep.Routing.Layers[row].Marks[col] != view.RouteSet || (l2.Layer == l.Layer && at2 == at) {
		t.Errorf("n: %+v %+v is no other flip", l2, at2)
	}
	press(t, m, "N")
	if l3, at3, _ := m.route.Target(); l3.Layer != l.Layer || at3 != at {
		t.Errorf("N: back to %+v %+v, want %+v %+v", l3.Layer, at3, l.Layer, at)
	}
	// enter: the tensor view of layers.L.mlp.experts, the cursor on the token
	press(t, m, "enter")
	if m.screen != tensorScreen || selectedOp(m) != l.Op || m.seq.Seq != at.Seq {
		t.Fatalf("enter: screen %d op %q seq %+v, want the tensor view of %s seq %d", m.screen, selectedOp(m), m.seq, l.Op, at.Seq)
	}
	if r, _, ok := m.heat.Cursor(); !ok || int64(r)+m.data.Pair.Pos0 != at.Pos {
		t.Errorf("tensor view cursor on row %d, want pos %d", r, at.Pos)
	}
	goldenFrame(t, "routing-to-op", text(m))
	press(t, m, "esc")
	if m.screen != routingScreen {
		t.Fatalf("esc from the op view: screen %d, want the routing view", m.screen)
	}
	if l4, at4, _ := m.route.Target(); l4.Layer != l.Layer || at4 != at {
		t.Errorf("back in the routing view on %+v %+v, want %+v %+v", l4.Layer, at4, l.Layer, at)
	}
	press(t, m, "esc")
	if m.screen != overviewScreen {
		t.Errorf("esc from the routing view: screen %d", m.screen)
	}
	// the tensor view opened from the overview goes back to the overview
	press(t, m, "enter", "esc")
	if m.screen != overviewScreen {
		t.Errorf("enter, esc from the overview: screen %d", m.screen)
	}
}

// TestRoutingViewMoves: the cursor moves over layers and tokens and scrolls at 80×24; the detail follows.
func TestRoutingViewMoves(t *testing.T) {
	m := loaded(t, fake.MoEDefault(), 80, 24)
	press(t, m, "x", "g")
	for range 60 {
		press(t, m, "l")
		checkFrame(t, m)
	}
	row, col, _ := m.route.Cursor()
	if row != 0 || col < 40 {
		t.Errorf("cursor at row %d col %d", row, col)
	}
	press(t, m, "j", "H")
	if r2, c2, _ := m.route.Cursor(); r2 != 1 || c2 != col-8 {
		t.Errorf("j, H: cursor at %d %d, want 1 %d", r2, c2, col-8)
	}
	_, at, _ := m.route.Target()
	want := "seq " + itoa(at.Seq) + " pos " + itoa(at.Pos)
	if got := text(m); !strings.Contains(got, want) {
		t.Errorf("the detail does not follow the cursor to %s:\n%s", want, got)
	}
	goldenFrame(t, "routing-80x24", text(m))
}

// TestRoutingViewDense: a dense pair has no routing view: x says so and stays on the overview.
func TestRoutingViewDense(t *testing.T) {
	m := loaded(t, fake.Default(), 120, 40)
	press(t, m, "x")
	if m.screen != overviewScreen || !strings.Contains(m.status, "no routing view") {
		t.Errorf("x on a dense pair: screen %d, status %q", m.screen, m.status)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestRoutingFromTensorView: x in a MoE layer's tensor view opens the routing view on that layer and the token
// under the heatmap cursor.
func TestRoutingFromTensorView(t *testing.T) {
	m := loaded(t, fake.MoEDefault(), 120, 40)
	i := m.rep.FindOp("layers.2.mlp.router", "out")
	run(t, m, m.jump(i, false))
	press(t, m, "enter")
	if m.screen != tensorScreen || m.data == nil {
		t.Fatalf("no tensor view of layers.2.mlp.router")
	}
	r, _, _ := m.heat.Cursor()
	press(t, m, "x")
	l, at, ok := m.route.Target()
	if m.screen != routingScreen || !ok || l.Layer != 2 || at.Seq != m.seq.Seq || at.Pos != m.data.Pair.Pos0+int64(r) {
		t.Errorf("x from the tensor view: screen %d, layer %d token %+v; want layer 2 seq %d pos %d", m.screen, l.Layer, at,
			m.seq.Seq, m.data.Pair.Pos0+int64(r))
	}
}
