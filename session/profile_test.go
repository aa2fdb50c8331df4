package session

import (
	"context"
	"path/filepath"
	"testing"

	"bitalign/engine"
	"bitalign/kernels"
	"bitalign/session/view"
)

// TestReplayProfileTC: the debugger's replay (the TUI's Source, what `open --profile tc` shows) runs the profile
// Load was given: on the tc demo every op of layer 0 that tc computes (the projections, attention) is
// reproduced by a tc replay from both sides' inputs, and attention is not by a canonical one (its tensor-core
// products are not canonical's FMA chains); ReplayStep with the tc profile reproduces the whole sampler.
func TestReplayProfileTC(t *testing.T) {
	dir := t.TempDir()
	if err := engine.Demo(dir, engine.DemoOptions{Profile: kernels.TC}); err != nil {
		t.Fatal(err)
	}
	trainer, sampler, ckpt := filepath.Join(dir, "trainer"), filepath.Join(dir, "sampler"), filepath.Join(dir, "checkpoint")
	ops := []string{"attn.q_proj", "attn.sdpa", "attn.o_proj", "mlp.down_proj"}
	reproduces := map[kernels.Profile]map[string]bool{}
	for _, p := range []kernels.Profile{kernels.TC, kernels.Canonical} {
		l, err := Load(context.Background(), Inputs{A: trainer, B: sampler, Checkpoint: ckpt, Device: "cpu", Profile: p}, nil)
		if err != nil {
			t.Fatal(err)
		}
		src := l.Source()
		reproduces[p] = map[string]bool{}
		for _, s := range ops {
			op := engine.LayerOp(0, s)
			r, err := src.Replay(context.Background(), view.Key{Op: op, Role: "out", Step: engine.DemoStep, Seq: 0})
			if err != nil {
				t.Fatalf("%v replay of %s: %v", p, op, err)
			}
			reproduces[p][s] = r.FromA.Reproduces && r.FromB.Reproduces
		}
		if c, ok := src.(interface{ Close() error }); ok {
			c.Close()
		}
	}
	for _, s := range ops {
		if !reproduces[kernels.TC][s] {
			t.Errorf("tc replay of layers.0.%s does not reproduce the tc demo", s)
		}
	}
	if reproduces[kernels.Canonical]["attn.sdpa"] {
		t.Error("a canonical replay reproduces the tc demo's attention: the profile did not reach the replay")
	}
	r, _, err := ReplayStep(context.Background(), ckpt, sampler, StepOptions{Profile: kernels.TC, Device: "cpu"})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Identical {
		t.Fatalf("ReplayStep --profile tc of the tc sampler: first divergence %+v", r.First)
	}
}
