package ui

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	tea "charm.land/bubbletea/v2"

	"bitalign/session"
)

// TestRealSequences drives the sequences view over the real core on the fusion demo: t opens it, the verdict
// line carries the logprob headline, every sequence is listed worst first, and enter on the worst goes to its
// first divergent op (layers.2.mlp_norm, the fault's op) in the tensor view, on that sequence.
func TestRealSequences(t *testing.T) {
	in := realDemo(t)
	in.Device = "cpu"
	m := New(context.Background(), loaderOf(in), "demo")
	m.Update(tea.WindowSizeMsg{Width: 80, Height: 24})
	run(t, m, m.Init())
	if m.loadErr != nil || m.rep.RL == nil {
		t.Fatalf("load: %v, logprobs %v", m.loadErr, m.rep != nil && m.rep.RL != nil)
	}
	m.Update(tea.WindowSizeMsg{Width: 200, Height: 24})
	if !strings.Contains(text(m), "max 2 ulp · logprobs: 8 of 8 sequences differ") {
		t.Errorf("the verdict line lacks the logprob headline:\n%s", text(m))
	}
	m.Update(tea.WindowSizeMsg{Width: 80, Height: 24})
	press(t, m, "t")
	if m.screen != sequencesScreen {
		t.Fatal("t does not open the sequences view")
	}
	checkFrame(t, m)
	goldenFrame(t, "sequences-80x24", text(m))
	worst := m.rep.RL.Seqs[0].Seq
	msgs := press(t, m, "enter")
	_ = msgs
	if m.screen != tensorScreen || selectedOp(m) != "layers.2.mlp_norm" || m.seq.Seq != worst {
		t.Fatalf("enter on seq %d: screen %d, op %q, seq %d; want the tensor view of layers.2.mlp_norm on it\n%s", worst, m.screen, selectedOp(m), m.seq.Seq, text(m))
	}
	if m.data == nil || m.data.Pair.Key.Seq != worst {
		t.Errorf("tensor view shows %+v", m.data)
	}
	press(t, m, "t", "esc")
	if m.screen != overviewScreen {
		t.Errorf("esc from the sequences view: screen %d", m.screen)
	}
	if c, ok := m.src.(interface{ Close() error }); ok {
		c.Close()
	}
}

// TestRealSequencesTables: a logprob-only pair (tables from write_logprobs and pyarrow, testdata/logprobs)
// opens on the sequences view; enter says why there is no op to go to.
func TestRealSequencesTables(t *testing.T) {
	dir := filepath.Join("..", "testdata", "logprobs")
	if _, err := os.Stat(filepath.Join(dir, "trainer.parquet")); err != nil {
		t.Fatal(err)
	}
	in := session.Inputs{A: filepath.Join(dir, "trainer.parquet"), B: filepath.Join(dir, "sampler.parquet"), Device: "cpu"}
	in.RL.Columns.Seq, in.RL.Columns.Pos, in.RL.Columns.Logprob = "sample_id,seq", "position", "old_log_prob"
	m := New(context.Background(), loaderOf(in), "tables")
	m.Update(tea.WindowSizeMsg{Width: 120, Height: 24})
	run(t, m, m.Init())
	if m.loadErr != nil || m.screen != sequencesScreen {
		t.Fatalf("load %v, screen %d", m.loadErr, m.screen)
	}
	checkFrame(t, m)
	if !strings.Contains(text(m), "10 of 12 sequences differ") || !strings.Contains(text(m), "1 token id differs") {
		t.Errorf("sequences view:\n%s", text(m))
	}
	press(t, m, "enter")
	if !strings.Contains(m.status, "no ops") {
		t.Errorf("enter on a table's sequence: %q", m.status)
	}
	press(t, m, "esc")
	if m.screen != sequencesScreen {
		t.Error("esc left the only view there is")
	}
}
