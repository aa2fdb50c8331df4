package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"bitalign/capture"
	"bitalign/kernels"
)

// Demo constants: the model, the prompts and the keys are fixed, so every demo directory has the same bits.
const (
	DemoSeed     uint64 = 20261129 // weights
	DemoSampSeed uint64 = 7        // sampling key
	DemoStep     int64  = 1
	DemoPrompts         = 8
	DemoSlots           = 3 // sampler slots: sequences join as others finish
)

// DemoConfig is the demo model: a small Llama-style bf16 decoder (4 layers, hidden 256, 8 heads over 2 kv
// heads, vocab 512).
func DemoConfig() Config {
	return Config{Architecture: ArchLlama, Vocab: 512, Hidden: 256, Intermediate: 512, Layers: 4, Heads: 8,
		KVHeads: 2, HeadDim: 32, RopeTheta: 10000, Eps: 1e-5, MaxPositions: 256, DType: capture.BF16}
}

// Demo models, as `bitalign demo --model` names them.
const (
	DemoDense = "dense" // DemoConfig, the default
	DemoMoE   = "moe"   // DemoMoEConfig
)

// DemoModels lists the demo models, the default first.
func DemoModels() []string { return []string{DemoDense, DemoMoE} }

// DemoMoEConfig is the mixture-of-experts demo model: Qwen3-MoE-style (q/k norms, every layer sparse), bf16,
// 4 layers, hidden 256, 8 heads over 2 kv heads, vocab 512, 16 experts of width 128, 4 per token, normalised
// top-k weights.
func DemoMoEConfig() Config {
	return Config{Architecture: ArchQwen3MoE, Vocab: 512, Hidden: 256, Intermediate: 512, Layers: 4, Heads: 8,
		KVHeads: 2, HeadDim: 32, RopeTheta: 1e6, Eps: 1e-6, MaxPositions: 256, DType: capture.BF16, QKNorm: true,
		Experts: 16, ExpertsPerTok: 4, MoEIntermediate: 128, NormTopK: true, SparseStep: 1}
}

// demoFirstFlip is where the router-split-k demo's first routing flip is (TestDemoRoutingFlip checks it).
const demoFirstFlip = "layers.1.mlp.experts"

// DemoModelConfig is the config of demo model ("" is the dense one, unless the fault needs a mixture-of-experts
// model: then the MoE one).
func DemoModelConfig(model, fault string) (Config, error) {
	switch model {
	case "":
		if f, err := FaultByName(fault); err == nil && f.MoE {
			return DemoMoEConfig(), nil
		}
		return DemoConfig(), nil
	case DemoDense:
		if f, err := FaultByName(fault); err == nil && f.MoE {
			return Config{}, fmt.Errorf("engine: demo: fault %s needs the MoE model (--model moe)", fault)
		}
		return DemoConfig(), nil
	case DemoMoE:
		return DemoMoEConfig(), nil
	}
	return Config{}, fmt.Errorf("engine: demo: unknown model %q (dense or moe)", model)
}

// DemoTCHeadDim is the head dim of the tc profile's demo models: the CUDA tc attention kernel serves head dims 64
// and 128, the demo's 32 it does not, so `demo --profile tc` writes the same model with 4 heads of 64 (over 1 kv
// head) in place of 8 of 32 over 2 (the same widths: hidden, q and kv projections unchanged in size).
const DemoTCHeadDim = 64

// DemoConfigFor is DemoModelConfig for a demo run with profile p: the tc profile's demo has heads of
// DemoTCHeadDim (docs/arithmetic.md tc.7); every other profile's is DemoModelConfig's.
func DemoConfigFor(model, fault string, p kernels.Profile) (Config, error) {
	cfg, err := DemoModelConfig(model, fault)
	if err != nil || p != kernels.TC {
		return cfg, err
	}
	cfg.Heads, cfg.KVHeads = cfg.Heads*cfg.HeadDim/DemoTCHeadDim, cfg.KVHeads*cfg.HeadDim/DemoTCHeadDim
	cfg.HeadDim = DemoTCHeadDim
	return cfg, nil
}

// DemoPromptSet returns the demo's prompts and their new-token counts: different lengths, so that sequences
// finish at different steps.
func DemoPromptSet(cfg Config) (prompts [][]int32, maxNew []int) {
	rng := splitmix64(DemoSeed ^ 0x9009)
	for i := 0; i < DemoPrompts; i++ {
		n := 3 + (i*5)%10
		p := make([]int32, n)
		for j := range p {
			p[j] = int32(rng.next() % uint64(cfg.Vocab))
		}
		prompts = append(prompts, p)
		maxNew = append(maxNew, 4+(i*3)%9)
	}
	return prompts, maxNew
}

// CheckDemoFault validates a demo fault and its layer: "" and "none" plant nothing; a layered fault's layer
// must be one of the demo model's.
func CheckDemoFault(fault string, layer int) error {
	if fault == "" || fault == "none" {
		return nil
	}
	f, err := FaultByName(fault)
	if err != nil {
		return err
	}
	if n := DemoConfig().Layers; f.Layered && (layer < 0 || layer >= n) {
		return fmt.Errorf("engine: demo: fault %s: layer %d outside the demo model's layers 0..%d", f.Name, layer, n-1)
	}
	return nil
}

