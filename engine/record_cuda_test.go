package engine

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// hostPaths hides the CUDA backend's recording paths (RowFingerprinter, AsyncDownloader, NarrowDownloader):
// the recorder then downloads float32 rows and encodes and fingerprints them on the host, the reference.
type hostPaths struct{ Backend }

// TestCUDARecorderDevicePaths: on the GPU, fingerprints computed by fingerprint_rows and full copies through
// the pinned ring on the side stream give the capture of the host path (hostPaths on the same GPU) and of the
// CPU backend byte for byte, at TP 1 and 2, in full and as fingerprints; the phases show the device paths ran.
// A 4 MiB ring (the default is pinnedRingBytes): it wraps many times a forward, the forward waits for the
// writer, and the logits (7 MB) take the synchronous path.
func TestCUDARecorderDevicePaths(t *testing.T) {
	gpu := cudaOrSkip(t)
	cfg := DemoConfig()
	cfg.Vocab, cfg.Intermediate, cfg.MaxPositions = 4096, 2048, 512
	m := NewRandom(cfg, 5)
	seqs := make([][]int32, 3)
	for s := range seqs {
		for i := 0; i < 100+40*s; i++ {
			seqs[s] = append(seqs[s], int32((i*31+s*7)%cfg.Vocab))
		}
	}
	ctx := context.Background()
	for _, tp := range []int{1, 2} {
		for _, fps := range []bool{false, true} {
			run := func(name string, f BackendFactory) (string, *Phases) {
				dir := filepath.Join(t.TempDir(), name)
				ph := NewPhases()
				o := RunOptions{TP: tp, CaptureDir: dir, Backend: f, Phases: ph}
				if fps {
					o.Fingerprints = func(op string) bool { return op != OpEmbed }
				}
				if _, err := m.Train(ctx, seqs, TrainOptions{RunOptions: o}); err != nil {
					t.Fatal(err)
				}
				return dir, ph
			}
			what := fmt.Sprintf("TP %d, fingerprints %v", tp, fps)
			dev, ph := run("device", func(r int) (Backend, error) {
				b, err := gpu(r)
				if err == nil {
					b.(*CUDA).ringBytes = 4 << 20
				}
				return b, err
			})
			host, _ := run("host", func(r int) (Backend, error) { b, err := gpu(r); return hostPaths{b}, err })
			cpu, _ := run("cpu", nil)
			sameCaptures(t, what+" (device paths vs host paths)", dev, host)
			sameCaptures(t, what+" (device paths vs the CPU)", dev, cpu)
			var names []string
			for _, p := range ph.List() {
				names = append(names, p.Name)
			}
			all := strings.Join(names, "; ")
			if !strings.Contains(all, "pinned, side stream") || fps != strings.Contains(all, "fingerprints on the device") {
				t.Errorf("%s: phases %s", what, all)
			}
		}
	}
}
