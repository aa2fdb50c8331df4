package session

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"bitalign/capture"
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
	// Full writes the replay in full even where the capture holds fingerprints only (by default the replay
	// writes such ops as fingerprints too, and the diff compares fingerprint with fingerprint).
	Full bool
	// Timings, when set, receives the replay's phase times (replay --timings).
	Timings *engine.Phases
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

// replayPlan is what a replay writes, from the capture's index: keep (nil: every op) and stop as
// replayOps says, and fps, the ops the capture holds as fingerprints only (role fp.out, no out tensor), which
// the replay writes as fingerprints too (nil with StepOptions.Full or when there are none).
type replayPlan struct {
	keep map[string]bool
	stop int
	fps  map[string]bool
}

// planReplay reads the capture's index once for replayOps and the fingerprint-only ops.
func planReplay(capPath string, patterns []string, full bool) (replayPlan, error) {
	c, err := openCapture(capPath)
	if err != nil {
		return replayPlan{}, err
	}
	defer c.Close()
	var names []string
	fpOps, fullOps := map[string]bool{}, map[string]bool{}
	for i := 0; i < c.Len(); i++ {
		e := c.Entry(i)
		names = append(names, e.Op)
		switch e.Role {
		case capture.FingerprintPrefix + "out":
			fpOps[e.Op] = true
		case "out", "":
			fullOps[e.Op] = true
		}
	}
	var p replayPlan
	if p.keep, p.stop, err = replayOps(capPath, names, patterns); err != nil {
		return replayPlan{}, err
	}
	if !full {
		for _, op := range slices.Sorted(maps.Keys(fpOps)) {
			if !fullOps[op] && (p.keep == nil || p.keep[op]) {
				if p.fps == nil {
					p.fps = map[string]bool{}
				}
				p.fps[op] = true
			}
		}
	}
	return p, nil
}

// replayOps resolves replay --ops against the capture's op names: the ops to write (nil: all) and the layers
// the forward must run (engine.ReplayOptions.StopLayer: up to the last asked layer; 0, the whole forward, when
// an op after the layers is asked). A pattern that is malformed or matches no op of the capture is an error.
func replayOps(capPath string, names, patterns []string) (map[string]bool, int, error) {
	if len(patterns) == 0 {
		return nil, 0, nil
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

// loadForReplay loads the checkpoint and refuses it when it is not the capture's model or profile p cannot run
// it (engine.CheckProfile: tc serves bf16 models only).
func loadForReplay(checkpoint, capPath string, p kernels.Profile, progress func(view.Progress), ph *engine.Phases) (*engine.Model, error) {
	progress(view.Progress{Stage: "loading the checkpoint"})
	start := time.Now()
	m, err := engine.Load(checkpoint)
	start = ph.Since("load the checkpoint (mapped)", start)
	if err != nil {
		return nil, err
	}
	if err := engine.CheckProfile(p, m.Config, checkpoint); err != nil {
		return nil, err
	}
	defer ph.Since("check the checkpoint against the capture", start)
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
	start := time.Now()
	plan, err := planReplay(capPath, o.Ops, o.Full) // before the checkpoint: a bad pattern fails fast
	o.Timings.Since("read the capture's index (--ops, fingerprints)", start)
	if err != nil {
		return nil, "", err
	}
	m, err := loadForReplay(checkpoint, capPath, o.Profile, progress, o.Timings)
	if err != nil {
		return nil, "", err
	}
	progress(view.Progress{Stage: "replaying on " + backendName})
	r, err := replayInto(ctx, m, capPath, o.Save, o, plan, backend, nil, progress)
	if err != nil {
		return nil, "", err
	}
	return r, backendName, nil
}

// replayInto replays capPath into save ("" : a temporary directory, removed) with routing (nil: the model's
// own) and diffs the capture (A) with it.
func replayInto(ctx context.Context, m *engine.Model, capPath, save string, o StepOptions, plan replayPlan,
	backend engine.BackendFactory, routing *engine.Routing, progress func(view.Progress)) (*Report, error) {
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
	ro := engine.ReplayOptions{TP: tp, Profile: o.Profile, Backend: backend, Collectives: engine.GPUCollectives(backend, tp),
		Routing: routing, StopLayer: plan.stop, Phases: o.Timings}
	in := Inputs{A: capPath, B: out, Device: "cpu"}
	if keep := plan.keep; keep != nil {
		ro.Ops = func(op string) bool { return keep[op] }
		in.Options = []Option{WithOps(o.Ops...)}
	}
	if fps := plan.fps; fps != nil {
		ro.Fingerprints = func(op string) bool { return fps[op] }
	}
	if _, err := m.Replay(ctx, capPath, out, ro); err != nil {
		return nil, err
	}
	start := time.Now()
	l, err := load(ctx, in, m, progress) // the diff replays nothing
	o.Timings.Since("diff the capture with the replay", start)
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
