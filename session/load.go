package session

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	"bitalign/capture"
	"bitalign/engine"
	"bitalign/kernels"
	"bitalign/session/view"
)

// Inputs name what a debugging session opens. `bitalign diff`, `bitalign open`, the TUI's demo and
// `bitalign replay` all open their captures through Load, so the same captures give the same report, with
// the same causes, in every command.
type Inputs struct {
	A, B       string // the two captures (files or per-rank directories), A the trainer and B the sampler
	Checkpoint string // model directory ("" for none): enables replay; its config gives the producer graph
	Device     string // replay device: "auto" (also ""), "cpu" or "cuda"; an unusable "cuda" fails Load
	Force      bool   // compare captures of different models anyway (what can be compared)
	// Profile is the kernel profile replays run (default canonical); one the checkpoint's model cannot run
	// (engine.CheckProfile: tc and an f32 checkpoint) fails Load, naming the checkpoint's config.json.
	Profile kernels.Profile
	Options []Option  // more diff options (WithOps, WithIgnoreMissing, WithTolerance)
	RL      RLOptions // how logprob tables are read and compared (either side may be one)
}

// Loaded is an open, diffed session and what its replays need. Close closes the captures.
type Loaded struct {
	*Session
	Model       *engine.Model         // the checkpoint's model; nil without one (no replay)
	Backend     engine.BackendFactory // replay backend; nil: the CPU
	BackendName string                // engine.SelectBackend's description ("cpu", "cuda:0 (NVIDIA H200)", ...)
	Profile     kernels.Profile       // the replays' kernel profile (Inputs.Profile)
}

// Load loads the checkpoint (when named), checks the replay device, opens both captures, checks that they
// and the checkpoint describe the same model, and diffs them with the producer graph (ProducerGraph). Every
// error is about the inputs and names the file. progress (may be nil) hears each stage and the diff's bytes.
func Load(ctx context.Context, in Inputs, progress func(view.Progress)) (*Loaded, error) {
	if progress == nil {
		progress = func(view.Progress) {}
	}
	m, err := loadModel(in, progress)
	if err != nil {
		return nil, err
	}
	return load(ctx, in, m, progress)
}

