package ui

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	tea "charm.land/bubbletea/v2"

	"bitalign/ui/internal/fake"
	"bitalign/ui/oplist"
)

// TestStatusFollowsCursor: every way of moving the op list's cursor moves the status line with it, to the
// selected op's one-line description.
func TestStatusFollowsCursor(t *testing.T) {
	wheel := func(b tea.MouseButton) func(*Model) tea.Cmd {
		return func(m *Model) tea.Cmd { _, cmd := m.Update(tea.MouseWheelMsg{Button: b}); return cmd }
	}
	keys := func(names ...string) func(*Model) tea.Cmd {
		return func(m *Model) tea.Cmd {
			var cmds []tea.Cmd
			for _, n := range names {
				_, cmd := m.Update(keyMsg(n))
				cmds = append(cmds, cmd)
			}
			return tea.Batch(cmds...)
		}
	}
	tests := []struct {
		name string
		move func(*Model) tea.Cmd
		want string // the op selected after the move from the first divergence
	}{
		{"j", keys("j"), "layers.2.mlp_residual"},
		{"k", keys("k"), "layers.2.mlp.act"},
		{"down", keys("down"), "layers.2.mlp_residual"},
		{"up", keys("up"), "layers.2.mlp.act"},
		{"pgdown", keys("pgdown"), ""},
		{"pgup", keys("pgup"), ""},
		{"ctrl+f", keys("ctrl+f"), ""},
		{"home", keys("home"), "tokens"},
		{"end", keys("end"), "sample"},
		{"g", keys("g"), "tokens"},
		{"G", keys("G"), "sample"},
		{"wheel down", wheel(tea.MouseWheelDown), "layers.3.attn.q_proj"},
		{"wheel up", wheel(tea.MouseWheelUp), "layers.2.mlp.gate_proj"},
	}
	for _, tt := range tests {
		m := loaded(t, fake.Default(), 120, 40)
		start := selectedOp(m)
		run(t, m, tt.move(m))
		o := m.selected()
		if o == nil || o.Op == start {
			t.Errorf("%s: the cursor did not move from %s", tt.name, start)
			continue
		}
		if tt.want != "" && o.Op != tt.want {
			t.Errorf("%s: selected %s, want %s", tt.name, o.Op, tt.want)
		}
		if m.status != oplist.Describe(o) {
			t.Errorf("%s: status line %q, want the selected op's %q", tt.name, m.status, oplist.Describe(o))
		}
		if last := strings.Split(text(m), "\n"); !strings.Contains(last[len(last)-2], fmt.Sprintf("#%d %s", o.Index, o.Op)) {
			t.Errorf("%s: the status line on screen does not name %s: %q", tt.name, o.Op, last[len(last)-2])
		}
	}
	// a click on another row moves the status line too
	m := loaded(t, fake.Default(), 120, 40)
	l := m.layout()
	_, cmd := m.Update(tea.MouseClickMsg{X: l.list.x + 5, Y: l.list.y + 1, Button: tea.MouseLeft})
	run(t, m, cmd)
	if o := m.selected(); o == nil || m.status != oplist.Describe(o) {
		t.Errorf("after a click, status %q", m.status)
	}
}

// TestEnterOnEmptyFilter: with a filter that hides every op, enter (and tab) open nothing: the hidden op that
// was selected before stays closed, and the status line says why.
func TestEnterOnEmptyFilter(t *testing.T) {
	m := loaded(t, fake.Default(), 100, 30)
	press(t, m, "/")
	typeText(t, m, "zzz")
	press(t, m, "enter") // keeps the filter, closes the prompt
	if m.prompt != noPrompt || m.list.Visible() != 0 {
		t.Fatalf("filter zzz: prompt %d, %d ops visible", m.prompt, m.list.Visible())
	}
	for _, k := range []string{"enter", "tab", "enter"} {
		msgs := press(t, m, k)
		checkFrame(t, m)
		if m.screen != overviewScreen || m.data != nil || m.pairLoading || len(msgs) != 0 {
			t.Fatalf("%s on an empty filter result opened the tensor view of %q", k, selectedOp(m))
		}
		if !strings.Contains(m.status, `no op matches "zzz"`) {
			t.Errorf("%s: status %q should say no op matches", k, m.status)
		}
	}
	press(t, m, "esc")
	press(t, m, "enter")
	if m.screen != tensorScreen {
		t.Error("once the filter is cleared, enter opens the selected op")
	}
}

