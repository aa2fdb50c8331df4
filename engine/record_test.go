package engine

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"bitalign/capture"
	"bitalign/internal/fp"
	"bitalign/kernels"
)

// TestEncodeRowsParallel: the recorder's chunked, parallel encoding gives encode's bytes, and its fingerprints
// are capture.FingerprintRows of those bytes, at widths whose chunks split the rows anywhere (1 value a row,
// odd widths, a row wider than a chunk) and for every dtype the recorder writes; a flipped value changes its
// row's fingerprint only.
func TestEncodeRowsParallel(t *testing.T) {
	for _, dt := range []capture.DType{capture.BF16, capture.F16, capture.F32} {
		for _, shape := range [][2]int{{1, 1}, {7, 1}, {300, 3}, {257, 1000}, {3, 70001}, {0, 5}} {
			rows, width := shape[0], shape[1]
			xs := make([]float32, rows*width)
			for i := range xs {
				xs[i] = kdt(dt).Round(float32(math.Sin(float64(i)*0.37)) * 3)
			}
			want := encode(dt, xs)
			data, fps := encodeRows(dt, xs, rows, width, false)
			if !bytes.Equal(data, want) || fps != nil {
				t.Fatalf("%s %d×%d: encodeRows differs from encode (first byte %d)", dt, rows, width, firstByteDiff(data, want))
			}
			data, fps = encodeRows(dt, xs, rows, width, true)
			var ref []uint64
			if rows > 0 {
				var err error
				if ref, err = capture.FingerprintRows(want, int64(rows)); err != nil {
					t.Fatal(err)
				}
			}
			if data != nil || len(fps) != rows {
				t.Fatalf("%s %d×%d: %d fingerprints and %d bytes", dt, rows, width, len(fps), len(data))
			}
			for r := range ref {
				if fps[r] != ref[r] {
					t.Fatalf("%s %d×%d: row %d fingerprint %#x, capture.FingerprintRows %#x", dt, rows, width, r, fps[r], ref[r])
				}
			}
			if rows < 2 {
				continue
			}
			xs[width] = kernels.RoundBF16(xs[width] + 1) // row 1 only
			_, flipped := encodeRows(dt, xs, rows, width, true)
			for r := range fps {
				if (flipped[r] != fps[r]) != (r == 1) {
					t.Errorf("%s %d×%d: a value of row 1 changed; row %d's fingerprint changed: %v", dt, rows, width, r, flipped[r] != fps[r])
				}
			}
		}
	}
}

func firstByteDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// narrowCPU is the CPU backend with a DownloadBF16 that narrows on the host (as the CUDA backend's narrow_bf16
// does on the device), or refuses (ok false) when refuse is set: the recorder's two bf16 paths on the CPU.
type narrowCPU struct {
	*CPU
	refuse bool
	calls  *atomic.Int64 // TP ranks run on their own goroutines
}

func (b narrowCPU) DownloadBF16(dst []uint16, src Buf) (bool, error) {
	b.calls.Add(1)
	if b.refuse {
		return false, nil
	}
	host := make([]float32, src.Len())
	if err := b.Download(host, src); err != nil {
		return false, err
	}
	for i, x := range host {
		dst[i] = fp.F32ToBF16(x)
	}
	return true, nil
}

// TestRecorderNarrowedCopies: a backend that narrows bf16 ops before the copy (NarrowDownloader), and one that
// declines, record the plain CPU backend's capture tensor for tensor, bit for bit, at TP 1 and 2 (sharded ops),
// in full and as fingerprints.
func TestRecorderNarrowedCopies(t *testing.T) {
	m := NewRandom(DemoConfig(), 3)
	seqs := [][]int32{{1, 5, 9, 33, 2, 7}, {4, 4, 100, 8}}
	ctx := context.Background()
	for _, tp := range []int{1, 2} {
		for _, fps := range []bool{false, true} {
			run := func(name string, f BackendFactory) string {
				dir := filepath.Join(t.TempDir(), name)
				o := RunOptions{TP: tp, CaptureDir: dir, Backend: f}
				if fps {
					o.Fingerprints = func(op string) bool { return op != OpEmbed }
				}
				if _, err := m.Train(ctx, seqs, TrainOptions{RunOptions: o}); err != nil {
					t.Fatal(err)
				}
				return dir
			}
			var calls atomic.Int64
			want := run("cpu", nil)
			for _, refuse := range []bool{false, true} {
				got := run("narrow", func(int) (Backend, error) { return narrowCPU{CPU: NewCPU(), refuse: refuse, calls: &calls}, nil })
				sameCaptures(t, fmt.Sprintf("TP %d, fingerprints %v, refused %v", tp, fps, refuse), got, want)
			}
			if calls.Load() == 0 {
				t.Fatalf("TP %d: the recorder never asked for narrowed copies", tp)
			}
		}
	}
}

