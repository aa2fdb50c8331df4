package ui

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/colorprofile"
	"github.com/charmbracelet/x/ansi"

	"bitalign/session/view"
	"bitalign/ui/internal/fake"
)

// checkFrame fails when the frame is not exactly w×h cells: the layout must never wrap or garble.
func checkFrame(t *testing.T, m *Model) {
	t.Helper()
	lines := strings.Split(m.Render(), "\n")
	if len(lines) != m.h {
		t.Fatalf("%d×%d: frame has %d lines", m.w, m.h, len(lines))
	}
	for i, l := range lines {
		if w := ansi.StringWidth(l); w != m.w {
			t.Fatalf("%d×%d: line %d is %d cells wide: %q", m.w, m.h, i, w, ansi.Strip(l))
		}
	}
}

func selectedOp(m *Model) string {
	if o := m.selected(); o != nil {
		return o.Op
	}
	return ""
}

func TestOverviewGolden(t *testing.T) {
	m := loaded(t, fake.Default(), 120, 40)
	checkFrame(t, m)
	goldenFrame(t, "overview-120x40", text(m))
	if got := selectedOp(m); got != "layers.2.mlp.down_proj" {
		t.Errorf("after loading, selected %q, want the first divergence layers.2.mlp.down_proj", got)
	}
}

func TestResize(t *testing.T) {
	m := loaded(t, fake.Default(), 120, 40)
	for _, sz := range [][2]int{{80, 24}, {100, 30}, {200, 60}, {60, 20}, {30, 8}, {81, 25}} {
		for _, s := range []screen{overviewScreen, tensorScreen} {
			m.Update(tea.WindowSizeMsg{Width: sz[0], Height: sz[1]})
			run(t, m, m.setScreen(s))
			checkFrame(t, m)
		}
	}
	m.Update(tea.WindowSizeMsg{Width: 80, Height: 24})
	run(t, m, m.setScreen(overviewScreen))
	goldenFrame(t, "overview-80x24", text(m))
	press(t, m, "enter")
	goldenFrame(t, "tensor-80x24", text(m))
	// the cursor keeps its element across a resize
	press(t, m, "m")
	r0, c0, _ := m.heat.Cursor()
	m.Update(tea.WindowSizeMsg{Width: 200, Height: 60})
	if r, c, _ := m.heat.Cursor(); r != r0 || c != c0 {
		t.Errorf("resize moved the selected element from (%d,%d) to (%d,%d)", r0, c0, r, c)
	}
}

func TestFilter(t *testing.T) {
	m := loaded(t, fake.Default(), 100, 30)
	press(t, m, "/")
	typeText(t, m, "down")
	if n := m.list.Visible(); n != 4 {
		t.Errorf("filter %q shows %d ops, want 4 (one down_proj per layer)", "down", n)
	}
	press(t, m, "enter")
	checkFrame(t, m)
	goldenFrame(t, "filter-down", text(m))
	press(t, m, "j", "j")
	if got := selectedOp(m); got != "layers.3.mlp.down_proj" {
		t.Errorf("j j in the filtered list selected %q", got)
	}
	// a jump to an op the filter hides clears the filter
	press(t, m, "f")
	press(t, m, "[")
	if m.list.Filter() != "" || selectedOp(m) != "layers.2.mlp.act" {
		t.Errorf("[ from a filtered list: filter %q, selected %q", m.list.Filter(), selectedOp(m))
	}
	press(t, m, "/")
	typeText(t, m, "zzz")
	if m.list.Visible() != 0 || !strings.Contains(text(m), `no op matches "zzz"`) {
		t.Error("a filter matching nothing should say so")
	}
	press(t, m, "esc")
	if m.list.Filter() != "" || m.list.Visible() != len(m.rep.Ops) {
		t.Error("esc should clear the filter")
	}
}

