package engine

import (
	"context"
	"path/filepath"
	"testing"

	"bitalign/capture"
	"bitalign/internal/testgpu"
	"bitalign/kernels"
)

// cudaOrSkip returns the CUDA backend factory, skipping without a GPU (failing instead when
// BITALIGN_REQUIRE_GPU=1, as on the GPU machine).
func cudaOrSkip(t *testing.T) BackendFactory {
	t.Helper()
	f, desc, err := CUDAFactory()
	if err != nil {
		if !testgpu.Required() && !IsGPUUnavailable(err) {
			t.Fatalf("CUDAFactory failed without cuda.ErrUnavailable: %v", err)
		}
		testgpu.SkipOrFail(t, err, "no GPU here (%v): skipped, not passed", err)
	}
	t.Logf("GPU: %s", desc)
	return f
}

func TestSelectBackend(t *testing.T) {
	if f, name, err := SelectBackend("cpu"); f != nil || name != "cpu" || err != nil {
		t.Errorf("cpu: %v %q %v", f != nil, name, err)
	}
	if _, _, err := SelectBackend("tpu"); err == nil {
		t.Error("unknown device accepted")
	}
	f, name, err := SelectBackend("auto")
	if err != nil {
		t.Fatalf("auto never fails: %v", err)
	}
	_, _, cerr := SelectBackend("cuda")
	if (f == nil) != (cerr != nil) {
		t.Errorf("auto chose %q but cuda gave %v", name, cerr)
	}
	t.Logf("auto: %s", name)
}

// The demo (sampler at TP 1 with continuous batching, trainer at TP 2 and batch 8) on the GPU writes captures
// bitwise equal to the CPU's, for the canonical and standard profiles and for every fault.
func TestCUDADemoMatchesCPU(t *testing.T) {
	gpu := cudaOrSkip(t)
	type tc struct {
		name  string
		opts  DemoOptions
		short bool
	}
	cases := []tc{{"canonical", DemoOptions{}, true}, {"standard", DemoOptions{Profile: kernels.Standard}, true}}
	for _, f := range Faults() {
		cases = append(cases, tc{"fault " + f.Name, DemoOptions{Fault: f.Name, Layer: 1}, f.Name == "fast-exp"})
	}
	for _, c := range cases {
		if testing.Short() && !c.short {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			cpuDir, gpuDir := t.TempDir(), t.TempDir()
			if err := Demo(cpuDir, c.opts); err != nil {
				t.Fatal(err)
			}
			o := c.opts
			o.Backend = gpu
			if err := Demo(gpuDir, o); err != nil {
				t.Fatal(err)
			}
			cfg, err := DemoModelConfig(c.opts.Model, c.opts.Fault) // the MoE demo for the MoE faults
			if err != nil {
				t.Fatal(err)
			}
			for _, side := range []string{SideSampler, SideTrainer} {
				if d := compare(t, cfg, filepath.Join(cpuDir, side), filepath.Join(gpuDir, side)); d != nil {
					t.Errorf("%s: GPU differs from CPU at %s (index %d) seq %d pos %d elem %d, %d ULP",
						side, d.Op, d.Index, d.Seq, d.Pos, d.Elem, d.ULP)
				}
			}
			if c.name == "canonical" {
				if d := compare(t, DemoConfig(), filepath.Join(gpuDir, SideTrainer), filepath.Join(gpuDir, SideSampler)); d != nil {
					t.Errorf("GPU trainer and sampler diverge at %s seq %d pos %d", d.Op, d.Seq, d.Pos)
				}
			}
		})
	}
}

// TestCUDAMoEMatchesCPU: Qwen3-MoE and Qwen2-MoE (router, routing on the host, each expert's gathered tokens through the
// canonical matmul kernels, the combine) on the GPU gives the CPU's bits at TP 1, 2 and 4, canonical and standard
// (the standard grouped GEMM's split-K from the tokens per expert is the CPU reference's too), and the MoE demo
// with router-split-k (bf16 router logits from a standard matmul) is bitwise the CPU's.
func TestCUDAMoEMatchesCPU(t *testing.T) {
	gpu := cudaOrSkip(t)
	for _, arch := range []string{ArchQwen3MoE, ArchQwen2MoE} {
		cudaMoEArch(t, gpu, arch)
	}
	cpuDir, gpuDir := t.TempDir(), t.TempDir()
	if err := Demo(cpuDir, DemoOptions{Model: DemoMoE, Fault: "router-split-k"}); err != nil {
		t.Fatal(err)
	}
	if err := Demo(gpuDir, DemoOptions{Model: DemoMoE, Fault: "router-split-k", Backend: gpu}); err != nil {
		t.Fatal(err)
	}
	for _, side := range []string{SideSampler, SideTrainer} {
		if d := compare(t, DemoMoEConfig(), filepath.Join(cpuDir, side), filepath.Join(gpuDir, side)); d != nil {
			t.Errorf("MoE demo %s: GPU differs from CPU at %s seq %d pos %d elem %d, %d ULP", side, d.Op, d.Seq, d.Pos, d.Elem, d.ULP)
		}
	}
}

