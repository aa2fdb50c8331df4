package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"bitalign/engine"
	"bitalign/kernels"
	"bitalign/session/view"
)

// StepOptions configure ReplayStep.
type StepOptions struct {
	TP      int             // tensor-parallel ranks of the replay (default 1)
	Profile kernels.Profile // default canonical
	Device  string          // "auto" (also ""), "cpu" or "cuda"
	// Save is a new directory to keep the replay capture in; "" replays into a temporary one, removed
	// afterwards (and the report then names no path for it).
	Save     string
	Progress func(view.Progress) // may be nil
	// RoutingFrom is a capture whose routing (layers.L.mlp.experts) ReplayRouting replays in a second run;
	// RoutingWeights takes its layers.L.mlp.expert_weights too. ReplayStep ignores them.
	RoutingFrom    string
	RoutingWeights bool
}

// setup is what every replay checks first: the progress callback (never nil), the backend of o.Device, and that
// each of saves ("" : none) is a new directory.
func (o StepOptions) setup(saves ...string) (func(view.Progress), engine.BackendFactory, string, error) {
	progress := o.Progress
	if progress == nil {
		progress = func(view.Progress) {}
	}
	backend, backendName, err := engine.SelectBackend(orAuto(o.Device))
	if err != nil {
		return nil, nil, "", err
	}
	for _, p := range saves {
		if p == "" {
			continue
		}
		if _, err := os.Lstat(p); err == nil {
			return nil, nil, "", fmt.Errorf("session: replay: %s exists; choose a new --save directory", p)
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, nil, "", fmt.Errorf("session: replay: %w", err)
		}
	}
	return progress, backend, backendName, nil
}

// loadForReplay loads the checkpoint and refuses it when it is not the capture's model.
func loadForReplay(checkpoint, capPath string, progress func(view.Progress)) (*engine.Model, error) {
	progress(view.Progress{Stage: "loading the checkpoint"})
	m, err := engine.Load(checkpoint)
	if err != nil {
		return nil, err
	}
	c, err := openCapture(capPath)
	if err != nil {
		return nil, err
	}
	err = checkCheckpoint(checkpoint, m, c)
	c.Close()
	if err != nil {
		return nil, err
	}
	return m, nil
}

// ReplayStep re-executes the step the capture at capPath recorded, from its captured token ids, with the
// checkpoint's model and the deterministic engine, and diffs the capture (A) with the replay (B) through Load,
// so causes come from the same producer graph as in `bitalign diff`. It refuses a checkpoint of another
// model than the capture's before replaying. The string is the backend it ran on.
func ReplayStep(ctx context.Context, checkpoint, capPath string, o StepOptions) (*Report, string, error) {
	progress, backend, backendName, err := o.setup(o.Save)
	if err != nil {
		return nil, "", err
	}
	m, err := loadForReplay(checkpoint, capPath, progress)
	if err != nil {
		return nil, "", err
	}
	progress(view.Progress{Stage: "replaying on " + backendName})
	r, err := replayInto(ctx, m, capPath, o.Save, o, backend, nil, progress)
	if err != nil {
		return nil, "", err
	}
	return r, backendName, nil
}

// replayInto replays capPath into save ("" : a temporary directory, removed) with routing (nil: the model's
// own) and diffs the capture (A) with it.
func replayInto(ctx context.Context, m *engine.Model, capPath, save string, o StepOptions, backend engine.BackendFactory,
	routing *engine.Routing, progress func(view.Progress)) (*Report, error) {
	out := save
	if out == "" {
		tmp, err := os.MkdirTemp("", "bitalign-replay-*")
		if err != nil {
			return nil, fmt.Errorf("session: replay: %w", err)
		}
		defer os.RemoveAll(tmp)
		out = filepath.Join(tmp, "replay")
	}
	tp := max(o.TP, 1)
	if _, err := m.Replay(ctx, capPath, out, engine.ReplayOptions{TP: tp, Profile: o.Profile, Backend: backend,
		Collectives: engine.GPUCollectives(backend, tp), Routing: routing}); err != nil {
		return nil, err
	}
	l, err := load(ctx, Inputs{A: capPath, B: out, Device: "cpu"}, m, progress) // the diff replays nothing
	if err != nil {
		return nil, err
	}
	defer l.Close()
	r := l.Report
	r.Command = "replay"
	if save == "" {
		r.B.Path = "(not kept: --save DIR keeps the replay)" // a temporary directory, gone when this returns
		if r.RL != nil {
			r.RL.B.Path = r.B.Path
		}
	}
	return r, nil
}
