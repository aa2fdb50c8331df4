package engine

import (
	"context"
	"os"
	"strconv"
	"testing"

	"bitalign/capture"
	"bitalign/cuda"
)

// TP 2 on two GPUs whose all-reduces run in device memory through the nvls GPU transport: the sampler's and
// the trainer's outputs and every captured op are bitwise those of TP 1 on the CPU, TP 2 on the CPU and TP 2
// on the GPUs with host collectives.
func TestCUDACollectivesMatchCPU(t *testing.T) {
	gpu := cudaOrSkip(t)
	if n, err := cuda.DeviceCount(); err != nil || n < 2 {
		if req, _ := strconv.Atoi(os.Getenv("BITALIGN_REQUIRE_GPUS")); req >= 2 { // scripts/gpu.sh: the GPU count
			t.Fatalf("BITALIGN_REQUIRE_GPUS=%s but fewer than 2 GPUs (%d, %v)", os.Getenv("BITALIGN_REQUIRE_GPUS"), n, err)
		}
		t.Skipf("needs 2 GPUs (%d, %v): skipped, not passed", n, err)
	}
	for _, arch := range []string{ArchLlama, ArchQwen3} {
		cfg := tinyConfig(arch, capture.BF16)
		m := NewRandom(cfg, 5)
		ps, mn := tinyPrompts(cfg)
		run := func(tp int, be BackendFactory, coll CollectivesFactory) (*Output, *Output, string, string) {
			sd, td := t.TempDir(), t.TempDir()
			ro := RunOptions{TP: tp, Seed: 9, Step: 1, Backend: be, Collectives: coll}
			ro.CaptureDir = sd
			sout, err := m.Sample(context.Background(), ps, SampleOptions{RunOptions: ro, Slots: 3, MaxNew: mn})
			if err != nil {
				t.Fatal(err)
			}
			seqs, plen := trainInputs(sout)
			ro.CaptureDir = td
			tout, err := m.Train(context.Background(), seqs, TrainOptions{RunOptions: ro, Batch: 3, PromptLens: plen})
			if err != nil {
				t.Fatal(err)
			}
			return sout, tout, sd, td
		}
		rs, rt, rsd, rtd := run(1, nil, nil)
		for _, c := range []struct {
			name string
			tp   int
			be   BackendFactory
			coll CollectivesFactory
		}{
			{"cpu tp2", 2, nil, nil},
			{"gpu tp2 host collectives", 2, gpu, nil},
			{"gpu tp2 nvls gpu collectives", 2, gpu, CUDACollectives()},
		} {
			s, tr, sd, td := run(c.tp, c.be, c.coll)
			if msg := sameOutputs(rs, s); msg != "" {
				t.Errorf("%s %s sampler vs cpu tp1: %s", arch, c.name, msg)
			}
			if msg := sameOutputs(rt, tr); msg != "" {
				t.Errorf("%s %s trainer vs cpu tp1: %s", arch, c.name, msg)
			}
			for _, pair := range [][2]string{{rsd, sd}, {rtd, td}} {
				if d := compare(t, cfg, pair[0], pair[1]); d != nil {
					t.Errorf("%s %s: capture differs from cpu tp1 at %s seq %d pos %d elem %d", arch, c.name, d.Op, d.Seq, d.Pos, d.Elem)
				}
			}
		}
	}
}
