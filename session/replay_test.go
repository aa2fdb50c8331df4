package session

import (
	"context"
	"path/filepath"
	"testing"

	"bitalign/engine"
)

func TestReplayDemoFault(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the engine's demo (several seconds)")
	}
	dir := t.TempDir()
	const layer = 1
	if err := engine.Demo(dir, engine.DemoOptions{Fault: "fusion", Layer: layer}); err != nil {
		t.Fatal(err)
	}
	l, err := Load(context.Background(), Inputs{A: filepath.Join(dir, "trainer"), B: filepath.Join(dir, "sampler"),
		Checkpoint: filepath.Join(dir, "checkpoint"), Device: "cpu"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s, m := l.Session, l.Model
	f := s.Report.First
	want := engine.LayerOp(layer, "mlp_norm")
	if f == nil || f.Op != want {
		t.Fatalf("first divergence %+v, want %s", f, want)
	}
	if f.Cause != CauseLocal {
		t.Errorf("diff cause %q (%s), want local", f.Cause, f.Detail)
	}
	v, err := Replay(context.Background(), s, m, f.Op, f.At.Step, f.At.Seq)
	if err != nil {
		t.Fatal(err)
	}
	if !v.Local || v.InputsDiffer || v.Reproduces != "A" || v.FromA.Err != "" || v.FromB.Err != "" {
		t.Fatalf("verdict at the fault: %+v", v)
	}
	if !v.FromA.VsA.Identical || !v.FromB.VsA.Identical || v.FromB.VsB.Identical {
		t.Fatalf("replays: A vs A %v, B vs A %v, B vs B %v", v.FromA.VsA.Identical, v.FromB.VsA.Identical, v.FromB.VsB.Identical)
	}
	// the fused norm is a correct kernel with one rounding point fewer: within rounding of the oracle, although
	// the engine reproduces only the trainer bit for bit
	if want := "local: inputs identical; ULPs from the correctly rounded result of each side's own inputs: trainer 0, " +
		"sampler 2 (the engine's 0): both within rounding; bit for bit, the engine reproduces trainer, not sampler"; v.Text != want {
		t.Errorf("verdict text %q, want %q", v.Text, want)
	}
	if v.Oracle == nil || v.Oracle.A.Captured.Local != 0 || v.Oracle.B.Captured.Local == 0 {
		t.Errorf("oracle %+v", v.Oracle)
	}
	// one op downstream: the inputs already differ
	next := engine.LayerOp(layer, "mlp.gate_proj")
	v, err = Replay(context.Background(), s, m, next, f.At.Step, f.At.Seq)
	if err != nil {
		t.Fatal(err)
	}
	if !v.InputsDiffer || v.Local || v.Reproduces != "both" {
		t.Fatalf("verdict downstream: %+v", v)
	}
	if want := "propagated: inputs already differ (" + engine.LayerOp(layer, "mlp_norm") + "); ULPs from the correctly " +
		"rounded result of each side's own inputs: trainer 0, sampler 0 (the engine's 0): both within rounding; bit for " +
		"bit, the engine reproduces both sides"; v.Text != want {
		t.Errorf("verdict text %q, want %q", v.Text, want)
	}
}
