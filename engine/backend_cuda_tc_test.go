package engine

import (
	"os"
	"path/filepath"
	"testing"

	"bitalign/kernels"
)

// requireTCEnv, set to 1 (scripts/gpu.sh engine, which builds the tc PTX first), turns a missing tc module into
// a failure instead of a skip (as kernels/cuda's tc tests).
const requireTCEnv = "BITALIGN_REQUIRE_TC"

// tcCUDAOrSkip returns the CUDA backend factory when the loaded PTX has the tc matmul (cudakernels.HasTC),
// else skips (fails with BITALIGN_REQUIRE_TC=1).
func tcCUDAOrSkip(t *testing.T) BackendFactory {
	t.Helper()
	gpu := cudaOrSkip(t)
	cd, err := openCUDADevice(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := cd.k.HasTC(); err != nil {
		if os.Getenv(requireTCEnv) == "1" {
			t.Fatalf("%s=1 but the tc kernels did not load: %v", requireTCEnv, err)
		}
		t.Skipf("tc kernels not loaded (make ptx-tc PTX_OUT=dir, BITALIGN_PTX_DIR=dir; %s=1 makes this a failure): %v; skipped, not passed", requireTCEnv, err)
	}
	return gpu
}

// TestCUDATCMatchesCPU: the CPU↔GPU row of the tc profile (docs/arithmetic.md tc.5: the CPU engine's emulated
// k-steps are the H200's bits). Sampler (3 slots, continuous batching) and trainer (batch 3) on the GPU give the
// CPU's outputs and captures bitwise at TP 1, 2 and 4 (ranks sharing the GPUs), for dense Llama, Qwen2, Qwen3 and
// the two MoE models, all bf16; the first differing op, element and ULP distance are reported.
func TestCUDATCMatchesCPU(t *testing.T) {
	gpu := tcCUDAOrSkip(t)
	for _, cfg := range tcConfigs() {
		m := NewRandom(cfg, 5)
		ps, mn := tinyPrompts(cfg)
		for _, tp := range []int{1, 2, 4} {
			cs, ct, csd, ctd := sampleThenTrain(t, m, ps, mn, tp, kernels.TC, nil)
			gs, gt, gsd, gtd := sampleThenTrain(t, m, ps, mn, tp, kernels.TC, gpu)
			if msg := sameOutputs(cs, gs); msg != "" {
				t.Errorf("%s tc tp=%d sampler: GPU vs CPU: %s", cfg.Architecture, tp, msg)
			}
			if msg := sameOutputs(ct, gt); msg != "" {
				t.Errorf("%s tc tp=%d trainer: GPU vs CPU: %s", cfg.Architecture, tp, msg)
			}
			for _, pair := range [][2]string{{csd, gsd}, {ctd, gtd}} {
				if d := compare(t, cfg, pair[0], pair[1]); d != nil {
					t.Errorf("%s tc tp=%d: GPU capture differs from the CPU's at %v", cfg.Architecture, tp, d)
				}
			}
		}
	}
}

// TestCUDADemoTC: `bitalign demo --profile tc` on the GPU writes the CPU's captures bitwise, and its trainer
// (TP 2, batch 8) and sampler (TP 1, continuous batching) agree bitwise with each other.
func TestCUDADemoTC(t *testing.T) {
	gpu := tcCUDAOrSkip(t)
	cpuDir, gpuDir := t.TempDir(), t.TempDir()
	if err := Demo(cpuDir, DemoOptions{Profile: kernels.TC}); err != nil {
		t.Fatal(err)
	}
	if err := Demo(gpuDir, DemoOptions{Profile: kernels.TC, Backend: gpu, Collectives: GPUCollectives(gpu, DemoTrainerTP(""))}); err != nil {
		t.Fatal(err)
	}
	for _, side := range []string{SideSampler, SideTrainer} {
		if d := compare(t, DemoConfig(), filepath.Join(cpuDir, side), filepath.Join(gpuDir, side)); d != nil {
			t.Errorf("tc demo %s: GPU differs from CPU at %v", side, d)
		}
	}
	if d := compare(t, DemoConfig(), filepath.Join(gpuDir, SideTrainer), filepath.Join(gpuDir, SideSampler)); d != nil {
		t.Errorf("tc demo on the GPU: trainer and sampler diverge at %v", d)
	}
}

// TestCUDAInvarianceTC: the invariance matrix (batch 1..8, TP 1/2/4/8 with ranks sharing the GPUs, prefill vs
// decode, continuous vs static batching, run vs run) on the GPU with the tc profile, bitwise, for a dense and an
// MoE bf16 model (-short: the dense one); and the standard profile on the same model and GPU fails it (the control).
func TestCUDAInvarianceTC(t *testing.T) {
	gpu := tcCUDAOrSkip(t)
	cfgs := []Config{tcTinyConfig(ArchLlama), tcTinyConfig(ArchQwen3MoE)}
	if testing.Short() {
		cfgs = cfgs[:1]
	}
	for _, cfg := range cfgs {
		t.Run(cfg.Architecture, func(t *testing.T) { runMatrixOn(t, cfg, kernels.TC, gpu) })
	}
	t.Run("standard-control", func(t *testing.T) { runMatrixOn(t, tcTinyConfig(ArchLlama), kernels.Standard, gpu) })
}