// TestStepping: a table of key sequences from the first divergence and the op they land on.
func TestStepping(t *testing.T) {
	tests := []struct {
		keys []string
		want string
	}{
		{[]string{"]"}, "layers.2.mlp_residual"},
		{[]string{"[", "["}, "layers.2.mlp.up_proj"},
		{[]string{"}"}, "layers.3.mlp.down_proj"},
		{[]string{"{", "{"}, "layers.0.mlp.down_proj"},
		{[]string{"{", "{", "{"}, "embed"},
		{[]string{"}", "}"}, "final_norm"},
		{[]string{"}", "}", "{"}, "layers.3.mlp_residual"},
		{[]string{"n"}, "layers.2.mlp_residual"},
		{[]string{"n", "n", "N"}, "layers.2.mlp_residual"},
		{[]string{"N"}, "layers.2.mlp.down_proj"}, // nothing divergent before the first
		{[]string{"g", "f"}, "layers.2.mlp.down_proj"},
		{[]string{"G"}, "sample"},
		{[]string{"g", "j", "j"}, "layers.0.attn_norm"},
	}
	for _, screenKeys := range [][]string{nil, {"enter"}} {
		for _, tt := range tests {
			if len(screenKeys) > 0 && tt.keys[len(tt.keys)-1] == "j" {
				continue // j moves the heatmap cursor in the tensor view
			}
			m := loaded(t, fake.Default(), 120, 40)
			press(t, m, screenKeys...)
			press(t, m, tt.keys...)
			if got := selectedOp(m); got != tt.want {
				t.Errorf("screen keys %v, keys %v: at %q, want %q", screenKeys, tt.keys, got, tt.want)
			}
		}
	}
}

func TestSteppingKeepsToken(t *testing.T) {
	m := loaded(t, fake.Default(), 120, 40)
	press(t, m, "enter")
	m.heat.SetCursorCell(0, 0)
	press(t, m, "j", "j", "j", "j", "j", "l", "l")
	r0, c0, _ := m.heat.Cursor()
	if cr, cc, _, _, _, _ := m.heat.CursorCell(); cr != 5 || cc != 2 {
		t.Fatalf("5×j 2×l from (0,0): cell (%d,%d)", cr, cc)
	}
	press(t, m, "]")
	if selectedOp(m) != "layers.2.mlp_residual" {
		t.Fatalf("] went to %s", selectedOp(m))
	}
	r, c, ok := m.heat.Cursor()
	if !ok || r != r0 || c != c0 {
		t.Errorf("] moved the element from (%d,%d) to (%d,%d)", r0, c0, r, c)
	}
	// to an op with fewer features (k_proj has 128): the token stays, the feature is clamped
	press(t, m, "{")
	press(t, m, "[", "[", "[", "[", "[", "[", "[", "[", "[", "[", "[", "[")
	if selectedOp(m) != "layers.1.attn.k_proj" {
		t.Fatalf("at %s", selectedOp(m))
	}
	if r, _, _ := m.heat.Cursor(); r != r0 {
		t.Errorf("token row %d after stepping, want %d", r, r0)
	}
	press(t, m, "m")
	goldenFrame(t, "tensor-k_proj", text(m))
}

func TestBitViewGolden(t *testing.T) {
	m := loaded(t, fake.Default(), 120, 40)
	press(t, m, "enter")
	checkFrame(t, m)
	goldenFrame(t, "tensor-first-divergence", text(m))
	press(t, m, "}", "m")
	goldenFrame(t, "tensor-layer3-max", text(m))
	o := m.selected()
	r, c, _ := m.heat.Cursor()
	if o.MaxAt == nil || int64(r) != o.MaxAt.Pos || int64(c) != o.MaxAt.Feature || !strings.Contains(text(m), "227 ULP") {
		t.Errorf("m: cursor (%d,%d), op max at %+v; the bit view should show the op's max ULP", r, c, o.MaxAt)
	}
	// f32 logits and i32 tokens render too
	press(t, m, "G", "[", "[")
	if selectedOp(m) != "logits" || !strings.Contains(text(m), "f32") {
		t.Errorf("logits bit view:\n%s", text(m))
	}
	press(t, m, "G")
	if !strings.Contains(text(m), "i32") {
		t.Errorf("sample bit view:\n%s", text(m))
	}
	press(t, m, ".")
	if m.seq.Seq != 1 {
		t.Errorf(". should show seq 1, at %d", m.seq.Seq)
	}
	press(t, m, ".")
	if m.seq.Seq != 0 {
		t.Errorf(". should wrap to seq 0, at %d", m.seq.Seq)
	}
}

func TestLoadError(t *testing.T) {
	m := New(context.Background(), fakeLoader(nil, errors.New("capture: trainer/rank0.arrow: not an Arrow IPC file (bad magic)")), "x ↔ y")
	m.Update(tea.WindowSizeMsg{Width: 80, Height: 24})
	run(t, m, m.Init())
	checkFrame(t, m)
	goldenFrame(t, "load-error", text(m))
	press(t, m, "enter", "j", "r", "e", "/")
	if m.prompt != noPrompt || m.screen != overviewScreen {
		t.Error("keys other than help and quit must do nothing without a session")
	}
	if other := press(t, m, "q"); !hasQuit(other) {
		t.Error("q must quit after a load error")
	}
}

