package engine

import (
	"context"
	"path/filepath"
	"testing"

	"bitalign/capture"
	"bitalign/kernels"
)

// invarianceCase is one way of computing the reference rollout's sequences.
type invarianceCase struct {
	name string
	run  func(m *Model, seqs [][]int32, plen []int, p kernels.Profile, be BackendFactory, dir string) (*Output, error)
	// standardDiffers: with the standard profile this case must differ from the reference (vendor kernels
	// are not invariant to it); false: it must still be identical (run-to-run determinism).
	standardDiffers bool
}

func trainCase(name string, tp, batch int, differs bool) invarianceCase {
	return invarianceCase{name, func(m *Model, seqs [][]int32, plen []int, p kernels.Profile, be BackendFactory, dir string) (*Output, error) {
		o := TrainOptions{RunOptions: runOn(be, tp, p, dir), Batch: batch, PromptLens: plen}
		return m.Train(context.Background(), seqs, o)
	}, differs}
}

func sampleCase(name string, tp, slots int, static, differs bool) invarianceCase {
	return invarianceCase{name, func(m *Model, seqs [][]int32, plen []int, p kernels.Profile, be BackendFactory, dir string) (*Output, error) {
		ps, mn := tinyPrompts(m.Config)
		o := SampleOptions{RunOptions: runOn(be, tp, p, dir), Slots: slots, MaxNew: mn, Static: static}
		return m.Sample(context.Background(), ps, o)
	}, differs}
}

// runOn is the matrix's run options at TP tp on backend be (nil: the CPU), its collectives on the GPUs when
// there is one per rank (GPUCollectives), else the CPU transport (ranks sharing a GPU).
func runOn(be BackendFactory, tp int, p kernels.Profile, dir string) RunOptions {
	return RunOptions{TP: tp, Profile: p, Seed: 9, Step: 3, CaptureDir: dir, Backend: be, Collectives: GPUCollectives(be, tp)}
}

// invarianceMatrix: the reference is a trainer prefill of all 8 sequences at TP 1.
func invarianceMatrix() []invarianceCase {
	cs := []invarianceCase{trainCase("run-vs-run", 1, 8, false)}
	for b := 1; b <= 7; b++ {
		cs = append(cs, trainCase("train-batch-"+itoa(b), 1, b, true))
	}
	for _, tp := range []int{2, 4, 8} {
		cs = append(cs, trainCase("train-tp-"+itoa(tp), tp, 8, true))
	}
	cs = append(cs,
		trainCase("train-tp-4-batch-3", 4, 3, true),
		sampleCase("sample-continuous-3-slots", 1, 3, false, true),
		sampleCase("sample-static-3-slots", 1, 3, true, true),
		sampleCase("sample-one-at-a-time", 1, 1, false, true),
		sampleCase("sample-all-slots", 1, 8, false, true),
		sampleCase("sample-tp-2", 2, 3, false, true),
		sampleCase("sample-tp-4", 4, 5, false, true),
		sampleCase("sample-tp-8-static", 8, 4, true, true),
	)
	return cs
}

func runMatrix(t *testing.T, cfg Config, p kernels.Profile) { runMatrixOn(t, cfg, p, nil) }

// runMatrixOn is runMatrix on backend be (nil: the CPU): every case, the reference and the rollout run there.
func runMatrixOn(t *testing.T, cfg Config, p kernels.Profile, be BackendFactory) {
	m := NewRandom(cfg, 5)
	root := t.TempDir()
	refRoll := filepath.Join(root, "rollout")
	seqs, plen, rollOut := rolloutOn(t, m, p, be, refRoll)
	refDir := filepath.Join(root, "ref")
	ref, err := trainCase("ref", 1, 8, false).run(m, seqs, plen, p, be, refDir)
	if err != nil {
		t.Fatal(err)
	}
	exact := p != kernels.Standard // canonical and tc: invariant by contract (docs/arithmetic.md §3, §18)
	if exact {
		if d := compare(t, cfg, refDir, refRoll); d != nil {
			t.Fatalf("trainer vs the rollout's own sampler capture: first divergence %v", d)
		}
		if diff := sameOutputs(ref, rollOut); diff != "" {
			t.Fatalf("trainer vs sampler outputs: %s", diff)
		}
	}
	for i, c := range invarianceMatrix() {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(root, "case"+itoa(i)+c.name)
			out, err := c.run(m, seqs, plen, p, be, dir)
			if err != nil {
				t.Fatal(err)
			}
			d := compare(t, cfg, refDir, dir)
			diff := sameOutputs(ref, out)
			switch {
			case exact && (d != nil || diff != ""):
				t.Fatalf("%v kernels: first divergence %v; outputs: %q", p, d, diff)
			case p == kernels.Standard && c.standardDiffers && d == nil:
				t.Fatalf("standard kernels: expected a divergence, captures identical")
			case p == kernels.Standard && !c.standardDiffers && (d != nil || diff != ""):
				t.Fatalf("standard kernels are not deterministic run to run: %v %q", d, diff)
			case p == kernels.Standard:
				t.Logf("standard: first divergence %v", d)
			}
		})
	}
}

// TestInvarianceCanonical: with the canonical kernels every op, log-probability and sample is bitwise
// identical across batch 1..8, TP 1/2/4/8, prefill vs decode, continuous vs static batching and run vs run.
func TestInvarianceCanonical(t *testing.T) {
	qwen3 := tinyConfig(ArchQwen3, capture.F32)
	qwen3.QKVBias, qwen3.OBias = true, true // attention_bias: q/k/v and the row-parallel o_proj
	for _, cfg := range []Config{tinyConfig(ArchLlama, capture.BF16), qwen3, tinyConfig(ArchQwen2, capture.F16),
		tinyConfig(ArchQwen3MoE, capture.BF16), tinyConfig(ArchQwen3MoE, capture.F32), tinyConfig(ArchQwen2MoE, capture.BF16)} {
		t.Run(cfg.Architecture+"-"+cfg.DType.String(), func(t *testing.T) { runMatrix(t, cfg, kernels.Canonical) })
	}
}

// TestInvarianceStandard: the same matrix with vendor-like kernels shows the differences the canonical
// profile removes (float32 model, so no bf16 rounding can hide them).
func TestInvarianceStandard(t *testing.T) {
	for _, cfg := range []Config{tinyConfig(ArchLlama, capture.F32), tinyConfig(ArchQwen3MoE, capture.F32)} {
		t.Run(cfg.Architecture, func(t *testing.T) { runMatrix(t, cfg, kernels.Standard) })
	}
}
