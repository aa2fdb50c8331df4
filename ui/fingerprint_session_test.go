package ui

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	tea "charm.land/bubbletea/v2"

	"bitalign/capture"
	"bitalign/session"
)

// TestRealFingerprintSession: the fusion demo's trainer against its sampler written as fingerprints opens
// with the same first divergence; the tensor view of a located-only op says why it has no heatmap instead of
// drawing one, at every step through the ops, and the frame stays whole.
func TestRealFingerprintSession(t *testing.T) {
	in := realDemo(t)
	c, err := capture.Open(in.B)
	if err != nil {
		t.Fatal(err)
	}
	fp := filepath.Join(t.TempDir(), "sampler.fp.arrow")
	_, err = session.WriteFingerprints(context.Background(), c, fp, session.FingerprintOptions{})
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	in.B, in.Checkpoint = fp, ""
	m := New(context.Background(), loaderOf(in), "fingerprints")
	m.Update(tea.WindowSizeMsg{Width: 120, Height: 40})
	run(t, m, m.Init())
	if m.loadErr != nil {
		t.Fatal(m.loadErr)
	}
	const want = "layers.2.mlp_norm"
	if m.rep.First == nil || m.rep.First.Op != want || selectedOp(m) != want {
		t.Fatalf("first divergence %+v, selected %q, want %s", m.rep.First, selectedOp(m), want)
	}
	if o := m.selected(); o == nil || !o.Located {
		t.Fatalf("selected op %+v is not located only", o)
	}
	checkFrame(t, m)
	press(t, m, "enter")
	checkFrame(t, m)
	if m.data != nil || m.pairErr == nil || !strings.Contains(m.pairErr.Error(), "located only: B holds fingerprints") {
		t.Fatalf("tensor view of a located-only op: data %v, error %v", m.data != nil, m.pairErr)
	}
	if !strings.Contains(text(m), "located only") {
		t.Errorf("the screen does not say the op is located only:\n%s", text(m))
	}
	for i := 0; i < 5; i++ {
		press(t, m, "]")
		checkFrame(t, m)
	}
	if c, ok := m.src.(interface{ Close() error }); ok {
		c.Close()
	}
}
