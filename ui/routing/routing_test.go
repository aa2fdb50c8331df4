package routing

import (
	"strings"
	"testing"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"bitalign/session/view"
	"bitalign/ui/theme"
)

// grid makes a routing of layers × n tokens (one sequence) with flips at the given (layer, token)s.
func grid(layers, n int, flips ...[2]int) *view.Routing {
	r := &view.Routing{Summary: "test"}
	for p := 0; p < n; p++ {
		r.Tokens = append(r.Tokens, view.Coord{Pos: int64(p)})
	}
	for l := 0; l < layers; l++ {
		rl := view.RoutingLayer{Layer: l, Op: "layers.x.mlp.experts", FirstFlip: -1, Marks: make([]view.RouteMark, n)}
		for i := range rl.Marks {
			rl.Marks[i] = view.RouteSame
		}
		r.Layers = append(r.Layers, rl)
	}
	for _, f := range flips {
		l := &r.Layers[f[0]]
		l.Marks[f[1]] = view.RouteSet
		l.Flipped++
		if l.FirstFlip < 0 || f[1] < l.FirstFlip {
			l.FirstFlip = f[1]
		}
	}
	return r
}

func key(s string) tea.KeyPressMsg {
	switch s {
	case "right":
		return tea.KeyPressMsg{Code: tea.KeyRight}
	}
	return tea.KeyPressMsg{Code: []rune(s)[0], Text: s}
}

func TestCursorStartsOnTheFirstFlipAndWalksThem(t *testing.T) {
	m := New(theme.Default())
	m.SetSize(40, 6)
	m.SetData(grid(6, 100, [2]int{4, 30}, [2]int{2, 50}, [2]int{4, 70}, [2]int{5, 10}))
	if r, c, _ := m.Cursor(); r != 5 || c != 10 {
		t.Fatalf("start at %d %d, want the earliest token's flip (5, 10)", r, c)
	}
	var got [][2]int
	m.SetCursor(0, 0)
	for m.NextFlip(1) {
		r, c, _ := m.Cursor()
		got = append(got, [2]int{r, c})
	}
	want := [][2]int{{2, 50}, {4, 30}, {4, 70}, {5, 10}}
	if len(got) != len(want) {
		t.Fatalf("flips in reading order %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("flips in reading order %v, want %v", got, want)
		}
	}
	if m.NextFlip(1) {
		t.Error("a flip after the last")
	}
	m, _ = m.Update(key("N"))
	if r, c, _ := m.Cursor(); r != 4 || c != 70 {
		t.Errorf("N from the last flip: %d %d", r, c)
	}
}

func TestGridScrollsToTheCursor(t *testing.T) {
	m := New(theme.Default())
	m.SetData(grid(20, 300, [2]int{15, 250}))
	m.SetSize(45, 8) // 40 token columns, 6 layer rows
	v := ansi.Strip(m.View())
	lines := strings.Split(v, "\n")
	if len(lines) != 8 || !strings.HasPrefix(lines[len(lines)-1], "L15 seq 0 pos 250") {
		t.Fatalf("view:\n%s", v)
	}
	if !strings.Contains(v, "L15  ") || strings.Contains(v, "L0 ") {
		t.Errorf("the cursor's layer is not shown, or the first is:\n%s", v)
	}
	if strings.Count(lines[0], "▾") != 1 {
		t.Errorf("header %q: want one cursor mark", lines[0])
	}
	for i := 0; i < 100; i++ {
		m, _ = m.Update(key("right"))
	}
	if _, c, _ := m.Cursor(); c != 299 {
		t.Errorf("right ×100 from 250: col %d, want 299 (clamped)", c)
	}
	m, _ = m.Update(key("g"))
	if r, _, _ := m.Cursor(); r != 0 || !strings.Contains(ansi.Strip(m.View()), "L0 ") {
		t.Errorf("g: row %d", r)
	}
}

func TestDetail(t *testing.T) {
	tr := &view.TokenRoute{Mark: view.RouteSet, Text: "layers.1.mlp.experts: expert set differs at seq 0 pos 3: [1, 2] vs [1, 4], margin 1 ULP",
		Margin: "margin 1 ULP", K: 2,
		A: view.RouteSide{Experts: []int{1, 2}, Weights: []float64{0.6, 0.4}, Top: []view.ExpertScore{{ID: 1, Logit: "2", Selected: true}, {ID: 2, Logit: "1", Selected: true}, {ID: 4, Logit: "0.99", Selected: false}}},
		B: view.RouteSide{Experts: []int{1, 4}, Top: []view.ExpertScore{{ID: 1, Logit: "2", Selected: true}, {ID: 4, Logit: "1", Selected: true}, {ID: 2, Logit: "0.99", Selected: false}}}}
	v := ansi.Strip(Detail(theme.Default(), tr, nil, false, [2]string{"trainer", "sampler"}, 80, 12))
	for _, want := range []string{"expert set differs", "A trainer", "B sampler", "experts [1, 2]", "experts [1, 4]",
		"weights [0.6, 0.4]", "● 2     4       1", "  3     4       0.99", "router margin 1 ULP"} {
		if !strings.Contains(v, want) {
			t.Errorf("detail lacks %q:\n%s", want, v)
		}
	}
	if v := ansi.Strip(Detail(theme.Default(), nil, errTest{}, false, [2]string{"a", "b"}, 40, 4)); !strings.Contains(v, "cannot read") {
		t.Errorf("error detail:\n%s", v)
	}
}

type errTest struct{}

func (errTest) Error() string { return "session: no tensor" }

// TestSizeAfterData: data set before the first size (the TUI loads before it lays out) still shows the
// grid from its first token when the cursor fits there.
func TestSizeAfterData(t *testing.T) {
	m := New(theme.Default())
	m.SetData(grid(2, 64, [2]int{1, 14}))
	m.SetSize(75, 6)
	head := strings.Split(ansi.Strip(m.View()), "\n")[0]
	if i := strings.Index(head, "▾"); i < 0 || len([]rune(head[:i])) != labelW+14 {
		t.Errorf("header %q: the cursor mark should be at column %d", head, labelW+14)
	}
}
