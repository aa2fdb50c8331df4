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
	m, err := engine.Load(filepath.Join(dir, "checkpoint"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(context.Background(), filepath.Join(dir, "trainer"), filepath.Join(dir, "sampler"),
		WithProducers(func(op string) []string { return engine.Producers(m.Config, op) }))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
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
	t.Log(v.Summary)
	// one op downstream: the inputs already differ
	next := engine.LayerOp(layer, "mlp.gate_proj")
	v, err = Replay(context.Background(), s, m, next, f.At.Step, f.At.Seq)
	if err != nil {
		t.Fatal(err)
	}
	if !v.InputsDiffer || v.Local || v.Reproduces != "both" {
		t.Fatalf("verdict downstream: %+v", v)
	}
	t.Log(v.Summary)
}