// cudaMoEArch runs a tiny MoE model of arch on the CPU and the GPU (TP 1, 2, 4; canonical and standard) and
// compares outputs and captures bitwise (Qwen2-MoE's shared-expert gate is an N = 1 matmul).
func cudaMoEArch(t *testing.T, gpu BackendFactory, arch string) {
	cfg := tinyConfig(arch, capture.BF16)
	m := NewRandom(cfg, 5)
	ps, mn := tinyPrompts(cfg)
	for _, p := range []kernels.Profile{kernels.Canonical, kernels.Standard} {
		for _, tp := range []int{1, 2, 4} {
			cs, ct, csd, ctd := sampleThenTrain(t, m, ps, mn, tp, p, nil)
			gs, gt, gsd, gtd := sampleThenTrain(t, m, ps, mn, tp, p, gpu)
			if msg := sameOutputs(cs, gs); msg != "" {
				t.Errorf("%s %s tp=%d sampler: %s", arch, p, tp, msg)
			}
			if msg := sameOutputs(ct, gt); msg != "" {
				t.Errorf("%s %s tp=%d trainer: %s", arch, p, tp, msg)
			}
			for _, pair := range [][2]string{{csd, gsd}, {ctd, gtd}} {
				if d := compare(t, cfg, pair[0], pair[1]); d != nil {
					t.Errorf("%s %s tp=%d: GPU capture differs at %s seq %d pos %d elem %d, %d ULP", arch, p, tp, d.Op, d.Seq, d.Pos, d.Elem, d.ULP)
				}
			}
		}
	}
}

// Qwen2 (q/k/v bias) and Qwen3 (q/k norm) at TP 2 and 4: trainer and sampler outputs and captures on the GPU
// equal the CPU's.
func TestCUDAArchitecturesMatchCPU(t *testing.T) {
	gpu := cudaOrSkip(t)
	for _, arch := range []string{ArchQwen2, ArchQwen3} {
		for _, tp := range []int{2, 4} {
			cfg := tinyConfig(arch, capture.BF16)
			m := NewRandom(cfg, 5)
			ps, mn := tinyPrompts(cfg)
			cs, ct, csd, ctd := sampleThenTrain(t, m, ps, mn, tp, kernels.Canonical, nil)
			gs, gt, gsd, gtd := sampleThenTrain(t, m, ps, mn, tp, kernels.Canonical, gpu)
			if msg := sameOutputs(cs, gs); msg != "" {
				t.Errorf("%s tp=%d sampler: %s", arch, tp, msg)
			}
			if msg := sameOutputs(ct, gt); msg != "" {
				t.Errorf("%s tp=%d trainer: %s", arch, tp, msg)
			}
			for _, pair := range [][2]string{{csd, gsd}, {ctd, gtd}} {
				if d := compare(t, cfg, pair[0], pair[1]); d != nil {
					t.Errorf("%s tp=%d: GPU capture differs at %s seq %d pos %d elem %d", arch, tp, d.Op, d.Seq, d.Pos, d.Elem)
				}
			}
		}
	}
}

// sampleThenTrain samples the prompts (3 slots) and trains on the result (batch 3) at TP tp with profile p on
// backend be (nil: the CPU), capturing both; it returns both outputs and both capture directories.
func sampleThenTrain(t *testing.T, m *Model, ps [][]int32, mn []int, tp int, p kernels.Profile, be BackendFactory) (*Output, *Output, string, string) {
	t.Helper()
	sd, td := t.TempDir(), t.TempDir()
	so := SampleOptions{RunOptions: RunOptions{TP: tp, Profile: p, Seed: 9, Step: 1, CaptureDir: sd, Backend: be}, Slots: 3, MaxNew: mn}
	sout, err := m.Sample(context.Background(), ps, so)
	if err != nil {
		t.Fatal(err)
	}
	seqs, plen := trainInputs(sout)
	to := TrainOptions{RunOptions: RunOptions{TP: tp, Profile: p, Seed: 9, Step: 1, CaptureDir: td, Backend: be}, Batch: 3, PromptLens: plen}
	tout, err := m.Train(context.Background(), seqs, to)
	if err != nil {
		t.Fatal(err)
	}
	return sout, tout, sd, td
}

// TestCUDAUploadWeights: weights of every stored dtype, large enough to cross several staging buffers (the
// double-buffered path) and with a size that is not a multiple of one, arrive on the GPU as their exactly
// widened values, and a matmul reading them gives the CPU backend's bits.
func TestCUDAUploadWeights(t *testing.T) {
	gpu := cudaOrSkip(t)
	be, err := gpu(0)
	if err != nil {
		t.Fatal(err)
	}
	n := 2*stageBytes/4 + 12345 // three blocks of float32 staging
	vals := make([]float32, n)
	rng := splitmix64(5)
	for i := range vals {
		vals[i] = float32(rng.uniform())
	}
	for _, dt := range []kernels.DType{kernels.BF16, kernels.F16, kernels.F32} {
		w := kernels.RoundWeights(dt, vals)
		b := be.UploadWeights(w)
		got := make([]float32, n)
		if err := be.Download(got, b); err != nil {
			t.Fatal(err)
		}
		if i, u, ok := kernels.FirstDiff(got, w.Float32()); ok {
			t.Fatalf("%v weight on the GPU: first difference at %d (%d ulp)", dt, i, u)
		}
		const M, K = 3, 1024
		N := n / K
		x := kernels.RoundWeights(kernels.BF16, vals[:M*K]).Float32()
		xb, out := be.Alloc(M*K), be.Alloc(M*N)
		be.Upload(xb, x)
		be.Matmul(kernels.Canonical, out, xb, be.View(b, 0, N*K), nil, M, K, N, kernels.BF16)
		gpuOut := make([]float32, M*N)
		if err := be.Download(gpuOut, out); err != nil {
			t.Fatal(err)
		}
		want := make([]float32, M*N)
		kernels.MatmulForwardW(kernels.Canonical, kernels.BF16, want, x, w.Slice(0, N*K), nil, M, K, N)
		if i, u, ok := kernels.FirstDiff(gpuOut, want); ok {
			t.Fatalf("%v weights: GPU matmul differs from the CPU's at %d (%d ulp)", dt, i, u)
		}
		be.Free(b)
		be.Free(xb)
		be.Free(out)
	}
}
