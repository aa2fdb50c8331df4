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
}

// ReplayStep re-executes the step the capture at capPath recorded, from its captured token ids, with the
// checkpoint's model and the deterministic engine, and diffs the capture (A) with the replay (B) through Load,
// so causes come from the same producer graph as in `bitalign diff`. It refuses a checkpoint of another
// model than the capture's before replaying. The string is the backend it ran on.
func ReplayStep(ctx context.Context, checkpoint, capPath string, o StepOptions) (*Report, string, error) {
	progress := o.Progress
	if progress == nil {
		progress = func(view.Progress) {}
	}
	backend, backendName, err := engine.SelectBackend(orAuto(o.Device))
	if err != nil {
		return nil, "", err
	}
	if o.Save != "" {
		if _, err := os.Lstat(o.Save); err == nil {
			return nil, "", fmt.Errorf("session: replay: %s exists; choose a new --save directory", o.Save)
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, "", fmt.Errorf("session: replay: %w", err)
		}
	}
	progress(view.Progress{Stage: "loading the checkpoint"})
	m, err := engine.Load(checkpoint)
	if err != nil {
		return nil, "", err
	}
	c, err := openCapture(capPath)
	if err != nil {
		return nil, "", err
	}
	err = checkCheckpoint(checkpoint, m, c)
	c.Close()
	if err != nil {
		return nil, "", err
	}
	out := o.Save
	if out == "" {
		tmp, err := os.MkdirTemp("", "bitalign-replay-*")
		if err != nil {
			return nil, "", fmt.Errorf("session: replay: %w", err)
		}
		defer os.RemoveAll(tmp)
		out = filepath.Join(tmp, "replay")
	}
	tp := max(o.TP, 1)
	progress(view.Progress{Stage: "replaying on " + backendName})
	if _, err := m.Replay(ctx, capPath, out, engine.ReplayOptions{TP: tp, Profile: o.Profile, Backend: backend,
		Collectives: engine.GPUCollectives(backend, tp)}); err != nil {
		return nil, "", err
	}
	l, err := load(ctx, Inputs{A: capPath, B: out, Device: "cpu"}, m, progress) // the diff replays nothing
	if err != nil {
		return nil, "", err
	}
	defer l.Close()
	r := l.Report
	r.Command = "replay"
	if o.Save == "" {
		r.B.Path = "(not kept: --save DIR keeps the replay)" // a temporary directory, gone when this returns
		if r.RL != nil {
			r.RL.B.Path = r.B.Path
		}
	}
	return r, backendName, nil
}
