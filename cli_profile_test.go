package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"bitalign/capture"
	"bitalign/engine"
)

// TestCLIProfileTC: `--profile tc` end to end on the CPU (docs/arithmetic.md §18): the demo's two sides are
// bitwise identical with the tc kernels, a tc replay of the sampler reproduces it (exit 0) and a canonical one
// does not (exit 1: tc is not canonical's bits); an f32 checkpoint is refused by replay and open (exit 2, naming
// its config.json, before any TUI starts), and an unknown profile is a usage error.
func TestCLIProfileTC(t *testing.T) {
	dir := t.TempDir()
	demo := filepath.Join(dir, "tc")
	if code, _, errs := run(t, "demo", "--out", demo, "--profile", "tc", "--device", "cpu"); code != 0 {
		t.Fatalf("demo --profile tc: exit %d: %s", code, errs)
	}
	trainer, sampler, ckpt := filepath.Join(demo, "trainer"), filepath.Join(demo, "sampler"), filepath.Join(demo, "checkpoint")
	if code, out, _ := run(t, "diff", trainer, sampler); code != 0 || !strings.Contains(out, "bitwise identical") || !strings.Contains(out, "profile tc") {
		t.Fatalf("diff of the tc demo: exit %d, want 0, identical, profile tc:\n%s", code, out)
	}
	if code, out, errs := run(t, "replay", "--checkpoint", ckpt, "--capture", sampler, "--profile", "tc", "--device", "cpu"); code != 0 {
		t.Fatalf("replay --profile tc of the tc sampler: exit %d, want 0: %s\n%s", code, errs, out)
	}
	if code, out, errs := run(t, "replay", "--checkpoint", ckpt, "--capture", sampler, "--device", "cpu"); code != 1 {
		t.Fatalf("canonical replay of the tc sampler: exit %d, want 1 (tc's bits are not canonical's): %s\n%s", code, errs, out)
	}

	// an f32 checkpoint: tc serves bf16 models only
	cfg := engine.DemoConfig()
	cfg.DType = capture.F32
	m := engine.NewRandom(cfg, 1)
	f32Ckpt, f32Cap := filepath.Join(dir, "f32", "checkpoint"), filepath.Join(dir, "f32", "trainer")
	if err := m.Save(f32Ckpt); err != nil {
		t.Fatal(err)
	}
	prompts, _ := engine.DemoPromptSet(cfg)
	to := engine.TrainOptions{Batch: len(prompts)}
	to.CaptureDir = f32Cap
	if _, err := m.Train(context.Background(), prompts, to); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"replay", "--checkpoint", f32Ckpt, "--capture", f32Cap, "--profile", "tc", "--device", "cpu"},
		{"open", f32Cap, f32Cap, "--checkpoint", f32Ckpt, "--profile", "tc", "--device", "cpu"},
	} {
		before := tuiStarts
		code, _, errs := run(t, args...)
		if code != 2 || !strings.Contains(errs, filepath.Join(f32Ckpt, "config.json")) || !strings.Contains(errs, "bf16 models only, this one is f32") {
			t.Errorf("%s --profile tc of an f32 checkpoint: exit %d, %q; want 2 naming its config.json and why", args[0], code, errs)
		}
		if tuiStarts != before {
			t.Error("the TUI started on a checkpoint the profile cannot run")
		}
	}
	for _, args := range [][]string{
		{"demo", "--out", filepath.Join(dir, "x"), "--profile", "tensor"},
		{"replay", "--checkpoint", ckpt, "--capture", sampler, "--profile", "tensor"},
		{"open", trainer, sampler, "--profile", "tensor"},
	} {
		if code, _, errs := run(t, args...); code != 2 || !strings.Contains(errs, `"tensor"`) || !strings.Contains(errs, "tc") {
			t.Errorf("%s --profile tensor: exit %d, %q; want 2 naming it and the profiles", args[0], code, errs)
		}
	}
}
