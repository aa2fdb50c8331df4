package engine

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"bitalign/cuda"
	"bitalign/kernels"
	"bitalign/nvls"
)

// BenchmarkForwardSize times the engine's forward on the GPU at a real model's shapes (issue #14's end-to-end
// goal: at most the time of transformers' bf16 forward with SDPA on the same GPU, measured by
// scripts/gpu.sh e2e in the same call): the checkpoint in BITALIGN_FWD_DIR (e2e_forward.py saves the
// transformers model it times there) or a generated bf16 one (loadBenchEnv's BITALIGN_LOAD_LAYERS and
// BITALIGN_LOAD_DIR, Qwen2-1.5B's widths), loaded and uploaded once, then BITALIGN_FWD_SHAPE (default 4,256:
// sequences, tokens) packed into one forward to the logits, no capture, for each profile of
// BITALIGN_FWD_PROFILES (default canonical; e.g. canonical,tc). ms/forward is the wall time of b.N forwards
// after one warm-up, the device synchronised at the end. Then one more forward with every backend op between two
// CUDA events prints the per-op device-time table (op, shape, calls, total ms, share): where the time goes.
// Skips without a GPU (BITALIGN_REQUIRE_GPU=1 fails instead, through NewCUDA's error).
func BenchmarkForwardSize(b *testing.B) {
	layers, _, dir := loadBenchEnv()
	seqs, toks := 4, 256
	if v := os.Getenv("BITALIGN_FWD_SHAPE"); v != "" {
		a, c, ok := strings.Cut(v, ",")
		s, e1 := strconv.Atoi(a)
		t, e2 := strconv.Atoi(c)
		if !ok || e1 != nil || e2 != nil || s < 1 || t < 2 {
			b.Fatalf("BITALIGN_FWD_SHAPE=%q: want SEQS,TOKENS", v)
		}
		seqs, toks = s, t
	}
	profiles := []kernels.Profile{kernels.Canonical}
	if v := os.Getenv("BITALIGN_FWD_PROFILES"); v != "" {
		profiles = nil
		for _, s := range strings.Split(v, ",") {
			p, err := kernels.ParseProfile(s)
			if err != nil {
				b.Fatal(err)
			}
			profiles = append(profiles, p)
		}
	}
	if _, err := NewCUDA(0); err != nil {
		skipNoGPU(b, err)
	}
	if d := os.Getenv("BITALIGN_FWD_DIR"); d != "" {
		dir = d // a checkpoint made elsewhere (capture/python/tests/e2e_forward.py: the transformers model it times)
	} else {
		if dir == "" {
			dir = b.TempDir()
		}
		benchCheckpoint(b, dir, layers)
	}
	m, err := Load(dir)
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	var segs []segment
	for s := 0; s < seqs; s++ {
		t := make([]int32, toks)
		for i := range t {
			t[i] = int32(r.IntN(m.Config.Vocab))
		}
		segs = append(segs, segment{seq: int64(s), slot: s, toks: t, sampleFrom: toks})
	}
	for _, p := range profiles {
		b.Run(p.String(), func(b *testing.B) {
			g, err := newGroup(m, groupOptions{tp: 1, v: profileVariant(p), maxPos: toks,
				backend: func(int) (Backend, error) { return NewCUDA(0) }})
			if err != nil {
				b.Fatal(err)
			}
			defer func() {
				g.close(false)
				for _, r := range g.ranks {
					r.freeWeights()
				}
			}()
			cb := g.ranks[0].be.(*CUDA)
			once := func() {
				if _, err := g.forward(segs); err != nil {
					b.Fatal(err)
				}
				for _, s := range segs {
					g.dropCache(s.seq)
				}
			}
			sync := func() {
				if err := cb.dev.d.Synchronize(); err != nil {
					b.Fatal(err)
				}
			}
			once() // warm-up: plans, scratch, the tc modules
			sync()
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				once()
			}
			sync()
			wall := time.Since(start)
			b.StopTimer()
			b.ReportMetric(wall.Seconds()*1e3/float64(b.N), "ms/forward")
			b.ReportMetric(float64(seqs*toks)*float64(b.N)/wall.Seconds(), "tokens/s")

			tb := newTimedBackend(cb)
			g.ranks[0].be = tb
			once()
			g.ranks[0].be = cb
			rows, total, err := tb.table()
			if err != nil {
				b.Fatal(err)
			}
			fmt.Printf("\nper-op device time, %s, %d × %d tokens (one forward, every op between two CUDA events: %.3f ms of device time)\n",
				p, seqs, toks, total)
			fmt.Printf("  %-44s %6s %10s %6s\n", "op (shape)", "calls", "ms", "share")
			for _, r := range rows {
				fmt.Printf("  %-44s %6d %10.3f %5.1f%%\n", r.name, r.calls, r.ms, 100*r.ms/total)
			}
		})
	}
}

// skipNoGPU skips (or, with BITALIGN_REQUIRE_GPU=1, fails) a benchmark that needs a GPU.
func skipNoGPU(b *testing.B, err error) {
	if os.Getenv("BITALIGN_REQUIRE_GPU") == "1" {
		b.Fatalf("no GPU: %v", err)
	}
	b.Skipf("no GPU here (%v): skipped, not run", err)
}

// timedBackend is a CUDA backend whose every op runs between two events on the default stream, for the
// per-op table; the ops themselves are the CUDA backend's, unchanged. The events are posted like the ops (no
// round trip each), so with the GPU behind the host an interval is the op's own device time.
type timedBackend struct {
	*CUDA
	marks []*timedMark
	mu    sync.Mutex // err is set on the device thread
	err   error
}

type timedMark struct {
	name       string
	start, end *cuda.Event
}

func newTimedBackend(c *CUDA) *timedBackend { return &timedBackend{CUDA: c} }

