package engine

import (
	"os"
	"path/filepath"
	"testing"

	"bitalign/kernels"
)

// requireTCEnv, set to 1 (scripts/gpu.sh engine, with the embedded or the ptx step's fresh tc PTX), turns a
// missing tc module into a failure instead of a skip (as kernels/cuda's tc tests).
const requireTCEnv = "BITALIGN_REQUIRE_TC"

// tcGPUConfigs are tcConfigs with heads of 64 (the head dims the CUDA tc attention kernel serves: 64 and 128).
func tcGPUConfigs() []Config {
	cs := tcConfigs()
	for i := range cs {
		cs[i].HeadDim = 64
	}
	return cs
}

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
		t.Skipf("tc kernels not loaded (the embedded kernels/cuda/tc PTX, or BITALIGN_PTX_DIR=dir with dir/kernels/cuda/tc from make ptx PTX_OUT=dir; %s=1 makes this a failure): %v; skipped, not passed", requireTCEnv, err)
	}
	return gpu
}

// TestCUDATCMatchesCPU: the CPU↔GPU row of the tc profile (docs/arithmetic.md tc.5: the CPU engine's emulated
// k-steps are the H200's bits). Sampler (3 slots, continuous batching) and trainer (batch 3) on the GPU give the
// CPU's outputs and captures bitwise at TP 1, 2 and 4 (ranks sharing the GPUs), for dense Llama, Qwen2, Qwen3 and
// the two MoE models, all bf16 with heads of 64; the first differing op, element and ULP distance are reported.
func TestCUDATCMatchesCPU(t *testing.T) {
	gpu := tcCUDAOrSkip(t)
	for _, cfg := range tcGPUConfigs() {
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
	cfg, err := DemoConfigFor("", "", kernels.TC) // heads of 64: the CUDA tc attention's head dims
	if err != nil {
		t.Fatal(err)
	}
	cpuDir, gpuDir := t.TempDir(), t.TempDir()
	if err := Demo(cpuDir, DemoOptions{Profile: kernels.TC}); err != nil {
		t.Fatal(err)
	}
	if err := Demo(gpuDir, DemoOptions{Profile: kernels.TC, Backend: gpu, Collectives: GPUCollectives(gpu, DemoTrainerTP(""))}); err != nil {
		t.Fatal(err)
	}
	for _, side := range []string{SideSampler, SideTrainer} {
		if d := compare(t, cfg, filepath.Join(cpuDir, side), filepath.Join(gpuDir, side)); d != nil {
			t.Errorf("tc demo %s: GPU differs from CPU at %v", side, d)
		}
	}
	if d := compare(t, cfg, filepath.Join(gpuDir, SideTrainer), filepath.Join(gpuDir, SideSampler)); d != nil {
		t.Errorf("tc demo on the GPU: trainer and sampler diverge at %v", d)
	}
}

// TestCUDAInvarianceTC: the invariance matrix (batch 1..8, TP 1/2/4/8 with ranks sharing the GPUs, prefill vs
// decode, continuous vs static batching, run vs run) on the GPU with the tc profile, bitwise, for a dense and an
// MoE bf16 model (-short: the dense one); and the standard profile on the same model and GPU fails it (the control).
func TestCUDAInvarianceTC(t *testing.T) {
	gpu := tcCUDAOrSkip(t)
	cfgs := []Config{tcGPUConfigs()[0], tcGPUConfigs()[3]} // Llama, Qwen3-MoE
	if testing.Short() {
		cfgs = cfgs[:1]
	}
	for _, cfg := range cfgs {
		t.Run(cfg.Architecture, func(t *testing.T) { runMatrixOn(t, cfg, kernels.TC, gpu) })
	}
	t.Run("standard-control", func(t *testing.T) { runMatrixOn(t, tcGPUConfigs()[0], kernels.Standard, gpu) })
}

// TestCUDATCMatmulBackend: the CUDA backend's tc matmuls (float32 activations narrowed to bf16 bits on the
// device, a bf16 weight buffer or a float32 one, views at odd offsets) give the CPU backend's bits: Matmul
// (column-parallel chain; bias, bf16 and float32 output) and MatmulPartial at TP 1, 2, 4 and 8 (each rank's
// subtree, unrounded). Independent of the tc attention kernel.
func TestCUDATCMatmulBackend(t *testing.T) {
	gpuF := tcCUDAOrSkip(t)
	gpu, err := gpuF(0)
	if err != nil {
		t.Fatal(err)
	}
	cpu := NewCPU()
	for _, s := range []struct{ M, K, N int }{{1, 80, 48}, {7, 192, 80}, {70, 200, 33}, {130, 1024, 64}} {
		M, K, N := s.M, s.K, s.N
		x, wv, bias := tcRand(M*K, 11), tcRand((N+1)*K, 12), tcRand(N, 13)
		wts := kernels.RoundWeights(kernels.BF16, wv)
		for _, c := range []struct {
			name string
			run  func(be Backend, out, xb, w, bb Buf)
		}{
			{"column bf16 out + bias", func(be Backend, out, xb, w, bb Buf) { be.Matmul(kernels.TC, out, xb, w, bb, M, K, N, kernels.BF16) }},
			{"column f32 out", func(be Backend, out, xb, w, bb Buf) { be.Matmul(kernels.TC, out, xb, w, nil, M, K, N, kernels.F32) }},
			{"row tp 1", func(be Backend, out, xb, w, bb Buf) { be.MatmulPartial(kernels.TC, out, xb, w, M, K, N, 0, 1) }},
		} {
			// the weight: its bf16 bits from row 0, from row 1 (another alignment), or a float32 buffer of its values
			for _, wk := range []string{"bf16 row 0", "bf16 row 1", "float32"} {
				var outs [2][]float32
				for i, be := range []Backend{cpu, gpu} {
					up := func(v []float32) Buf { b := be.Alloc(len(v)); be.Upload(b, v); return b }
					w := be.UploadWeights(wts)
					wv := be.View(w, 0, N*K)
					switch wk {
					case "bf16 row 1":
						wv = be.View(w, K, N*K)
					case "float32":
						wv = up(wts.Float32()[:N*K])
					}
					xb, bb, out := up(x), up(bias), be.Alloc(M*N)
					c.run(be, out, xb, wv, bb)
					outs[i] = make([]float32, M*N)
					if err := be.Download(outs[i], out); err != nil {
						t.Fatalf("%s M=%d K=%d N=%d on %s: %v", c.name, M, K, N, be.Name(), err)
					}
					for _, b := range []Buf{w, wv, xb, bb, out} {
						be.Free(b)
					}
				}
				if i, ulp, differ := kernels.FirstDiff(outs[1], outs[0]); differ {
					t.Errorf("%s M=%d K=%d N=%d (weight %s): GPU differs from CPU at %d (row %d col %d), %d ULP",
						c.name, M, K, N, wk, i, i/N, i%N, ulp)
				}
			}
		}
		// row-parallel over tp ranks: rank r's columns [r·K/tp, (r+1)·K/tp) of x and w
		for _, tp := range []int{2, 4, 8} {
			kl := K / tp
			if K%tp != 0 {
				continue
			}
			for r := 0; r < tp; r++ {
				xl, wl := make([]float32, M*kl), make([]float32, N*kl)
				for m := 0; m < M; m++ {
					copy(xl[m*kl:(m+1)*kl], x[m*K+r*kl:m*K+(r+1)*kl])
				}
				for n := 0; n < N; n++ {
					copy(wl[n*kl:(n+1)*kl], wv[n*K+r*kl:n*K+(r+1)*kl])
				}
				var outs [2][]float32
				for i, be := range []Backend{cpu, gpu} {
					xb, out := be.Alloc(M*kl), be.Alloc(M*N)
					be.Upload(xb, xl)
					w := be.UploadWeights(kernels.RoundWeights(kernels.BF16, wl))
					be.MatmulPartial(kernels.TC, out, xb, w, M, kl, N, r, tp)
					outs[i] = make([]float32, M*N)
					if err := be.Download(outs[i], out); err != nil {
						t.Fatalf("partial M=%d K=%d N=%d tp=%d rank %d on %s: %v", M, K, N, tp, r, be.Name(), err)
					}
					for _, b := range []Buf{xb, w, out} {
						be.Free(b)
					}
				}
				if i, ulp, differ := kernels.FirstDiff(outs[1], outs[0]); differ {
					t.Errorf("partial M=%d K=%d N=%d tp=%d rank %d: GPU differs from CPU at %d, %d ULP", M, K, N, tp, r, i, ulp)
				}
			}
		}
	}
}
