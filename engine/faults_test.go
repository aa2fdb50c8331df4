package engine

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"bitalign/capture"
)

// TestFaultsFirstDivergence plants each fault in the demo and checks that the first op whose bits differ
// between the trainer and the sampler captures, in execution order, is exactly the documented one.
func TestFaultsFirstDivergence(t *testing.T) {
	layers := []int{0, 2}
	if testing.Short() {
		layers = []int{1}
	}
	for _, f := range Faults() {
		ls := []int{0}
		if f.Layered {
			ls = layers
		}
		for _, l := range ls {
			t.Run(f.Name+"/layer-"+itoa(l), func(t *testing.T) {
				dir := t.TempDir()
				if err := Demo(dir, DemoOptions{Fault: f.Name, Layer: l}); err != nil {
					t.Fatal(err)
				}
				cfg, err := DemoModelConfig("", f.Name) // the MoE demo for the MoE faults
				if err != nil {
					t.Fatal(err)
				}
				d := compare(t, cfg, filepath.Join(dir, SideTrainer), filepath.Join(dir, SideSampler))
				want := f.FirstDivergentOp(l)
				if d == nil {
					t.Fatalf("no divergence; documented first divergence %s", want)
				}
				if d.Op != want {
					t.Fatalf("first divergence at %v, documented %s", d, want)
				}
				t.Logf("%s: %v", f.Name, d)
			})
		}
	}
}

func TestFaultCatalog(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range Faults() {
		if seen[f.Name] {
			t.Fatalf("fault %s listed twice", f.Name)
		}
		seen[f.Name] = true
		if f.Side != SideTrainer && f.Side != SideSampler {
			t.Errorf("%s: side %q", f.Name, f.Side)
		}
		cfg, err := DemoModelConfig("", f.Name)
		if err != nil {
			t.Fatal(err)
		}
		if f.MoE != (cfg.Experts > 0) || (f.FirstFlip != "") != f.MoE {
			t.Errorf("%s: MoE %v, FirstFlip %q, demo model %s", f.Name, f.MoE, f.FirstFlip, cfg.Architecture)
		}
		if OpIndex(cfg, f.FirstDivergentOp(1)) < 0 {
			t.Errorf("%s: documented op %q is not an op of the demo model", f.Name, f.FirstDivergentOp(1))
		}
		if f.MoE {
			if _, err := DemoModelConfig(DemoDense, f.Name); err == nil {
				t.Errorf("%s accepted with the dense demo", f.Name)
			}
			dense := NewRandom(tinyConfig(ArchLlama, capture.BF16), 1)
			_, err := dense.Train(t.Context(), [][]int32{{1, 2, 3}}, TrainOptions{RunOptions: RunOptions{Fault: f.Name}})
			if err == nil || !strings.Contains(err.Error(), "needs a mixture-of-experts model") {
				t.Errorf("%s on a dense model: %v", f.Name, err)
			}
		}
		if f.Layered != strings.Contains(f.Where, ".L.") {
			t.Errorf("%s: Layered = %v but Where = %q", f.Name, f.Layered, f.Where)
		}
	}
	for _, n := range []string{"split-k", "ring-allreduce", "fusion", "fast-exp", "rng-slot", "stale-weights"} {
		if !seen[n] {
			t.Errorf("fault %s missing from the catalog", n)
		}
	}
	if _, err := FaultByName("nope"); err == nil || !strings.Contains(err.Error(), "split-k") {
		t.Errorf("unknown fault: %v", err)
	}
	if err := Demo(t.TempDir(), DemoOptions{Fault: "fusion", Layer: 9}); err == nil {
		t.Error("fault layer outside the model accepted")
	}
}

func TestDemoRefusesNonEmptyDir(t *testing.T) {
	dir := t.TempDir()
	keep := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(keep, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := Demo(dir, DemoOptions{})
	if err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("demo into a non-empty directory: %v", err)
	}
	if err := Demo(dir, DemoOptions{Overwrite: true}); err != nil {
		t.Fatal(err)
	}
	if err := Demo(dir, DemoOptions{Overwrite: true}); err != nil { // again over its own output
		t.Fatal(err)
	}
	if b, err := os.ReadFile(keep); err != nil || string(b) != "mine" {
		t.Fatalf("overwrite touched a file it does not own: %q %v", b, err)
	}
	for _, sub := range []string{"checkpoint/config.json", "checkpoint/model.safetensors", "trainer/rank0.arrow", "trainer/rank1.arrow", "sampler/rank0.arrow"} {
		if _, err := os.Stat(filepath.Join(dir, sub)); err != nil {
			t.Errorf("demo output: %v", err)
		}
	}
	m, err := Load(filepath.Join(dir, "checkpoint"))
	if err != nil {
		t.Fatal(err)
	}
	want := NewRandom(DemoConfig(), DemoSeed)
	if !sameWeights(m, want) {
		t.Fatal("the demo checkpoint does not load back to the demo model")
	}
}