func TestPairError(t *testing.T) {
	cfg := fake.Default()
	cfg.PairErrOp = "layers.2.mlp.down_proj"
	m := loaded(t, cfg, 100, 30)
	press(t, m, "enter")
	checkFrame(t, m)
	goldenFrame(t, "pair-error", text(m))
	if m.statusKind != statusErr {
		t.Error("a pair that cannot be read should be an error in the status line")
	}
	press(t, m, "]")
	if m.pairErr != nil || m.data == nil {
		t.Errorf("stepping away from the broken tensor should show the next one: %v", m.pairErr)
	}
}

func TestReplay(t *testing.T) {
	m := loaded(t, fake.Default(), 120, 40)
	press(t, m, "enter", "r")
	checkFrame(t, m)
	goldenFrame(t, "replay-local", text(m))
	rs := m.replays[m.curKey()]
	if rs == nil || rs.Result == nil || !rs.Result.Local || !strings.Contains(m.status, "local") {
		t.Fatalf("replay of the first divergence: %+v, status %q", rs, m.status)
	}
	press(t, m, "]", "r")
	if r := m.replays[m.curKey()].Result; r == nil || r.Local || r.InputsIdentical {
		t.Errorf("replay downstream of the fault should be propagated: %+v", r)
	}
	cfg := fake.Default()
	cfg.NoCheckpoint = true
	m = loaded(t, cfg, 100, 30)
	press(t, m, "r")
	if m.statusKind != statusErr || !strings.Contains(m.status, "checkpoint") {
		t.Errorf("replay without a checkpoint: status %q", m.status)
	}
	checkFrame(t, m)
}

func TestExport(t *testing.T) {
	dir := t.TempDir()
	m := loaded(t, fake.Default(), 100, 30)
	path := filepath.Join(dir, "report.json")
	export := func(p string) {
		press(t, m, "e", "ctrl+u")
		typeText(t, m, p)
		press(t, m, "enter")
	}
	export(path)
	if m.statusKind != statusOK || !strings.Contains(m.status, "report.json") {
		t.Fatalf("export: status %q", m.status)
	}
	b, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(b), `"Ops"`) {
		t.Fatalf("export wrote %q, %v", b, err)
	}
	// again: asks before overwriting; n keeps the file
	os.WriteFile(path, []byte("mine"), 0o644)
	export(path)
	if m.prompt != confirmPrompt {
		t.Fatal("exporting over an existing file must ask first")
	}
	goldenFrame(t, "export-confirm", strings.ReplaceAll(text(m), dir, "DIR"))
	press(t, m, "n")
	if b, _ := os.ReadFile(path); string(b) != "mine" {
		t.Error("n must leave the file alone")
	}
	export(path)
	press(t, m, "y")
	if b, _ := os.ReadFile(path); !strings.Contains(string(b), `"Ops"`) {
		t.Error("y must overwrite")
	}
	export(filepath.Join(dir, "report.xml"))
	if m.statusKind != statusErr || !strings.Contains(m.status, "unknown extension") {
		t.Errorf("bad extension: status %q", m.status)
	}
	export(filepath.Join(dir, "no", "such", "dir.md"))
	if m.statusKind != statusErr {
		t.Errorf("unwritable path: status %q", m.status)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".bitalign-export") {
			t.Errorf("temp file %s left behind", e.Name())
		}
	}
	press(t, m, "e", "esc")
	if m.prompt != noPrompt {
		t.Error("esc must cancel the export prompt")
	}
}

func hasQuit(msgs []tea.Msg) bool {
	for _, m := range msgs {
		if _, ok := m.(tea.QuitMsg); ok {
			return true
		}
	}
	return false
}

func TestQuit(t *testing.T) {
	for _, keys := range [][]string{{"q"}, {"ctrl+c"}, {"enter", "q"}, {"?", "q"}, {"/", "ctrl+c"}, {"e", "ctrl+c"}} {
		m := loaded(t, fake.Default(), 80, 24)
		if other := press(t, m, keys...); !hasQuit(other) {
			t.Errorf("%v did not quit", keys)
		}
	}
	// q typed into the filter is text, not quit
	m := loaded(t, fake.Default(), 80, 24)
	if other := press(t, m, "/", "q"); hasQuit(other) || m.list.Filter() != "q" {
		t.Errorf("q in the filter prompt: filter %q", m.list.Filter())
	}
}

