package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

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
	// Ops (glob patterns, as Diff's WithOps) replays and writes only the ops they match, running the forward
	// up to the last layer those ops need (ReplayStep); nil: every op.
	Ops []string
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

// replayOps resolves replay --ops against the capture's ops: the ops to write (nil: all) and the layers the
// forward must run (engine.ReplayOptions.StopLayer: up to the last asked layer; 0, the whole forward, when an op
// after the layers is asked). A pattern that is malformed or matches no op of the capture is an error.
func replayOps(capPath string, patterns []string) (map[string]bool, int, error) {
	if len(patterns) == 0 {
		return nil, 0, nil
	}
	c, err := openCapture(capPath)
	if err != nil {
		return nil, 0, err
	}
	defer c.Close()
	var names []string
	for i := 0; i < c.Len(); i++ {
		names = append(names, c.Entry(i).Op)
	}
	slices.Sort(names)
	keep, err := matchOps(patterns, slices.Compact(names), capPath)
	if err != nil {
		return nil, 0, err
	}
	stop, whole := 0, false
	for op := range keep {
		if l, _, ok := engine.SplitLayerOp(op); ok {
			stop = max(stop, l+1)
		} else if op != engine.OpTokens && op != engine.OpEmbed {
			whole = true // final_norm, logits, logprobs, sample: after every layer
		}
	}
	switch {
	case whole:
		stop = 0
	case stop == 0:
		stop = 1 // tokens and embed only: the forward's shortest run
	}
	return keep, stop, nil
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
	if _, _, err := replayOps(capPath, o.Ops); err != nil { // before the checkpoint: a bad pattern fails fast
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
	keep, stop, err := replayOps(capPath, o.Ops)
	if err != nil {
		return nil, err
	}
	ro := engine.ReplayOptions{TP: tp, Profile: o.Profile, Backend: backend, Collectives: engine.GPUCollectives(backend, tp),
		Routing: routing, StopLayer: stop}
	in := Inputs{A: capPath, B: out, Device: "cpu"}
	if keep != nil {
		ro.Ops = func(op string) bool { return keep[op] }
		in.Options = []Option{WithOps(o.Ops...)}
	}
	if _, err := m.Replay(ctx, capPath, out, ro); err != nil {
		return nil, err
	}
	l, err := load(ctx, in, m, progress) // the diff replays nothing
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
