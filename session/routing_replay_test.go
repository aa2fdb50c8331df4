package session

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"bitalign/engine"
)

// TestReplayRouting: on the MoE demo with router-split-k, the sampler reproduces with its own routing and moves
// with the trainer's, first at the demo's documented routing flip; the trainer diverges at the router either
// way (numerics). A dense checkpoint and a missing capture are refused; every format but html writes.
func TestReplayRouting(t *testing.T) {
	dir := t.TempDir()
	if err := engine.Demo(dir, engine.DemoOptions{Fault: "router-split-k"}); err != nil {
		t.Fatal(err)
	}
	ckpt, tr, sa := filepath.Join(dir, "checkpoint"), filepath.Join(dir, "trainer"), filepath.Join(dir, "sampler")
	ctx := context.Background()
	rr, _, err := ReplayRouting(ctx, ckpt, sa, StepOptions{Device: "cpu", RoutingFrom: tr})
	if err != nil {
		t.Fatal(err)
	}
	f, _ := engine.FaultByName("router-split-k")
	if !rr.Own.Identical || rr.Routed.Identical || rr.Routed.First == nil || rr.Routed.First.Op != f.FirstFlip {
		t.Fatalf("sampler: own identical %v, routed first divergence %+v (want %s)", rr.Own.Identical, rr.Routed.First, f.FirstFlip)
	}
	if !strings.Contains(rr.Verdicts[2], "what routing causes") {
		t.Fatalf("verdicts %q", rr.Verdicts)
	}
	rt, _, err := ReplayRouting(ctx, ckpt, tr, StepOptions{Device: "cpu", RoutingFrom: sa, RoutingWeights: true})
	if err != nil {
		t.Fatal(err)
	}
	if rt.Own.First == nil || rt.Own.First.Op != f.Where || rt.Routed.First == nil || rt.Routed.First.Op != f.Where {
		t.Fatalf("trainer: first divergences %+v and %+v, want %s twice", rt.Own.First, rt.Routed.First, f.Where)
	}
	for _, format := range []string{"text", "md", "json"} {
		var b bytes.Buffer
		if err := WriteRoutingReplay(&b, rr, format); err != nil {
			t.Fatal(err)
		}
		if format == "json" {
			var v struct {
				Verdicts []string        `json:"verdicts"`
				Own      json.RawMessage `json:"own_routing"`
			}
			if err := json.Unmarshal(b.Bytes(), &v); err != nil || len(v.Verdicts) != 3 || len(v.Own) == 0 {
				t.Fatalf("json: %v %+v", err, v)
			}
		} else if !strings.Contains(b.String(), rr.Verdicts[1]) {
			t.Fatalf("%s lacks the verdicts", format)
		}
	}
	if err := WriteRoutingReplay(&bytes.Buffer{}, rr, "html"); err == nil {
		t.Fatal("html accepted")
	}
	dense := t.TempDir()
	if err := engine.Demo(dense, engine.DemoOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReplayRouting(ctx, filepath.Join(dense, "checkpoint"), filepath.Join(dense, "sampler"),
		StepOptions{Device: "cpu", RoutingFrom: filepath.Join(dense, "trainer")}); err == nil || !strings.Contains(err.Error(), "no routing") {
		t.Fatalf("dense model: %v", err)
	}
	if _, _, err := ReplayRouting(ctx, ckpt, sa, StepOptions{Device: "cpu", RoutingFrom: filepath.Join(dir, "nope")}); err == nil {
		t.Fatal("a missing routing capture accepted")
	}
}

// TestDemoInputsMoEFault: the TUI's demo path (DemoInputs, then Load) with router-split-k generates the MoE demo
// and the session's first divergence is the fault's documented op.
func TestDemoInputsMoEFault(t *testing.T) {
	in, err := DemoInputs(context.Background(), filepath.Join(t.TempDir(), "demo"), "router-split-k", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	in.Device = "cpu"
	l, err := Load(context.Background(), in, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	f, _ := engine.FaultByName("router-split-k")
	if l.Model.Config.Experts == 0 || l.Report.First == nil || l.Report.First.Op != f.Where {
		t.Fatalf("model %s, first divergence %+v; want the MoE demo diverging at %s", l.Model.Config.Architecture, l.Report.First, f.Where)
	}
}