func sameCaptures(t *testing.T, what, got, want string) {
	t.Helper()
	a, err := capture.Open(got)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := capture.Open(want)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if a.Len() != b.Len() {
		t.Fatalf("%s: %d tensors, want %d", what, a.Len(), b.Len())
	}
	fpSeen := false
	for i := 0; i < a.Len(); i++ {
		x, err := a.Tensor(i)
		if err != nil {
			t.Fatal(err)
		}
		y, err := b.Tensor(i)
		if err != nil {
			t.Fatal(err)
		}
		fpSeen = fpSeen || strings.HasPrefix(x.Role, capture.FingerprintPrefix)
		if x.Op != y.Op || x.Role != y.Role || x.Seq != y.Seq || x.Pos != y.Pos || x.Rank != y.Rank || !bytes.Equal(x.Data, y.Data) {
			t.Fatalf("%s: tensor %d: %s %s seq %d pos %d rank %d differs from %s %s seq %d pos %d rank %d (first byte %d)", what, i,
				x.Op, x.Role, x.Seq, x.Pos, x.Rank, y.Op, y.Role, y.Seq, y.Pos, y.Rank, firstByteDiff(x.Data, y.Data))
		}
	}
	if strings.Contains(what, "fingerprints true") != fpSeen {
		t.Fatalf("%s: fingerprint tensors present: %v", what, fpSeen)
	}
}

// TestRecorderWriterError: a write that fails on the writer goroutine is returned by a later submit or by
// finish (never lost), later jobs are not run, and the memory they hold is released (submit does not block).
func TestRecorderWriterError(t *testing.T) {
	cfg := DemoConfig()
	rec, err := newRecorder(t.TempDir(), cfg, 0, capture.Meta{Side: SideTrainer, TP: 1, PP: 1, DP: 1, Model: cfg.ModelJSON()}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec.w.Abort() // every Write now fails
	ran := 0
	if err := rec.submit(recordBudget, func() error { ran++; return rec.w.Write(capture.Tensor{}) }); err != nil {
		t.Fatalf("the first submit failed before the writer ran: %v", err)
	}
	var first error
	for i := 0; i < 100 && first == nil; i++ { // the writer's error reaches a later submit
		first = rec.submit(recordBudget, func() error { ran++; return nil })
	}
	ferr := rec.finish()
	if ferr == nil || !strings.Contains(ferr.Error(), "after Close or Abort") {
		t.Fatalf("finish: %v", ferr)
	}
	if first != nil && first.Error() != ferr.Error() {
		t.Errorf("submit returned %v, finish %v", first, ferr)
	}
	if ran != 1 {
		t.Errorf("%d jobs ran after the failing one", ran-1)
	}
	if err := rec.finish(); err == nil {
		t.Error("a second finish forgot the error")
	}
}

// TestStopLayerUploadsOnlyWhatRuns: a run that stops after layer L (replay --ops 'layers.L.*') places layers
// 0..L and the embedding on the backend, not the later layers, the final norm or the LM head; a whole run all.
func TestStopLayerUploadsOnlyWhatRuns(t *testing.T) {
	m := NewRandom(DemoConfig(), 3)
	for _, tc := range []struct{ stop, layers int }{{1, 1}, {3, 3}, {0, 4}, {4, 4}, {9, 4}} {
		g, err := newGroup(m, groupOptions{tp: 1, v: profileVariant(kernels.Canonical), maxPos: 16, stopLayer: tc.stop})
		if err != nil {
			t.Fatal(err)
		}
		r := g.ranks[0]
		whole := tc.layers == m.Config.Layers
		if len(r.layers) != tc.layers || (r.lmHead != nil) != whole || (r.norm != nil) != whole || r.embed == nil {
			t.Errorf("stop %d: %d layers, LM head %v, norm %v (want %d layers, head and norm %v)", tc.stop, len(r.layers),
				r.lmHead != nil, r.norm != nil, tc.layers, whole)
		}
		if err := g.close(false); err != nil {
			t.Fatal(err)
		}
	}
}
