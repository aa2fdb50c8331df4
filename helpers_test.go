package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"bitalign/engine"
	"bitalign/session/view"
	"bitalign/ui"
)

var (
	fusionOnce sync.Once
	fusionDir  string
	fusionErr  error
)

// fusionDemo writes the demo with the fusion fault in layer 2 once for the package's tests (bitalign demo).
func fusionDemo(t *testing.T) string {
	t.Helper()
	fusionOnce.Do(func() {
		if fusionDir, fusionErr = os.MkdirTemp("", "bitalign-cli-"); fusionErr != nil {
			return
		}
		fusionErr = engine.Demo(filepath.Join(fusionDir, "fusion"), engine.DemoOptions{Fault: "fusion", Layer: 2})
	})
	if fusionErr != nil {
		t.Fatalf("demo: %v", fusionErr)
	}
	return filepath.Join(fusionDir, "fusion")
}

func TestMain(m *testing.M) {
	// the TUI never runs in these tests: a command that reaches it has loaded its input without error
	runUI = func(ctx context.Context, o ui.Options) error {
		tuiStarts++
		if src, err := o.Load(ctx, func(view.Progress) {}); err == nil {
			if c, ok := src.(io.Closer); ok {
				c.Close()
			}
		}
		return errTUIStarted
	}
	code := m.Run()
	if fusionDir != "" {
		os.RemoveAll(fusionDir)
	}
	os.Exit(code)
}

var (
	tuiStarts     int
	errTUIStarted = errors.New("test: the TUI started")
)

// otherModel writes a trainer capture (TP 1) and a checkpoint of a Qwen3 model of the demo's sizes: a model the
// demo's captures were not made with.
func otherModel(t *testing.T) (capDir, ckptDir string) {
	t.Helper()
	cfg := engine.DemoConfig()
	cfg.Architecture, cfg.QKNorm = engine.ArchQwen3, true
	m := engine.NewRandom(cfg, 1)
	dir := t.TempDir()
	capDir, ckptDir = filepath.Join(dir, "trainer"), filepath.Join(dir, "checkpoint")
	if err := m.Save(ckptDir); err != nil {
		t.Fatal(err)
	}
	prompts, _ := engine.DemoPromptSet(cfg)
	to := engine.TrainOptions{Batch: len(prompts)}
	to.CaptureDir = capDir
	if _, err := m.Train(context.Background(), prompts, to); err != nil {
		t.Fatal(err)
	}
	return capDir, ckptDir
}