func TestHelp(t *testing.T) {
	m := loaded(t, fake.Default(), 120, 40)
	press(t, m, "?")
	checkFrame(t, m)
	goldenFrame(t, "help", text(m))
	press(t, m, "j") // ignored while help is open
	press(t, m, "esc")
	if m.showHelp || selectedOp(m) != "layers.2.mlp.down_proj" {
		t.Error("esc closes help and keys pressed meanwhile do nothing")
	}
	m.Update(tea.WindowSizeMsg{Width: 80, Height: 24})
	press(t, m, "?")
	checkFrame(t, m)
	press(t, m, "pgdown", "pgdown")
	if !strings.Contains(text(m), "toggle help") {
		t.Error("help at 80×24 must scroll to show every key")
	}
}

func TestMouse(t *testing.T) {
	m := loaded(t, fake.Default(), 120, 40)
	l := m.layout()
	click := func(x, y int) {
		_, cmd := m.Update(tea.MouseClickMsg{X: x, Y: y, Button: tea.MouseLeft})
		run(t, m, cmd)
	}
	// the op list's first row (below its header)
	want := m.list.RowAt(1)
	click(l.list.x+5, l.list.y+1)
	if m.sel != want {
		t.Fatalf("click on the first list row selected %d, want %d", m.sel, want)
	}
	click(l.list.x+5, l.list.y+1)
	if m.screen != tensorScreen {
		t.Fatal("a second click on the selected op opens it")
	}
	l = m.layout()
	click(l.heat.x+6+3, l.heat.y+1+2)
	cr, cc, _, _, _, _ := m.heat.CursorCell()
	if wr, wc, ok := m.heat.CellAt(6+3, 1+2); !ok || cr != wr || cc != wc {
		t.Errorf("click on a heatmap cell: cursor at cell (%d,%d), want (%d,%d)", cr, cc, wr, wc)
	}
	_, cmd := m.Update(tea.MouseWheelMsg{Button: tea.MouseWheelDown})
	run(t, m, cmd)
	if cr2, _, _, _, _, _ := m.heat.CursorCell(); cr2 != cr+1 {
		t.Errorf("wheel down moved the cursor from row %d to %d", cr, cr2)
	}
	press(t, m, "esc")
	before := m.sel
	m.Update(tea.MouseWheelMsg{Button: tea.MouseWheelDown})
	if m.sel != before+3 {
		t.Errorf("wheel in the op list: %d → %d, want +3", before, m.sel)
	}
	// a click on the sparkline selects the op under it
	l = m.layout()
	click(l.spark.x, l.spark.y)
	if m.sel != 0 {
		t.Errorf("click on the sparkline's first cell selected op %d", m.sel)
	}
}

func TestNoColour(t *testing.T) {
	m := loaded(t, fake.Default(), 120, 40)
	m.Update(tea.ColorProfileMsg{Profile: colorprofile.Ascii})
	press(t, m, "enter")
	out := text(m)
	if strings.Contains(out, "▀") || !strings.ContainsAny(out, "░▒▓") {
		t.Error("without colour the heatmap must use shade glyphs, not coloured half blocks")
	}
	if !strings.Contains(out, "^") {
		t.Error("differing bits must be marked with ^ on a colourless terminal")
	}
	checkFrame(t, m)
	m.Update(tea.ColorProfileMsg{Profile: colorprofile.ANSI256})
	if !strings.Contains(text(m), "▀") {
		t.Error("256 colours: half blocks again")
	}
}

func TestKeysWhileLoading(t *testing.T) {
	release := make(chan struct{})
	load := func(ctx context.Context, progress func(view.Progress)) (view.Source, error) {
		progress(view.Progress{Stage: "diffing", Done: 3, Total: 4})
		<-release
		return fake.New(fake.Default()), nil
	}
	m := New(context.Background(), load, "big")
	m.Update(tea.WindowSizeMsg{Width: 80, Height: 24})
	cmd := m.Init()
	// the first message is the progress report
	_, next := m.Update(cmd())
	if m.prog.Done != 3 || !strings.Contains(text(m), "75%") {
		t.Errorf("progress not shown:\n%s", text(m))
	}
	checkFrame(t, m)
	goldenFrame(t, "loading", text(m))
	press(t, m, "?")
	if !m.showHelp {
		t.Error("? must work while loading")
	}
	press(t, m, "esc", "j")
	if !strings.Contains(m.status, "loading") {
		t.Errorf("status while loading: %q", m.status)
	}
	close(release)
	run(t, m, next)
	if m.rep == nil {
		t.Fatal("not loaded")
	}
}

