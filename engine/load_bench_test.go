package engine

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"bitalign/capture"
	"bitalign/internal/rss"
)

// Qwen2Shape is a Qwen2-1.5B-shaped bf16 config (hidden 1536, 12/2 heads of 128, intermediate 8960,
// V 151936, tied embeddings, q/k/v bias) with the given number of layers: 28 is the real model (3.1 GB of
// weights), 6 about 1 GB.
func Qwen2Shape(layers int) Config {
	return Config{Architecture: ArchQwen2, Vocab: 151936, Hidden: 1536, Intermediate: 8960, Layers: layers, Heads: 12,
		KVHeads: 2, HeadDim: 128, RopeTheta: 1e6, Eps: 1e-6, MaxPositions: 32768, TiedEmbeddings: true, QKVBias: true,
		DType: capture.BF16}
}

// loadBenchEnv: BITALIGN_LOAD_LAYERS (default 6: ~1 GB, what CI's 2 cores and 24 GB afford; 28 on the GPU
// machine: the real 3.1 GB), BITALIGN_LOAD_DEVICE (cpu, the default, or cuda: the load includes uploading
// every weight to GPU 0), BITALIGN_LOAD_DIR (reuse a checkpoint made by an earlier run there).
func loadBenchEnv() (layers int, device, dir string) {
	layers = 6
	if v, err := strconv.Atoi(os.Getenv("BITALIGN_LOAD_LAYERS")); err == nil && v > 0 {
		layers = v
	}
	device = os.Getenv("BITALIGN_LOAD_DEVICE")
	if device == "" {
		device = "cpu"
	}
	return layers, device, os.Getenv("BITALIGN_LOAD_DIR")
}

// benchCheckpoint writes the benchmark's checkpoint (random weights, shards of at most 512 MB) into dir unless
// one is there, and returns its files and their total size.
func benchCheckpoint(tb testing.TB, dir string, layers int) ([]string, int64) {
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors.index.json")); err != nil {
		start := time.Now()
		if err := NewRandom(Qwen2Shape(layers), 1).Save(dir, MaxShardBytes(512<<20)); err != nil {
			tb.Fatal(err)
		}
		tb.Logf("generated %s in %v", dir, time.Since(start).Round(time.Millisecond))
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	var size int64
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			tb.Fatal(err)
		}
		size += fi.Size()
	}
	return files, size
}

// catFiles reads every file to the end through a 128 KiB buffer, one after another, as cat does.
func catFiles(tb testing.TB, files []string) time.Duration {
	buf := make([]byte, 128<<10)
	start := time.Now()
	for _, p := range files {
		f, err := os.Open(p)
		if err != nil {
			tb.Fatal(err)
		}
		for {
			if _, err := f.Read(buf); err == io.EOF {
				break
			} else if err != nil {
				tb.Fatal(err)
			}
		}
		f.Close()
	}
	return time.Since(start)
}

// loadOnto loads dir and, for device cuda, puts every weight on GPU 0 (what a replay does before its first op)
// and frees them again once they are all in place (the peak RSS and the time include the upload).
func loadOnto(tb testing.TB, dir, device string) *Model {
	m, err := Load(dir)
	if err != nil {
		tb.Fatal(err)
	}
	if device == "cuda" {
		be, err := NewCUDA(0)
		if err != nil {
			tb.Fatal(err)
		}
		r := newRank(m, newLayout(m.Config, 1, 0), be, nil, nil, profileVariant(0), 1, 0)
		if err := be.Err(); err != nil {
			tb.Fatal(err)
		}
		r.freeWeights() // uploaded: the timing is done, the next iteration needs the memory
	}
	return m
}

// BenchmarkLoadCheckpoint measures, in one run on one generated bf16 sharded checkpoint (loadBenchEnv): the
// time to read its files from the page cache as cat does and Load's time (with the upload for
// BITALIGN_LOAD_DEVICE=cuda), alternating, each the best of the b.N runs, and their ratio (load/cat, the goal ≤ 2);
// the peak RSS of one load in a fresh process relative to the checkpoint's size (rss/ckpt, the goal ≤ 1.3).
func BenchmarkLoadCheckpoint(b *testing.B) {
	layers, device, dir := loadBenchEnv()
	if dir == "" {
		dir = filepath.Join(b.TempDir(), "ckpt")
	}
	files, size := benchCheckpoint(b, dir, layers)
	catFiles(b, files) // into the page cache
	rss, err := childPeakRSS(dir, device)
	if err != nil {
		b.Fatal(err)
	}
	var cat, best time.Duration
	for b.Loop() { // cat and Load alternate, each figure the best of its runs: both see the same machine load
		if d := catFiles(b, files); cat == 0 || d < cat {
			cat = d
		}
		start := time.Now()
		loadOnto(b, dir, device)
		if d := time.Since(start); best == 0 || d < best {
			best = d
		}
	}
	b.ReportMetric(float64(size)/1e9, "ckpt-GB")
	b.ReportMetric(cat.Seconds(), "cat-s")
	b.ReportMetric(best.Seconds(), "load-s")
	b.ReportMetric(best.Seconds()/cat.Seconds(), "load/cat")
	b.ReportMetric(float64(rss)/float64(size), "rss/ckpt")
	b.ReportMetric(0, "ns/op") // the figures above are the point; ns/op adds cat's time to the loads
}

// childPeakRSS runs TestLoadPeakRSSChild in a fresh process (this test binary) and returns its peak RSS in bytes.
func childPeakRSS(dir, device string) (int64, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestLoadPeakRSSChild$", "-test.v")
	cmd.Env = append(os.Environ(), "BITALIGN_LOAD_CHILD="+dir, "BITALIGN_LOAD_DEVICE="+device)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("peak RSS child: %v\n%s", err, out)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "peak-rss-bytes "); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("peak RSS child: no figure in\n%s", out)
}

// TestLoadPeakRSSChild is BenchmarkLoadCheckpoint's child process: it loads BITALIGN_LOAD_CHILD (onto
// BITALIGN_LOAD_DEVICE) and prints its peak RSS (VmHWM, or getrusage's maximum where /proc is absent).
func TestLoadPeakRSSChild(t *testing.T) {
	dir := os.Getenv("BITALIGN_LOAD_CHILD")
	if dir == "" {
		t.Skip("the child process of BenchmarkLoadCheckpoint")
	}
	m := loadOnto(t, dir, os.Getenv("BITALIGN_LOAD_DEVICE"))
	fmt.Printf("peak-rss-bytes %d\n", rss.Peak())
	_ = m.Config
}
