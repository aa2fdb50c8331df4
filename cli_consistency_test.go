package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"bitalign/session"
	"bitalign/session/view"
)

// TestDiffAndTUIAgree: `bitalign diff --format json` and the TUI's source (what `bitalign open` shows) give
// every op the same status and cause on the same captures, with and without --checkpoint: one producer graph.
func TestDiffAndTUIAgree(t *testing.T) {
	demo := fusionDemo(t)
	trainer, sampler, ckpt := filepath.Join(demo, "trainer"), filepath.Join(demo, "sampler"), filepath.Join(demo, "checkpoint")
	code, out, errs := run(t, "diff", trainer, sampler, "--format", "json")
	if code != 1 {
		t.Fatalf("diff: exit %d, want 1: %s", code, errs)
	}
	var rep struct {
		Ops []struct {
			Op, Role, Status, Cause string
		} `json:"ops"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	status := map[view.Status]string{view.Identical: "identical", view.Divergent: "divergent", view.MissingA: "missing_in_a",
		view.MissingB: "missing_in_b", view.Incomplete: "incomplete", view.ShapeMismatch: "shape_mismatch"}
	causes := map[string]int{}
	for _, o := range rep.Ops {
		causes[o.Cause]++
	}
	if causes["local"] == 0 || causes["propagated"] == 0 || causes["unknown"] != 0 {
		t.Fatalf("diff's causes %v: the fusion demo has local and propagated divergences, none unknown", causes)
	}
	for _, checkpoint := range []string{"", ckpt} {
		l, err := session.Load(context.Background(), session.Inputs{A: trainer, B: sampler, Checkpoint: checkpoint, Device: "cpu"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		src := l.Source()
		ops := src.Report().Ops
		if len(ops) != len(rep.Ops) {
			t.Fatalf("checkpoint %q: the TUI has %d ops, diff %d", checkpoint, len(ops), len(rep.Ops))
		}
		for i, o := range ops {
			j := rep.Ops[i]
			if o.Op != j.Op || o.Role != j.Role || status[o.Status] != j.Status || o.Cause != j.Cause {
				t.Errorf("checkpoint %q: op %d: TUI %s [%s] %s cause %q; diff %s [%s] %s cause %q", checkpoint, i,
					o.Op, o.Role, status[o.Status], o.Cause, j.Op, j.Role, j.Status, j.Cause)
			}
		}
		if c, ok := src.(interface{ Close() error }); ok {
			c.Close()
		}
	}
}

// TestReplayVerdictFromCore: the TUI's replay verdict is the core's wording (session.Verdict.Text), and the
// heatmap gets the core's levels.
func TestReplayVerdictFromCore(t *testing.T) {
	demo := fusionDemo(t)
	l, err := session.Load(context.Background(), session.Inputs{A: filepath.Join(demo, "trainer"), B: filepath.Join(demo, "sampler"),
		Checkpoint: filepath.Join(demo, "checkpoint"), Device: "cpu"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	src := l.Source()
	var o *view.OpStat
	for i := range src.Report().Ops {
		if src.Report().Ops[i].Op == "layers.2.mlp_norm" {
			o = &src.Report().Ops[i]
		}
	}
	if o == nil {
		t.Fatal("no layers.2.mlp_norm")
	}
	k := o.Key()
	got, err := src.Replay(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	v, err := session.Replay(context.Background(), l.Session, l.Model, k.Op, k.Step, k.Seq)
	if err != nil {
		t.Fatal(err)
	}
	if got.Verdict != v.Text || !strings.HasPrefix(got.Verdict, "local: inputs identical; ") ||
		!strings.HasSuffix(got.Verdict, "; bit for bit, the engine reproduces trainer, not sampler") || !got.Local {
		t.Errorf("TUI verdict %q (local %v), core %q", got.Verdict, got.Local, v.Text)
	}
	p, err := src.Pair(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	sp, _ := l.Pair(k.Op, k.Role, k.Step, k.Seq)
	if p.Levels == nil || &p.Levels[0] != &sp.Levels[0] || p.MaxULP != sp.MaxULP || p.Hist != sp.Hist {
		t.Error("the view's pair does not carry the core's levels")
	}
}