// TestFakeReportConsistent: the fake's report agrees with its tensors, so the goldens test real rendering.
func TestFakeReportConsistent(t *testing.T) {
	src := fake.New(fake.Default())
	for _, o := range src.Report().Ops {
		if o.Status == view.MissingB {
			continue
		}
		var mism int64
		for _, s := range o.Seqs {
			p, err := src.Pair(context.Background(), view.Key{Op: o.Op, Role: o.Role, Step: s.Step, Seq: s.Seq})
			if err != nil {
				t.Fatal(err)
			}
			d, err := prepare(p)
			if err != nil {
				t.Fatal(err)
			}
			mism += d.Diff
		}
		if mism != o.Mismatched {
			t.Errorf("%s: report says %d mismatched, tensors have %d", o.Op, o.Mismatched, mism)
		}
	}
}

// emptySource is a session with no ops at all.
type emptySource struct{ *fake.Source }

func (emptySource) Report() *view.Report {
	return &view.Report{A: view.CaptureInfo{Side: "trainer"}, B: view.CaptureInfo{Side: "sampler"}, Identical: true}
}

func TestEmptyReport(t *testing.T) {
	m := New(context.Background(), fakeLoader(emptySource{fake.New(fake.Default())}, nil), "empty")
	m.Update(tea.WindowSizeMsg{Width: 80, Height: 24})
	run(t, m, m.Init())
	for _, k := range []string{"j", "enter", "]", "}", "f", "n", "N", "G", "g", "m", ".", "r", "tab", "esc", "/", "x", "enter"} {
		press(t, m, k)
		checkFrame(t, m)
	}
	if !strings.Contains(text(m), "bitwise identical") {
		t.Errorf("empty report:\n%s", text(m))
	}
}

func TestMaxKeySliceThenOp(t *testing.T) {
	m := loaded(t, fake.Default(), 120, 40)
	press(t, m, "enter") // the first divergence, on the slice holding its op's max
	o := m.selected()
	if o.MaxAt == nil {
		t.Fatal("the first divergent op has no max")
	}
	start := m.seq
	press(t, m, ".") // another slice
	if m.seq == start {
		t.Skip("the fake op has one slice only")
	}
	press(t, m, "m")
	if r, c, _ := m.heat.Cursor(); r*m.data.Pair.Cols+c != m.data.MaxAt || m.seq == start {
		t.Fatalf("first m: cursor (%d,%d) in %+v, want the slice's max %d", r, c, m.seq, m.data.MaxAt)
	}
	press(t, m, "m")
	if m.seq.Step != o.MaxAt.Step || m.seq.Seq != o.MaxAt.Seq {
		t.Fatalf("second m: slice %+v, want the op's max slice %+v", m.seq, *o.MaxAt)
	}
	if r, c, _ := m.heat.Cursor(); int64(r) != o.MaxAt.Pos-m.data.Pair.Pos0 || int64(c) != o.MaxAt.Feature {
		t.Errorf("second m: cursor (%d,%d), want the op's max at pos %d feature %d", r, c, o.MaxAt.Pos, o.MaxAt.Feature)
	}
}

// TestResizeBigTensor: with a 1024×1024 tensor open, a resize returns at once and re-bins in the background;
// the frame says so meanwhile and is whole, and the map is back once the command's message is handled.
func TestResizeBigTensor(t *testing.T) {
	m := New(context.Background(), fakeLoader(fake.Big(1024, 1024), nil), "big")
	m.Update(tea.WindowSizeMsg{Width: 120, Height: 40})
	run(t, m, m.Init())
	press(t, m, "enter")
	if m.data == nil || m.data.Pair.Rows != 1024 || m.heat.Grid() == nil {
		t.Fatal("the 1024×1024 tensor is not shown")
	}
	oldCC := m.heat.Grid().CC
	_, cmd := m.Update(tea.WindowSizeMsg{Width: 150, Height: 45})
	if cmd == nil || !strings.Contains(text(m), "re-binning 1024×1024") {
		t.Fatalf("resize should re-bin in the background:\n%s", text(m))
	}
	checkFrame(t, m)
	run(t, m, cmd)
	if strings.Contains(text(m), "re-binning") || m.heat.Grid() == nil || m.heat.Grid().CC != oldCC+30 {
		t.Errorf("the map did not come back for 150 columns:\n%s", text(m))
	}
	checkFrame(t, m)
}