func (t *timedBackend) setErr(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		t.err = err
	}
}

// op runs f between two events named name.
func (t *timedBackend) op(name string, f func()) {
	m := &timedMark{name: name}
	post := func(g func(c *cuda.Ctx) error) {
		if err := t.dev.d.Post(g, t.setErr); err != nil {
			t.setErr(err)
		}
	}
	post(func(c *cuda.Ctx) error {
		var err error
		if m.start, err = c.NewEvent(); err != nil {
			return err
		}
		if m.end, err = c.NewEvent(); err != nil {
			return err
		}
		return c.Record(m.start, nil)
	})
	f()
	post(func(c *cuda.Ctx) error {
		if m.end == nil {
			return nil // the start failed: reported
		}
		return c.Record(m.end, nil)
	})
	t.marks = append(t.marks, m)
}

type timedRow struct {
	name  string
	calls int
	ms    float64
}

// table synchronises, sums the events' intervals by name and frees them: rows by time, largest first.
func (t *timedBackend) table() ([]timedRow, float64, error) {
	by := map[string]*timedRow{}
	var total float64
	err := t.dev.d.Do(func(c *cuda.Ctx) error {
		if err := c.Synchronize(); err != nil {
			return err
		}
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.err != nil {
			return t.err
		}
		for _, m := range t.marks {
			ms, err := c.Elapsed(m.start, m.end)
			if err != nil {
				return err
			}
			r := by[m.name]
			if r == nil {
				r = &timedRow{name: m.name}
				by[m.name] = r
			}
			r.calls++
			r.ms += float64(ms)
			total += float64(ms)
			c.DestroyEvent(m.start)
			c.DestroyEvent(m.end)
		}
		return nil
	})
	var rows []timedRow
	for _, r := range by {
		rows = append(rows, *r)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].ms > rows[j].ms })
	return rows, total, err
}

func (t *timedBackend) Embed(out, table Buf, ids []int32, H int, dt kernels.DType) {
	t.op(fmt.Sprintf("Embed %dx%d", len(ids), H), func() { t.CUDA.Embed(out, table, ids, H, dt) })
}

func (t *timedBackend) Matmul(p kernels.Profile, out, x, w, bias Buf, M, K, N int, dt kernels.DType) {
	t.op(fmt.Sprintf("Matmul %dx%dx%d", M, K, N), func() { t.CUDA.Matmul(p, out, x, w, bias, M, K, N, dt) })
}

func (t *timedBackend) MatmulPartial(p kernels.Profile, out, x, w Buf, M, kLocal, N, rank, tp int) {
	t.op(fmt.Sprintf("MatmulPartial %dx%dx%d", M, kLocal, N), func() { t.CUDA.MatmulPartial(p, out, x, w, M, kLocal, N, rank, tp) })
}

func (t *timedBackend) MatmulFinish(out, bias Buf, M, N int, dt kernels.DType) {
	t.op(fmt.Sprintf("MatmulFinish %dx%d", M, N), func() { t.CUDA.MatmulFinish(out, bias, M, N, dt) })
}

func (t *timedBackend) RMSNorm(p kernels.Profile, out, x, w Buf, rows, C int, eps float32, dt kernels.DType) {
	t.op(fmt.Sprintf("RMSNorm %dx%d", rows, C), func() { t.CUDA.RMSNorm(p, out, x, w, rows, C, eps, dt) })
}

func (t *timedBackend) RoPE(out, x Buf, pos []int32, T, heads, hd int, cos, sin Buf, dt kernels.DType) {
	t.op(fmt.Sprintf("RoPE %dx%dx%d", T, heads, hd), func() { t.CUDA.RoPE(out, x, pos, T, heads, hd, cos, sin, dt) })
}

func (t *timedBackend) Attention(p kernels.Profile, out, q, k, v Buf, start, n, heads, kvHeads, hd int, dt kernels.DType, o AttnOptions) {
	t.op(fmt.Sprintf("Attention n=%d %d/%d×%d", n, heads, kvHeads, hd), func() {
		t.CUDA.Attention(p, out, q, k, v, start, n, heads, kvHeads, hd, dt, o)
	})
}

func (t *timedBackend) AttentionBatch(p kernels.Profile, seqs []AttnSeq, heads, kvHeads, hd int, dt kernels.DType, o AttnOptions) (ok bool) {
	n := 0
	for _, a := range seqs {
		n += a.N
	}
	t.op(fmt.Sprintf("AttentionBatch %d seqs, %d queries, %d/%d×%d", len(seqs), n, heads, kvHeads, hd), func() {
		ok = t.CUDA.AttentionBatch(p, seqs, heads, kvHeads, hd, dt, o)
	})
	return ok
}

func (t *timedBackend) SwiGLU(out, gate, up Buf, n int, dt kernels.DType) {
	t.op(fmt.Sprintf("SwiGLU %d", n), func() { t.CUDA.SwiGLU(out, gate, up, n, dt) })
}

func (t *timedBackend) Residual(out, a, b Buf, dt kernels.DType) {
	t.op(fmt.Sprintf("Residual %d", out.Len()), func() { t.CUDA.Residual(out, a, b, dt) })
}

func (t *timedBackend) Round(x Buf, dt kernels.DType) {
	t.op(fmt.Sprintf("Round %d", x.Len()), func() { t.CUDA.Round(x, dt) })
}

func (t *timedBackend) Copy(dst, src Buf) {
	t.op(fmt.Sprintf("Copy %d", dst.Len()), func() { t.CUDA.Copy(dst, src) })
}

func (t *timedBackend) AllReduce(c nvls.Comm, x Buf) {
	t.op(fmt.Sprintf("AllReduce %d", x.Len()), func() { t.CUDA.AllReduce(c, x) })
}