// DemoOptions configure Demo.
type DemoOptions struct {
	Model     string          // DemoDense (also "") or DemoMoE; a fault that needs experts picks DemoMoE
	Fault     string          // a Faults() name, or "" (or "none") for none
	Layer     int             // the layer of a layered fault
	Profile   kernels.Profile // both sides' kernels (default canonical)
	Overwrite bool            // replace DIR's checkpoint/, trainer/ and sampler/ if DIR is not empty
	Backend   BackendFactory  // nil: CPU
	// Collectives makes the trainer's TP communicators (nil: the CPU transport); CUDACollectives puts them on
	// the GPUs.
	Collectives CollectivesFactory
}

// DemoTrainerTP is the trainer's TP degree for a fault: 4 for ring-allreduce (with 2 ranks the ring and the tree
// add the same two partials), else 2.
func DemoTrainerTP(fault string) int {
	if fault == "ring-allreduce" {
		return 4
	}
	return 2
}

// Demo writes DIR/checkpoint (the demo model), DIR/sampler (a continuous-batching rollout at TP 1 with
// DemoSlots slots) and DIR/trainer (the trainer's recomputation of those sequences: one prefill at batch 8, TP 2).
// With the canonical kernels and no fault the two captures are bitwise identical in every op.
func Demo(dir string, opts DemoOptions) error {
	if err := CheckDemoFault(opts.Fault, opts.Layer); err != nil {
		return err
	}
	cfg, err := DemoConfigFor(opts.Model, opts.Fault, opts.Profile)
	if err != nil {
		return err
	}
	if opts.Fault == "none" {
		opts.Fault = ""
	}
	if err := prepareDemoDir(dir, opts.Overwrite); err != nil {
		return err
	}
	m := NewRandom(cfg, DemoSeed)
	if err = m.Save(filepath.Join(dir, "checkpoint")); err != nil {
		return err
	}
	prompts, maxNew := DemoPromptSet(cfg)
	ctx := context.Background()
	run := RunOptions{Profile: opts.Profile, Seed: DemoSampSeed, Step: DemoStep, Fault: opts.Fault,
		FaultLayer: opts.Layer, Backend: opts.Backend, Collectives: opts.Collectives}
	so := SampleOptions{RunOptions: run, Slots: DemoSlots, MaxNew: maxNew}
	so.TP = 1
	so.CaptureDir = filepath.Join(dir, SideSampler)
	out, err := m.Sample(ctx, prompts, so)
	if err != nil {
		return err
	}
	var seqs [][]int32
	var plen []int
	for _, s := range out.Seqs {
		seqs = append(seqs, s.Tokens)
		plen = append(plen, s.Prompt)
	}
	to := TrainOptions{RunOptions: run, Batch: len(seqs), PromptLens: plen}
	to.TP = DemoTrainerTP(opts.Fault)
	to.CaptureDir = filepath.Join(dir, SideTrainer)
	_, err = m.Train(ctx, seqs, to)
	return err
}

// prepareDemoDir creates dir, refusing a non-empty one unless overwrite (then only the demo's own
// subdirectories are removed).
func prepareDemoDir(dir string, overwrite bool) error {
	ents, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("engine: demo: %v", err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("engine: demo: %v", err)
	case len(ents) > 0 && !overwrite:
		return fmt.Errorf("engine: demo: %s is not empty (use overwrite to replace its checkpoint/, trainer/ and sampler/)", dir)
	}
	for _, sub := range []string{"checkpoint", SideTrainer, SideSampler} {
		if err := os.RemoveAll(filepath.Join(dir, sub)); err != nil {
			return fmt.Errorf("engine: demo: %v", err)
		}
	}
	return nil
}

// demoComplete names the file written into a cached demo directory once it is whole.
const demoComplete = ".bitalign-demo-complete"

// DemoCacheDir is where CachedDemo keeps the demo of a fault ("" or "none": the identical pair):
// os.UserCacheDir()/bitalign/demo/<fault>-L<layer>.
func DemoCacheDir(fault string, layer int) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("engine: demo: no cache directory: %w", err)
	}
	name := "identical"
	if fault != "" && fault != "none" {
		name = fault + "-L" + strconv.Itoa(layer)
	}
	return filepath.Join(cache, "bitalign", "demo", name), nil
}

// CachedDemo makes sure dir holds the demo of (fault, layer): unless a complete one is already there, it is
// generated on the CPU into a temporary sibling, marked complete and renamed into place, so an interrupted run
// leaves nothing half-made. alive is called every 200 ms while generating, with the time spent.
func CachedDemo(ctx context.Context, dir, fault string, layer int, alive func(time.Duration)) error {
	if err := CheckDemoFault(fault, layer); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, demoComplete)); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("engine: demo: %w", err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), filepath.Base(dir)+".tmp-")
	if err != nil {
		return fmt.Errorf("engine: demo: %w", err)
	}
	defer os.RemoveAll(tmp) // nothing left once renamed
	done := make(chan error, 1)
	go func() { done <- Demo(tmp, DemoOptions{Fault: fault, Layer: layer, Overwrite: true}) }()
	start := time.Now()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		alive(time.Since(start))
		select {
		case err = <-done:
			break wait
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, demoComplete), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return fmt.Errorf("engine: demo: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, statErr := os.Stat(filepath.Join(dir, demoComplete)); statErr == nil {
			return nil // another bitalign finished first
		}
		os.RemoveAll(dir) // a stale, incomplete demo: replace it
		if err := os.Rename(tmp, dir); err != nil {
			return fmt.Errorf("engine: demo: %w", err)
		}
	}
	return nil
}
