package ui

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	tea "charm.land/bubbletea/v2"

	"bitalign/internal/testgpu"
	"bitalign/session"
	"bitalign/session/view"
)

// The tests in this file drive the UI over the real session core (session.Load on the engine's demo); the
// UI's production code never imports the core beyond session/view.

var (
	demoOnce sync.Once
	demoDir  string
	demoErr  error
)

// realDemo generates the engine's demo (fusion fault in layer 2) once for the package's tests.
func realDemo(t *testing.T) session.Inputs {
	var in session.Inputs
	demoOnce.Do(func() {
		demoDir, demoErr = os.MkdirTemp("", "bitalign-ui-demo-")
	})
	if demoErr == nil {
		in, demoErr = session.DemoInputs(context.Background(), filepath.Join(demoDir, "fusion"), "fusion", 2, nil)
	}
	if demoErr != nil {
		t.Fatalf("demo: %v", demoErr)
	}
	return in
}

// loaderOf is the loader the bitalign command gives the UI: session.Load, then its view.Source.
func loaderOf(in session.Inputs) view.Loader {
	return func(ctx context.Context, progress func(view.Progress)) (view.Source, error) {
		l, err := session.Load(ctx, in, progress)
		if err != nil {
			return nil, err
		}
		return l.Source(), nil
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if demoDir != "" {
		os.RemoveAll(demoDir)
	}
	os.Exit(code)
}

// TestRealSession drives the UI over the real session core on the engine's demo: the verdict names the
// fault's documented first divergent op, replay calls it local, and the three report formats export.
func TestRealSession(t *testing.T) { realSession(t, "cpu", "CPU") }

// TestRealSessionCUDA is the same session with replay on the GPU (the demo captures come from the CPU engine;
// the verdicts must not change). It skips without a GPU, and fails instead with BITALIGN_REQUIRE_GPU=1, as
// scripts/gpu.sh runs it on the GPU machine.
func TestRealSessionCUDA(t *testing.T) {
	in := realDemo(t)
	in.Device = "cuda"
	if l, err := session.Load(context.Background(), in, nil); err != nil {
		testgpu.SkipOrFail(t, err, "no GPU, so replay in the UI is not run on one here (not counted as passed): %v", err)
	} else {
		t.Logf("GPU: %s", l.BackendName)
		l.Close()
	}
	realSession(t, "cuda", "GPU cuda:")
}

func realSession(t *testing.T, device, backend string) {
	in := realDemo(t)
	in.Device = device
	m := New(context.Background(), loaderOf(in), "demo")
	m.Update(tea.WindowSizeMsg{Width: 120, Height: 40})
	run(t, m, m.Init())
	if m.loadErr != nil {
		t.Fatal(m.loadErr)
	}
	const want = "layers.2.mlp_norm" // the fusion fault's first divergent op in layer 2 (engine.Faults)
	if m.rep.First == nil || m.rep.First.Op != want || selectedOp(m) != want {
		t.Fatalf("first divergence %+v, selected %q; the fusion fault starts at %s", m.rep.First, selectedOp(m), want)
	}
	checkFrame(t, m)
	if !strings.Contains(text(m), "first divergence: "+want) {
		t.Errorf("verdict line:\n%s", text(m))
	}
	press(t, m, "enter")
	checkFrame(t, m)
	if m.data == nil || m.data.Diff == 0 {
		t.Fatalf("tensor view of %s shows no mismatch (pair error: %v)", want, m.pairErr)
	}
	press(t, m, "r")
	rs := m.replays[m.curKey()]
	if rs == nil || rs.Err != nil || rs.Result == nil {
		t.Fatalf("replay: %+v", rs)
	}
	if !rs.Result.Local || !strings.HasPrefix(rs.Result.Backend, backend) || !strings.Contains(text(m), "LOCAL") {
		t.Errorf("replay of the fault's op: %+v\n%s", rs.Result, text(m))
	}
	if !rs.Result.FromA.Reproduces || rs.Result.FromB.Reproduces {
		t.Errorf("the engine should reproduce the trainer, not the fused sampler: %+v", rs.Result)
	}
	if !strings.Contains(text(m), "replay ← A") {
		t.Error("the bit view shows the replayed element")
	}
	press(t, m, "]", "r") // downstream: propagated
	if r := m.replays[m.curKey()]; r == nil || r.Result == nil || r.Result.InputsIdentical {
		t.Errorf("replay after the fault: %+v", r)
	}
	out := t.TempDir()
	for _, name := range []string{"r.md", "r.json", "r.html"} {
		press(t, m, "e", "ctrl+u")
		typeText(t, m, filepath.Join(out, name))
		press(t, m, "enter")
		if m.statusKind != statusOK {
			t.Errorf("export %s: %s", name, m.status)
		}
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil || !strings.Contains(string(b), want) {
			t.Errorf("%s does not name %s (%v)", name, want, err)
		}
	}
	if c, ok := m.src.(interface{ Close() error }); ok {
		c.Close()
	}
}

// TestLoadErrorShown: a loader's error is shown in the UI (the bitalign command loads in the foreground, so
// this is what a front end whose loader fails late sees).
func TestLoadErrorShown(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.arrow")
	os.WriteFile(bad, []byte("not arrow"), 0o644)
	m := New(context.Background(), loaderOf(session.Inputs{A: bad, B: bad, Device: "cpu"}), "bad")
	m.Update(tea.WindowSizeMsg{Width: 80, Height: 24})
	run(t, m, m.Init())
	if m.loadErr == nil || !strings.Contains(text(m), "could not open the session") || !strings.Contains(m.status, "bad.arrow") {
		t.Errorf("unreadable capture: err %v\n%s", m.loadErr, text(m))
	}
	checkFrame(t, m)
}

// TestRealSessionAudit: with a checkpoint the UI audits the captures in the background; the op list shows each
// side's local error, and s goes to the first suspect (the stale-weights fault's sampler, in layer 1) with the
// tensor view's cursor on the element where its error is largest.
func TestRealSessionAudit(t *testing.T) {
	in, err := session.DemoInputs(context.Background(), filepath.Join(t.TempDir(), "stale"), "stale-weights", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	in.Device = "cpu"
	m := New(context.Background(), loaderOf(in), "demo")
	m.Update(tea.WindowSizeMsg{Width: 160, Height: 40})
	run(t, m, m.Init())
	if m.loadErr != nil || m.audit == nil {
		t.Fatalf("load %v, audit %v", m.loadErr, m.audit)
	}
	if len(m.audit.Suspects) == 0 || !strings.Contains(m.status, "audit: ") {
		t.Fatalf("no suspects (status %q)", m.status)
	}
	screen := text(m)
	if !strings.Contains(screen, "local A / B") || !strings.Contains(screen, "!") {
		t.Errorf("the op list does not show the local errors:\n%s", screen)
	}
	press(t, m, "s")
	s := m.audit.Suspects[0]
	if selectedOp(m) != s.Op || m.seq != (view.SeqKey{Step: s.At.Step, Seq: s.At.Seq}) || !strings.HasPrefix(s.Op, "layers.1.") ||
		s.SideName != "sampler" {
		t.Fatalf("s selected %q seq %+v; the first suspect is %+v", selectedOp(m), m.seq, s)
	}
	if !strings.Contains(m.status, "suspect 1/") {
		t.Errorf("status %q", m.status)
	}
	press(t, m, "enter")
	r, c, ok := m.heat.Cursor()
	if m.data == nil || !ok || int64(r)+m.data.Pair.Pos0 != s.At.Pos || int64(c) != s.At.Feature {
		t.Errorf("cursor at row %d col %d (pos0 %d), want pos %d feature %d", r, c, m.data.Pair.Pos0, s.At.Pos, s.At.Feature)
	}
	if n := len(m.audit.Suspects); n > 1 {
		press(t, m, "s")
		if selectedOp(m) != m.audit.Suspects[1].Op {
			t.Errorf("second s: %q, want %q", selectedOp(m), m.audit.Suspects[1].Op)
		}
		press(t, m, "S")
		if selectedOp(m) != s.Op {
			t.Errorf("S: %q, want %q", selectedOp(m), s.Op)
		}
	}
	if c, ok := m.src.(interface{ Close() error }); ok {
		c.Close()
	}
}

// TestRealSessionVerdictFirst: `bitalign open`'s path (session.LoadVerdict) on the engine's demo: the first
// screen is the verdict (the fault's first divergent op selected, the other ops' statistics pending, the
// status line saying what still runs), and once the complete report arrives (completeMsg) the overview and
// the sequences view are those of a session loaded whole (session.Load).
func TestRealSessionVerdictFirst(t *testing.T) {
	in := realDemo(t)
	in.Device = "cpu"
	in.Checkpoint = "" // no audit: the status line is the verdict's, then the completion's
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var prog *session.Progressive
	m := New(ctx, func(ctx context.Context, progress func(view.Progress)) (view.Source, error) {
		p, err := session.LoadVerdict(ctx, in, progress)
		if err != nil {
			return nil, err
		}
		prog = p
		return p.Source(), nil
	}, "demo")
	defer func() { prog.Close() }()
	m.Update(tea.WindowSizeMsg{Width: 120, Height: 40})
	cmd := m.Init()
	var next tea.Cmd
	for next == nil {
		switch msg := cmd().(type) {
		case loadedMsg:
			_, next = m.Update(msg)
		default:
			_, cmd = m.Update(msg)
		}
	}
	if m.loadErr != nil {
		t.Fatal(m.loadErr)
	}
	const want = "layers.2.mlp_norm"
	before := text(m)
	if m.rep.Pending == "" || m.rep.First == nil || m.rep.First.Op != want || selectedOp(m) != want {
		t.Fatalf("verdict: pending %q, first %+v, selected %q", m.rep.Pending, m.rep.First, selectedOp(m))
	}
	for _, s := range []string{"first divergence: " + want, "still computing: every op's statistics", "…", "⟳"} {
		if !strings.Contains(before, s) {
			t.Errorf("the verdict's screen lacks %q:\n%s", s, before)
		}
	}
	var complete *completeMsg
	for _, msg := range drive(m, next) {
		if c, ok := msg.(completeMsg); ok {
			complete = &c
		}
	}
	if complete == nil {
		t.Fatal("no completeMsg")
	}
	m.Update(*complete)
	if m.rep.Pending != "" || m.rep.RL == nil || selectedOp(m) != want {
		t.Fatalf("complete: pending %q, RL %v, selected %q", m.rep.Pending, m.rep.RL != nil, selectedOp(m))
	}
	whole := New(context.Background(), loaderOf(in), "demo")
	whole.Update(tea.WindowSizeMsg{Width: 120, Height: 40})
	run(t, whole, whole.Init())
	defer whole.src.(interface{ Close() error }).Close()
	same := func(what string) {
		t.Helper()
		got, exp := strings.Split(text(m), "\n"), strings.Split(text(whole), "\n")
		if len(got) != len(exp) {
			t.Fatalf("%s: %d lines, whole session's %d", what, len(got), len(exp))
		}
		for i := range got {
			if i != len(got)-2 && got[i] != exp[i] { // the status line says how each got there
				t.Errorf("%s line %d:\n%s\nwhole session's:\n%s", what, i, got[i], exp[i])
			}
		}
	}
	same("overview")
	if got := text(m); got == before || !strings.Contains(got, "complete: every op's statistics are in") || strings.Contains(got, "⟳") {
		t.Errorf("the complete screen:\n%s", got)
	}
	press(t, m, "t")
	press(t, whole, "t")
	same("sequences view")
}
