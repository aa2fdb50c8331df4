package session

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"bitalign/capture"
	"bitalign/engine"
)

// BenchmarkReplayStep times `bitalign replay` end to end on the CPU (session.ReplayStep: the capture's index,
// the checkpoint, the forward, writing the replay capture, the diff) of a generated Qwen2-style bf16 model's
// trainer capture (hidden 256, 4 layers, 8/2 heads of 32, intermediate 768, V 4096, 4 × 128 tokens, logits
// recorded: 18 MB), replayed from the full capture, from its fingerprint capture (`bitalign fingerprint`) and with
// --ops 'layers.1.*'. It uses only what the anchor has (ReplayStep with Device, Save, Ops), so the same file
// runs there side by side (docs/benchmarks.md, "Replay at size"). MB/s is the replay capture written.
func BenchmarkReplayStep(b *testing.B) {
	dir := b.TempDir()
	cfg := engine.Config{Architecture: engine.ArchQwen2, Vocab: 4096, Hidden: 256, Intermediate: 768, Layers: 4, Heads: 8,
		KVHeads: 2, HeadDim: 32, RopeTheta: 1e6, Eps: 1e-6, MaxPositions: 256, DType: capture.BF16, QKVBias: true}
	m := engine.NewRandom(cfg, 7)
	ckpt := filepath.Join(dir, "checkpoint")
	if err := m.Save(ckpt); err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	seqs := make([][]int32, 4)
	for i := range seqs {
		for range 129 {
			seqs[i] = append(seqs[i], int32(rng.IntN(cfg.Vocab)))
		}
	}
	ctx := context.Background()
	full := filepath.Join(dir, "trainer")
	if _, err := m.Train(ctx, seqs, engine.TrainOptions{RunOptions: engine.RunOptions{CaptureDir: full}}); err != nil {
		b.Fatal(err)
	}
	fp := filepath.Join(dir, "trainer-fp.arrow")
	if _, err := Fingerprint(ctx, full, fp, FingerprintOptions{}); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name, src string
		ops       []string
	}{{"full", full, nil}, {"fingerprint", fp, nil}, {"ops", full, []string{"layers.1.*"}}} {
		b.Run(bc.name, func(b *testing.B) {
			var written int64
			for i := 0; b.Loop(); i++ {
				save := filepath.Join(dir, bc.name+"-"+time.Now().Format("150405.000000"))
				r, _, err := ReplayStep(ctx, ckpt, bc.src, StepOptions{Device: "cpu", Save: save, Ops: bc.ops})
				if err != nil {
					b.Fatal(err)
				}
				if !r.Identical {
					b.Fatalf("the engine's own capture does not reproduce: %s", r.Verdict())
				}
				b.StopTimer()
				written = dirSize(b, save)
				os.RemoveAll(save)
				b.StartTimer()
			}
			b.ReportMetric(float64(written)/1e6, "MB-written")
		})
	}
}

func dirSize(b *testing.B, dir string) int64 {
	es, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, e := range es {
		fi, err := e.Info()
		if err != nil {
			b.Fatal(err)
		}
		n += fi.Size()
	}
	return n
}
