package engine

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"

	"bitalign/kernels"
)

// cpuSeconds is this process's user + system CPU time: tokens per CPU-second stay meaningful when other
// processes share the cores (wall-clock tokens/s do not).
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// demoSequences is the demo rollout's sequences (no capture).
func demoSequences(b *testing.B, m *Model) ([][]int32, []int, int) {
	prompts, maxNew := DemoPromptSet(m.Config)
	out, err := m.Sample(context.Background(), prompts, SampleOptions{RunOptions: RunOptions{Seed: DemoSampSeed}, Slots: DemoSlots, MaxNew: maxNew})
	if err != nil {
		b.Fatal(err)
	}
	var seqs [][]int32
	var plen []int
	tokens := 0
	for _, s := range out.Seqs {
		seqs = append(seqs, s.Tokens)
		plen = append(plen, s.Prompt)
		tokens += len(s.Tokens) - 1
	}
	return seqs, plen, tokens
}

func benchTrain(b *testing.B, tp int, capture bool) {
	benchTrainProfile(b, tp, capture, kernels.Canonical)
}

func benchTrainProfile(b *testing.B, tp int, capture bool, p kernels.Profile) {
	m := NewRandom(DemoConfig(), DemoSeed)
	seqs, plen, tokens := demoSequences(b, m)
	b.ResetTimer()
	cpu0 := cpuSeconds()
	for i := 0; i < b.N; i++ {
		o := TrainOptions{RunOptions: RunOptions{TP: tp, Seed: DemoSampSeed, Profile: p}, PromptLens: plen}
		if capture {
			b.StopTimer()
			o.CaptureDir = filepath.Join(b.TempDir(), "t")
			b.StartTimer()
		}
		if _, err := m.Train(context.Background(), seqs, o); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(tokens*b.N)/b.Elapsed().Seconds(), "tokens/s")
	b.ReportMetric(float64(tokens*b.N)/(cpuSeconds()-cpu0), "tokens/cpu-s")
}

// BenchmarkTrainDemo: the demo trainer's forward (8 sequences packed, ~100 positions) without capture.
func BenchmarkTrainDemoTP1(b *testing.B) { benchTrain(b, 1, false) }
func BenchmarkTrainDemoTP2(b *testing.B) { benchTrain(b, 2, false) }

// BenchmarkTrainDemoTC: the same forward at TP 1 with the tc profile (the CPU's emulated tensor-core k-steps,
// docs/arithmetic.md tc.5), beside BenchmarkTrainDemoTP1.
func BenchmarkTrainDemoTC(b *testing.B) { benchTrainProfile(b, 1, false, kernels.TC) }

// BenchmarkTrainDemoTP2Capture includes writing both rank files of the capture.
func BenchmarkTrainDemoTP2Capture(b *testing.B) { benchTrain(b, 2, true) }

// BenchmarkSampleDemo: the demo sampler (prefill + decode, 3 slots, TP 1) without capture.
func BenchmarkSampleDemo(b *testing.B) {
	m := NewRandom(DemoConfig(), DemoSeed)
	prompts, maxNew := DemoPromptSet(m.Config)
	_, _, tokens := demoSequences(b, m)
	b.ResetTimer()
	cpu0 := cpuSeconds()
	for i := 0; i < b.N; i++ {
		if _, err := m.Sample(context.Background(), prompts, SampleOptions{RunOptions: RunOptions{Seed: DemoSampSeed}, Slots: DemoSlots, MaxNew: maxNew}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(tokens*b.N)/b.Elapsed().Seconds(), "tokens/s")
	b.ReportMetric(float64(tokens*b.N)/(cpuSeconds()-cpu0), "tokens/cpu-s")
}

// BenchmarkDemo is the whole `bitalign demo`: checkpoint, sampler capture, trainer capture.
func BenchmarkDemo(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if err := Demo(filepath.Join(b.TempDir(), "demo"), DemoOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