var titleIndex = regexp.MustCompile(`^ #(\d+) (\S+) `)

// TestOneNumbering: the op list, the tensor view's title and the status line number an op the same way: by
// its execution index in the capture.
func TestOneNumbering(t *testing.T) {
	m := loaded(t, fake.Default(), 120, 40)
	for _, keys := range [][]string{nil, {"G"}, {"g"}, {"n", "n"}} {
		press(t, m, "esc")
		press(t, m, keys...)
		o := m.selected()
		var listNo string
		for _, l := range strings.Split(text(m), "\n") {
			if f := strings.Fields(strings.TrimPrefix(l, "│")); strings.HasPrefix(l, "│▌") && len(f) > 2 {
				listNo = f[1]
			}
		}
		press(t, m, "enter")
		g := titleIndex.FindStringSubmatch(strings.Split(text(m), "\n")[1])
		if g == nil || g[2] != o.Op {
			t.Fatalf("tensor title of %s: %q", o.Op, strings.Split(text(m), "\n")[1])
		}
		if want := fmt.Sprint(o.Index); listNo != want || g[1] != want || !strings.HasPrefix(m.status, "#"+want+" ") && len(keys) > 0 {
			t.Errorf("%s: list #%s, tensor title #%s, status %q; want all #%s", o.Op, listNo, g[1], m.status, want)
		}
	}
}

var ulpWord = regexp.MustCompile(`(?i)ulp`)

// TestIntegerOpShowsValues: an integer op (sampled tokens) is shown by its values and how many differ, never in
// ULPs: the op list, the detail panel, the tensor view's title, summary, legend and histogram, the bit view
// and the status line.
func TestIntegerOpShowsValues(t *testing.T) {
	m := loaded(t, fake.Default(), 120, 40)
	press(t, m, "G") // sample: i32, one token differs in seq 1
	o := m.selected()
	if o.Op != "sample" || o.DType != "i32" || o.Mismatched == 0 {
		t.Fatalf("the fake's last op should be a divergent i32 sample, got %s %s %d", o.Op, o.DType, o.Mismatched)
	}
	row := ""
	for _, l := range strings.Split(text(m), "\n") {
		if strings.HasPrefix(l, "│▌") {
			row = l[:strings.Index(l, "││")]
		}
	}
	if !strings.HasSuffix(row, oplist.Values(o.Mismatched)) || ulpWord.MatchString(row) {
		t.Errorf("op list row of an integer op: %q", row)
	}
	var right []string // the detail panel, right of the op list
	for _, l := range strings.Split(text(m), "\n") {
		if _, r, ok := strings.Cut(l, "││"); ok {
			right = append(right, r)
		}
	}
	detail := strings.Join(right, "\n")
	if ulpWord.MatchString(detail) || !strings.Contains(detail, fmt.Sprintf("%d of %d values", o.Mismatched, o.Elements)) ||
		!strings.Contains(detail, "values (all slices)") {
		t.Errorf("the detail panel of an integer op:\n%s", detail)
	}
	press(t, m, "enter", "m") // the slice holding the differing token, its element
	out := text(m)
	lines := strings.Split(out, "\n")
	body := strings.Join(lines[:len(lines)-1], "\n") // the last line is the key help
	if ulpWord.MatchString(body) {
		t.Errorf("the tensor view of an integer op speaks of ULPs:\n%s", out)
	}
	slice := fmt.Sprintf("%d of %d values differ", m.data.Diff, m.data.Pair.Rows*m.data.Pair.Cols)
	for _, want := range []string{"values ■equal ■differ", "values (slice)", slice, "2.08% · 1 value differs"} {
		if !strings.Contains(out, want) {
			t.Errorf("the tensor view of an integer op lacks %q:\n%s", want, out)
		}
	}
	r, c, _ := m.heat.Cursor()
	p := m.data.Pair
	a, b := m.data.Format.Decimal(m.data.Format.Bits(p.A, r*p.Cols+c)), m.data.Format.Decimal(m.data.Format.Bits(p.B, r*p.Cols+c))
	if a == b || !strings.Contains(out, "values differ  "+a+" ≠ "+b) {
		t.Errorf("the bit view shows both values (%s, %s) and that they differ:\n%s", a, b, out)
	}
	// a float op still speaks ULPs
	press(t, m, "[")
	if out := text(m); !strings.Contains(out, "ULP histogram") || !strings.Contains(out, "ULP ■0") {
		t.Errorf("a float op keeps its ULP histogram and legend:\n%s", out)
	}
}

