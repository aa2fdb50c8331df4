package session

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"bitalign/capture"
	"bitalign/engine"
	"bitalign/internal/rss"
)

// BenchmarkReplayPeakRSS measures the peak RSS (VmHWM) of `bitalign replay` end to end (session.ReplayStep:
// load, forward, the replay capture written, the diff) in a fresh process (TestReplayPeakRSSChild), on the CPU,
// of a generated Qwen2-style bf16 model (hidden 1024, 4 layers, intermediate 2816, V 32768, tied: 0.13 GB) and
// its 4 × 128-token trainer capture, replayed from the full capture and from its fingerprint capture. It reports
// the peak over the checkpoint (rss/ckpt) and over the checkpoint plus the capture (rss/(ckpt+cap)); issue 15's
// goal: peak ≤ 1.3 × the checkpoint + the capture's working set. BITALIGN_REPLAY_DEVICE=cuda replays on the GPU.
func BenchmarkReplayPeakRSS(b *testing.B) {
	dir := b.TempDir()
	cfg := engine.Config{Architecture: engine.ArchQwen2, Vocab: 32768, Hidden: 1024, Intermediate: 2816, Layers: 4, Heads: 8,
		KVHeads: 2, HeadDim: 128, RopeTheta: 1e6, Eps: 1e-6, MaxPositions: 256, DType: capture.BF16, QKVBias: true,
		TiedEmbeddings: true}
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
	m = nil
	ckptBytes := pathSize(b, ckpt)
	device := os.Getenv("BITALIGN_REPLAY_DEVICE")
	for _, bc := range []struct{ name, src string }{{"full", full}, {"fingerprint", fp}} {
		b.Run(bc.name, func(b *testing.B) {
			var peak int64
			for b.Loop() {
				p, phases, err := replayPeakRSS(ckpt, bc.src, device)
				if err != nil {
					b.Fatal(err)
				}
				peak = max(peak, p)
				b.Logf("%s: the child's phases:\n%s", bc.name, phases)
			}
			capBytes := pathSize(b, bc.src)
			b.ReportMetric(float64(peak)/1e9, "peak-GB")
			b.ReportMetric(float64(ckptBytes)/1e9, "ckpt-GB")
			b.ReportMetric(float64(capBytes)/1e9, "cap-GB")
			b.ReportMetric(float64(peak)/float64(ckptBytes), "rss/ckpt")
			b.ReportMetric(float64(peak)/float64(ckptBytes+capBytes), "rss/(ckpt+cap)")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// replayPeakRSS runs TestReplayPeakRSSChild in a fresh process (this test binary) and returns its peak RSS and
// its phase report.
func replayPeakRSS(ckpt, capPath, device string) (int64, string, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestReplayPeakRSSChild$", "-test.v")
	cmd.Env = append(os.Environ(), "BITALIGN_REPLAY_CHILD="+ckpt+string(os.PathListSeparator)+capPath,
		"BITALIGN_REPLAY_DEVICE="+device)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, "", fmt.Errorf("replay peak RSS child: %v\n%s", err, out)
	}
	var phases strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		l := sc.Text()
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "peak-rss-bytes "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			return n, phases.String(), err
		}
		if strings.HasPrefix(l, "  ") {
			phases.WriteString(l + "\n")
		}
	}
	return 0, "", fmt.Errorf("replay peak RSS child: no figure in\n%s", out)
}

// TestReplayPeakRSSChild is BenchmarkReplayPeakRSS's child process: it replays BITALIGN_REPLAY_CHILD
// ("checkpoint:capture") on BITALIGN_REPLAY_DEVICE (default cpu) and prints its peak RSS.
func TestReplayPeakRSSChild(t *testing.T) {
	arg := os.Getenv("BITALIGN_REPLAY_CHILD")
	if arg == "" {
		t.Skip("the child process of BenchmarkReplayPeakRSS")
	}
	ckpt, capPath, ok := strings.Cut(arg, string(os.PathListSeparator))
	if !ok {
		t.Fatalf("BITALIGN_REPLAY_CHILD=%q: want checkpoint%ccapture", arg, os.PathListSeparator)
	}
	device := os.Getenv("BITALIGN_REPLAY_DEVICE")
	if device == "" {
		device = "cpu"
	}
	ph := engine.NewPhases()
	r, _, err := ReplayStep(context.Background(), ckpt, capPath, StepOptions{Device: device, Timings: ph})
	if err != nil {
		t.Fatal(err)
	}
	ph.Write(os.Stdout, 0) //nolint:errcheck // the phases with the peak RSS after each
	fmt.Printf("peak-rss-bytes %d\n", rss.Peak())
	_ = r.Identical
}