// loadModel checks the replay device and loads the checkpoint in.Checkpoint names (nil: none).
func loadModel(in Inputs, progress func(view.Progress)) (*engine.Model, error) {
	if _, _, err := engine.SelectBackend(orAuto(in.Device)); err != nil {
		return nil, err
	}
	var m *engine.Model
	if in.Checkpoint != "" {
		for _, p := range []string{in.A, in.B} {
			if k, err := sniffInput(p); err != nil {
				return nil, err
			} else if k.IsTable() {
				return nil, fmt.Errorf("session: --checkpoint %s: replay needs captures on both sides, and %s is a logprob table", in.Checkpoint, p)
			}
		}
		progress(view.Progress{Stage: "loading the checkpoint"})
		var err error
		if m, err = engine.Load(in.Checkpoint); err != nil {
			return nil, err
		}
		if err := engine.CheckProfile(in.Profile, m.Config, in.Checkpoint); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// load is Load with the checkpoint's model already loaded (nil: none).
func load(ctx context.Context, in Inputs, m *engine.Model, progress func(view.Progress)) (*Loaded, error) {
	l, a, b, opts, err := openPair(ctx, in, m, progress)
	if err != nil || a == nil {
		return l, err
	}
	r, err := Diff(ctx, a, b, opts...)
	if err != nil {
		a.Close()
		b.Close()
		return nil, err
	}
	return l.complete(ctx, in, a, b, r, progress)
}

// complete makes l the session of a and b with their report r and adds the logprob section; it closes
// the captures when that fails.
func (l *Loaded) complete(ctx context.Context, in Inputs, a, b *capture.Capture, r *Report, progress func(view.Progress)) (*Loaded, error) {
	l.Session = NewSession(a, b, r)
	if err := l.addRL(ctx, in.RL, progress); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// openPair is load up to the diff: it selects the backend, opens and checks both captures and returns
// them with the diff's options (progress, producers, in.Options). A pair with a logprob table on a side is
// loaded whole: l is complete and a, b are nil.
func openPair(ctx context.Context, in Inputs, m *engine.Model, progress func(view.Progress)) (l *Loaded, a, b *capture.Capture, opts []Option, err error) {
	l = &Loaded{Model: m, Profile: in.Profile}
	if l.Backend, l.BackendName, err = engine.SelectBackend(orAuto(in.Device)); err != nil {
		return nil, nil, nil, nil, err
	}
	progress(view.Progress{Stage: "opening the captures"})
	ka, err := sniffInput(in.A)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	kb, err := sniffInput(in.B)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if ka.IsTable() || kb.IsTable() {
		l, err := loadTables(ctx, in, l, ka, kb, progress)
		return l, nil, nil, nil, err
	}
	if a, err = openCapture(in.A); err != nil {
		return nil, nil, nil, nil, err
	}
	if b, err = openCapture(in.B); err != nil {
		a.Close()
		return nil, nil, nil, nil, err
	}
	fail := func(err error) (*Loaded, *capture.Capture, *capture.Capture, []Option, error) {
		a.Close()
		b.Close()
		return nil, nil, nil, nil, err
	}
	if err := checkModels(a, b, in.Force); err != nil {
		return fail(err)
	}
	if l.Model != nil {
		for _, c := range []*capture.Capture{a, b} {
			if err := checkCheckpoint(in.Checkpoint, l.Model, c); err != nil {
				return fail(err)
			}
		}
	}
	opts = append([]Option{WithProgress(func(done, total int64) {
		progress(view.Progress{Stage: "diffing", Done: done, Total: total})
	})}, in.Options...)
	if g := ProducerGraph(l.Model, a.Meta(), b.Meta()); g != nil {
		opts = append(opts, WithProducers(g))
	}
	return l, a, b, opts, nil
}

func orAuto(device string) string {
	if device == "" {
		return "auto"
	}
	return device
}

// openCapture opens a capture and refuses one rank's file of a tensor-parallel capture.
func openCapture(path string) (*capture.Capture, error) {
	c, err := capture.Open(path)
	if err != nil {
		return nil, err
	}
	if err := c.Complete(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// ProducerGraph is the one producer graph of a session: engine.Producers of the checkpoint's config when a
// model is given, else of the first capture metadata that records a config the engine reads; nil when
// nothing says which model ran (then divergences whose inputs were not captured have cause unknown).
func ProducerGraph(m *engine.Model, metas ...capture.Meta) func(op string) []string {
	var cfg engine.Config
	switch {
	case m != nil:
		cfg = m.Config
	default:
		found := false
		for _, meta := range metas {
			if c, ok := configOf(meta); ok {
				cfg, found = c, true
				break
			}
		}
		if !found {
			return nil
		}
	}
	return func(op string) []string { return engine.Producers(cfg, op) }
}

// configOf reads the engine config a capture's metadata carries (Meta.Model is {"architecture": ...,
// "config": {a Hugging Face config.json}}); false when it has none the engine can read.
func configOf(m capture.Meta) (engine.Config, bool) {
	var model struct {
		Config json.RawMessage `json:"config"`
	}
	if len(m.Model) == 0 || json.Unmarshal(m.Model, &model) != nil || len(model.Config) == 0 {
		return engine.Config{}, false
	}
	cfg, err := engine.ParseConfig("capture metadata", model.Config)
	if err != nil {
		return engine.Config{}, false
	}
	return cfg, true
}

// sameModel compares what decides the op graph and every tensor's shape.
func sameModel(x, y engine.Config) bool {
	return x.Architecture == y.Architecture && x.Vocab == y.Vocab && x.Hidden == y.Hidden &&
		x.Intermediate == y.Intermediate && x.Layers == y.Layers && x.Heads == y.Heads && x.KVHeads == y.KVHeads &&
		x.HeadDim == y.HeadDim
}

func describe(c engine.Config) string {
	return fmt.Sprintf("%s, %d layers, hidden %d, intermediate %d, %d/%d heads of %d, vocab %d", c.Architecture,
		c.Layers, c.Hidden, c.Intermediate, c.Heads, c.KVHeads, c.HeadDim, c.Vocab)
}

// checkModels refuses two captures of different models unless force: by their configs when both record
// one, else by their architecture names.
func checkModels(a, b *capture.Capture, force bool) error {
	if force {
		return nil
	}
	ca, okA := configOf(a.Meta())
	cb, okB := configOf(b.Meta())
	const hint = "; pass --force to compare what can be compared"
	if okA && okB {
		if !sameModel(ca, cb) {
			return fmt.Errorf("session: the captures are of different models: %s is %s, %s is %s%s", a.Path(),
				describe(ca), b.Path(), describe(cb), hint)
		}
		return nil
	}
	if xa, xb := captureInfo(a).Architecture, captureInfo(b).Architecture; xa != "" && xb != "" && xa != xb {
		return fmt.Errorf("session: the captures are of different models: %s is %s, %s is %s%s", a.Path(), xa, b.Path(), xb, hint)
	}
	return nil
}

// checkCheckpoint refuses a checkpoint whose model is not the one c was captured from: by the config c
// records, else by the hidden size of c's per-token tensors of the residual stream (embed's output).
func checkCheckpoint(dir string, m *engine.Model, c *capture.Capture) error {
	if cc, ok := configOf(c.Meta()); ok {
		if !sameModel(cc, m.Config) {
			return fmt.Errorf("session: checkpoint %s is %s, but %s was captured from %s", dir, describe(m.Config),
				c.Path(), describe(cc))
		}
		return nil
	}
	for i := 0; i < c.Len(); i++ {
		e := c.Entry(i)
		if e.Op != engine.OpEmbed || e.Role != "out" || len(e.Shape) == 0 || e.Shard.Dim >= 0 && c.Meta().TP > 1 {
			continue
		}
		if h := e.Shape[len(e.Shape)-1]; h != int64(m.Config.Hidden) {
			return fmt.Errorf("session: checkpoint %s has hidden size %d, but %s's %s output has %d features", dir,
				m.Config.Hidden, c.Path(), engine.OpEmbed, h)
		}
		break
	}
	return nil
}

// DemoInputs makes sure dir holds the engine's demo of (fault, layer), generating it on first use
// (engine.CachedDemo; dir "" is engine.DemoCacheDir's), and returns its trainer, sampler and checkpoint.
// fault "" or "none" is the identical pair.
func DemoInputs(ctx context.Context, dir, fault string, layer int, progress func(view.Progress)) (Inputs, error) {
	if err := engine.CheckDemoFault(fault, layer); err != nil {
		return Inputs{}, err
	}
	if fault == "none" {
		fault = ""
	}
	if dir == "" {
		var err error
		if dir, err = engine.DemoCacheDir(fault, layer); err != nil {
			return Inputs{}, err
		}
	}
	err := engine.CachedDemo(ctx, dir, fault, layer, func(d time.Duration) {
		if progress != nil {
			progress(view.Progress{Stage: fmt.Sprintf("generating the demo in %s (first run, %.0fs)", dir, d.Seconds())})
		}
	})
	if err != nil {
		return Inputs{}, err
	}
	return Inputs{A: filepath.Join(dir, engine.SideTrainer), B: filepath.Join(dir, engine.SideSampler),
		Checkpoint: filepath.Join(dir, "checkpoint")}, nil
}

// The demo bitalign opens when no fault is named: the sampler fuses layer 2's residual add with the RMSNorm,
// so the captures agree up to layers.2.mlp_norm and then drift. DefaultDemoLayer is also --layer's default.
const (
	DefaultDemoFault = "fusion"
	DefaultDemoLayer = 2
)