var histRow = regexp.MustCompile(`(equal|differ|≥?[0-9]+[kMGTPE]?(–[0-9]+[kMGTPE]?)?) [█ ]* *[0-9]+ +[0-9]+\.[0-9]%│`)
var cutNumber = regexp.MustCompile(`[0-9]\.?…`)

// TestHistogramPercentagesWhole: at 80×24 and other sizes the histogram rows end in whole percentages; no
// number on screen is cut by an ellipsis.
func TestHistogramPercentagesWhole(t *testing.T) {
	for _, sz := range [][2]int{{80, 24}, {80, 30}, {90, 40}, {100, 30}, {110, 40}, {120, 40}, {160, 50}} {
		m := loaded(t, fake.Default(), sz[0], sz[1])
		for _, keys := range [][]string{nil, {"enter"}, {"G", "enter"}, {"G", "enter", "."}, {"enter", "}"}} {
			press(t, m, "esc", "f")
			press(t, m, keys...)
			checkFrame(t, m)
			out := text(m)
			if cutNumber.MatchString(out) {
				t.Errorf("%d×%d %v: a number is cut:\n%s", sz[0], sz[1], keys, out)
			}
			for _, l := range strings.Split(out, "\n") {
				if i := strings.Index(l, "%│"); i >= 0 && strings.Contains(l, "█") && !histRow.MatchString(l) {
					t.Errorf("%d×%d %v: histogram row %q", sz[0], sz[1], keys, l)
				}
			}
		}
	}
	// at 80×30 the tensor view has room for the histogram: it is there, whole
	m := loaded(t, fake.Default(), 80, 30)
	press(t, m, "enter")
	if n := len(histRow.FindAllString(text(m), -1)); n < 2 {
		t.Errorf("80×30 tensor view: %d whole histogram rows:\n%s", n, text(m))
	}
}

// TestTooSmall: below the minimum size the screen says so, in the terminal's own size, instead of a garbled
// layout; keys still work, and the layout comes back when the terminal grows.
func TestTooSmall(t *testing.T) {
	m := loaded(t, fake.Default(), 120, 40)
	for _, sz := range [][2]int{{79, 24}, {80, 23}, {60, 20}, {40, 10}, {30, 8}, {12, 3}} {
		for _, s := range []screen{overviewScreen, tensorScreen} {
			m.Update(tea.WindowSizeMsg{Width: sz[0], Height: sz[1]})
			run(t, m, m.setScreen(s))
			checkFrame(t, m)
			want := fmt.Sprintf("terminal too small: need at least %d×%d, have %d×%d", MinWidth, MinHeight, sz[0], sz[1])
			if got := strings.Join(strings.Fields(text(m)), " "); sz[0] >= 30 && !strings.Contains(got, want) {
				t.Errorf("%d×%d: screen %q, want %q", sz[0], sz[1], got, want)
			}
			if strings.Contains(text(m), "┌") {
				t.Errorf("%d×%d: a too small terminal shows a broken layout:\n%s", sz[0], sz[1], text(m))
			}
		}
	}
	m.Update(tea.WindowSizeMsg{Width: 60, Height: 20})
	if _, cmd := m.Update(keyMsg("q")); cmd == nil {
		t.Error("q quits even when the terminal is too small")
	}
	m.Update(tea.WindowSizeMsg{Width: MinWidth, Height: MinHeight})
	checkFrame(t, m)
	if strings.Contains(text(m), "too small") || !strings.Contains(text(m), "┌") {
		t.Errorf("at %d×%d the layout is drawn:\n%s", MinWidth, MinHeight, text(m))
	}
}
