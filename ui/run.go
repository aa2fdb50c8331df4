package ui

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	tea "charm.land/bubbletea/v2"

	"bitalign/engine"
	"bitalign/session"
)

// DefaultDemoFault is the fault planted in the demo the TUI opens when none is named: the sampler fuses
// layer 2's residual add with the RMSNorm, so the captures agree up to layers.2.mlp_norm and then drift.
const (
	DefaultDemoFault      = "fusion"
	DefaultDemoFaultLayer = 2
)

// Options say what Run opens.
type Options struct {
	TrainerPath, SamplerPath string // two captures (files or per-rank directories)
	Checkpoint               string // model directory: enables replay and local/propagated causes
	Device                   string // replay device: "auto" (default: the GPU when usable), "cpu", "cuda"

	Demo       bool   // open the engine's demo instead (generated once into DemoDir)
	DemoDir    string // default: os.UserCacheDir()/bitalign/demo/<fault>-L<layer>
	Fault      string // demo fault (engine.Faults() names); "" = DefaultDemoFault, "none" = identical captures
	FaultLayer int    // layer of a layered demo fault; used when Fault is set

	// Input and Output replace the terminal (tests); nil uses stdin/stdout.
	Input  io.Reader
	Output io.Writer
}

// Run opens the session described by o and runs the TUI until the user quits. Loading, diffing and demo
// generation run in the background; errors while loading are shown in the UI, not returned.
func Run(ctx context.Context, o Options) error {
	load, title, err := o.loader()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // quitting stops loading, diffing and replays still running
	m := New(ctx, load, title)
	opts := []tea.ProgramOption{tea.WithContext(ctx)}
	if o.Input != nil {
		opts = append(opts, tea.WithInput(o.Input))
	}
	if o.Output != nil {
		opts = append(opts, tea.WithOutput(o.Output))
	}
	_, err = tea.NewProgram(m, opts...).Run()
	cancel()
	// close the captures only once no background command can still be reading them
	if c, ok := m.src.(io.Closer); ok && m.Wait(3*time.Second) {
		c.Close()
	}
	if errors.Is(err, tea.ErrProgramKilled) && ctx.Err() != nil {
		return nil // cancelled from outside: a clean exit
	}
	return err
}

func (o Options) loader() (Loader, string, error) {
	if o.Demo {
		fault, layer := o.Fault, o.FaultLayer
		if fault == "" {
			fault, layer = DefaultDemoFault, DefaultDemoFaultLayer
		}
		if fault == "none" {
			fault, layer = "", 0
		}
		dir := o.DemoDir
		if dir == "" {
			cache, err := os.UserCacheDir()
			if err != nil {
				return nil, "", fmt.Errorf("ui: no cache directory for the demo: %w", err)
			}
			name := "identical"
			if fault != "" {
				name = fault + "-L" + strconv.Itoa(layer)
			}
			dir = filepath.Join(cache, "bitalign", "demo", name)
		}
		title := "demo"
		if fault != "" {
			title = fmt.Sprintf("demo · fault %s (layer %d)", fault, layer)
		}
		return DemoLoader(dir, fault, layer, o.Device), title, nil
	}
	if o.TrainerPath == "" || o.SamplerPath == "" {
		return nil, "", fmt.Errorf("ui: need two captures (trainer and sampler) or the demo")
	}
	return OpenLoader(o.TrainerPath, o.SamplerPath, o.Checkpoint, o.Device),
		filepath.Base(o.TrainerPath) + " ↔ " + filepath.Base(o.SamplerPath), nil
}

// demoComplete names the file written into a demo directory once it is whole.
const demoComplete = ".bitalign-demo-complete"

// DemoLoader generates the engine's demo into dir unless it is already there (into a temporary sibling, then
// renamed into place, so an interrupted run leaves nothing half-made), then opens it like OpenLoader.
func DemoLoader(dir, fault string, layer int, device string) Loader {
	return func(ctx context.Context, progress func(Progress)) (Source, error) {
		if _, err := os.Stat(filepath.Join(dir, demoComplete)); err != nil {
			if err := generateDemo(ctx, dir, fault, layer, progress); err != nil {
				return nil, err
			}
		}
		return OpenLoader(filepath.Join(dir, engine.SideTrainer), filepath.Join(dir, engine.SideSampler),
			filepath.Join(dir, "checkpoint"), device)(ctx, progress)
	}
}

func generateDemo(ctx context.Context, dir, fault string, layer int, progress func(Progress)) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("ui: demo: %w", err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), filepath.Base(dir)+".tmp-")
	if err != nil {
		return fmt.Errorf("ui: demo: %w", err)
	}
	defer os.RemoveAll(tmp) // nothing left once renamed
	// engine.Demo reports no progress: report elapsed time so the user sees it is alive
	done := make(chan error, 1)
	go func() {
		done <- engine.Demo(tmp, engine.DemoOptions{Fault: fault, Layer: layer, Overwrite: true})
	}()
	start := time.Now()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		progress(Progress{Stage: fmt.Sprintf("generating the demo in %s (first run, %.0fs)", dir, time.Since(start).Seconds())})
		select {
		case err = <-done:
		case <-tick.C:
			continue
		case <-ctx.Done():
			return ctx.Err()
		}
		break
	}
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, demoComplete), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return fmt.Errorf("ui: demo: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, statErr := os.Stat(filepath.Join(dir, demoComplete)); statErr == nil {
			return nil // another bitalign finished first
		}
		os.RemoveAll(dir) // a stale, incomplete demo: replace it
		if err := os.Rename(tmp, dir); err != nil {
			return fmt.Errorf("ui: demo: %w", err)
		}
	}
	return nil
}

// OpenLoader opens two captures and diffs them in the background; with a checkpoint, the engine's
// producer graph lets the diff tell local divergences from propagated ones, and replay runs on device.
func OpenLoader(trainer, sampler, checkpoint, device string) Loader {
	return func(ctx context.Context, progress func(Progress)) (Source, error) {
		var opts []session.Option
		var model *engine.Model
		if checkpoint != "" {
			progress(Progress{Stage: "loading the checkpoint"})
			m, err := engine.Load(checkpoint)
			if err != nil {
				return nil, err
			}
			model = m
			cfg := m.Config
			opts = append(opts, session.WithProducers(func(op string) []string { return engine.Producers(cfg, op) }))
		}
		progress(Progress{Stage: "opening the captures"})
		opts = append(opts, session.WithProgress(func(done, total int64) {
			progress(Progress{Stage: "diffing", Done: done, Total: total})
		}))
		s, err := session.Open(ctx, trainer, sampler, opts...)
		if err != nil {
			return nil, err
		}
		return FromSession(s, model, device), nil
	}
}
