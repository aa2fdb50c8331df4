package session

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"bitalign/session/view"
)

// cmpFiles is the baseline `cmp` stands for: it reads both files front to back in 128 KiB blocks (cmp's
// buffer size order) on one goroutine and compares them with bytes.Equal; false at the first difference.
func cmpFiles(a, b string, bufA, bufB []byte) (bool, error) {
	fa, err := os.Open(a)
	if err != nil {
		return false, err
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		return false, err
	}
	defer fb.Close()
	for {
		na, ea := io.ReadFull(fa, bufA)
		nb, eb := io.ReadFull(fb, bufB)
		if na != nb || !bytes.Equal(bufA[:na], bufB[:nb]) {
			return false, nil
		}
		if ea == io.EOF || ea == io.ErrUnexpectedEOF {
			return eb == ea, nil
		}
		if ea != nil {
			return false, ea
		}
		if eb != nil {
			return false, eb
		}
	}
}

// copyFile copies src to dst (the cmp baseline's second file: cmp reads to the end only when nothing differs).
func copyFile(tb testing.TB, src, dst string) {
	tb.Helper()
	if st, err := os.Stat(dst); err == nil {
		if s, err := os.Stat(src); err == nil && s.Size() == st.Size() {
			return
		}
	}
	data, err := os.ReadFile(src)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o644); err != nil {
		tb.Fatal(err)
	}
}

// diffOnce is what `bitalign diff A B` does: Load (open, check, diff) and the text report.
func diffOnce(tb testing.TB, a, b string) *Report {
	l, err := Load(context.Background(), Inputs{A: a, B: b, Device: "cpu"}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	if err := WriteReport(io.Discard, l.Report, "text"); err != nil {
		tb.Fatal(err)
	}
	return l.Report
}

// BenchmarkDiffSize times `bitalign diff` (Load and the text report) of a Qwen2-1.5B-shaped pair (sizeSpec;
// BITALIGN_SIZE sets its size, BITALIGN_BENCH_DIR keeps the files) against the cmp baseline (cmpFiles over A
// and a byte copy of A, which cmp must read to the end) in the same iteration, both from the page cache.
// Reports the throughput of each (bytes of one side per second) and the diff's speed as a fraction of cmp's:
// the goal is ≥ 0.5 on a 16-core machine. diff-s and diff-cpu-s are the diff's wall and CPU (user +
// system) seconds per iteration: on a shared machine the CPU time is the steadier figure.
func BenchmarkDiffSize(b *testing.B) {
	s := sizeFromEnv(b, ciSize)
	for _, v := range sizeVariants {
		b.Run(string(v), func(b *testing.B) {
			pa, pb := sizePair(b, s, v)
			acopy := filepath.Join(filepath.Dir(pa), s.String()+"-trainer-copy.arrow")
			copyFile(b, pa, acopy)
			st, err := os.Stat(pa)
			if err != nil {
				b.Fatal(err)
			}
			bufA, bufB := make([]byte, 128<<10), make([]byte, 128<<10)
			diffOnce(b, pa, pb) // both pairs in the page cache before the first timed iteration
			if ok, err := cmpFiles(pa, acopy, bufA, bufB); err != nil || !ok {
				b.Fatalf("cmp baseline: %v %v", ok, err)
			}
			var tCmp, tDiff, cpu time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if ok, err := cmpFiles(pa, acopy, bufA, bufB); err != nil || !ok {
					b.Fatalf("cmp baseline: %v %v", ok, err)
				}
				t1, c1 := time.Now(), cpuTime()
				rep := diffOnce(b, pa, pb)
				tDiff += time.Since(t1)
				cpu += cpuTime() - c1
				tCmp += t1.Sub(t0)
				if rep.Identical != (v == sizeIdentical) {
					b.Fatalf("%s: identical = %v", v, rep.Identical)
				}
			}
			n := float64(st.Size()) * float64(b.N)
			b.ReportMetric(n/tCmp.Seconds()/1e9, "cmp-GB/s")
			b.ReportMetric(n/tDiff.Seconds()/1e9, "diff-GB/s")
			b.ReportMetric(tCmp.Seconds()/tDiff.Seconds(), "x-cmp")
			b.ReportMetric(tDiff.Seconds()/float64(b.N), "diff-s")
			b.ReportMetric(cpu.Seconds()/float64(b.N), "diff-cpu-s")
		})
	}
}

// BenchmarkOpenSize times what `bitalign open A B` does, on the pairs of BenchmarkDiffSize, beside the cmp
// baseline in the same iteration: s-to-verdict is LoadVerdict (open, check, DiffVerdict's cheap pass and the
// first divergent op in full) and the TUI's view of its report (Source().Report(): the first screen's data
// and verdict); s-to-complete goes on to the complete report (Load's diff and logprob section, in the
// background) and its view. The goal: ≤ 2 s to the verdict for a multi-GB pair. x-cmp-verdict is
// cmp's time over the time to the verdict; the cpu figures are user + system seconds.
func BenchmarkOpenSize(b *testing.B) {
	s := sizeFromEnv(b, ciSize)
	for _, v := range sizeVariants {
		b.Run(string(v), func(b *testing.B) {
			pa, pb := sizePair(b, s, v)
			acopy := filepath.Join(filepath.Dir(pa), s.String()+"-trainer-copy.arrow")
			copyFile(b, pa, acopy)
			bufA, bufB := make([]byte, 128<<10), make([]byte, 128<<10)
			diffOnce(b, pa, pb) // the page cache
			var tCmp, tVerdict, tComplete, cpuVerdict, cpuComplete time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if ok, err := cmpFiles(pa, acopy, bufA, bufB); err != nil || !ok {
					b.Fatalf("cmp baseline: %v %v", ok, err)
				}
				t1, c1 := time.Now(), cpuTime()
				p, err := LoadVerdict(context.Background(), Inputs{A: pa, B: pb, Device: "cpu"}, nil)
				if err != nil {
					b.Fatal(err)
				}
				src := p.Source()
				r := src.Report()
				tVerdict += time.Since(t1)
				cpuVerdict += cpuTime() - c1
				if r.Identical != (v == sizeIdentical) || len(r.Ops) == 0 || (r.First == nil) != (v == sizeIdentical) {
					b.Fatalf("%s: identical = %v, %d ops, first %v", v, r.Identical, len(r.Ops), r.First)
				}
				if c, ok := src.(view.Completer); ok {
					if err := c.Wait(context.Background()); err != nil {
						b.Fatal(err)
					}
				}
				if r := src.Report(); r.Pending != "" || r.Identical != (v == sizeIdentical) {
					b.Fatalf("%s: complete report pending %q, identical %v", v, r.Pending, r.Identical)
				}
				tComplete += time.Since(t1)
				cpuComplete += cpuTime() - c1
				tCmp += t1.Sub(t0)
				p.Close()
			}
			n := float64(b.N)
			b.ReportMetric(tVerdict.Seconds()/n, "s-to-verdict")
			b.ReportMetric(cpuVerdict.Seconds()/n, "cpu-s-to-verdict")
			b.ReportMetric(tComplete.Seconds()/n, "s-to-complete")
			b.ReportMetric(cpuComplete.Seconds()/n, "cpu-s-to-complete")
			b.ReportMetric(tCmp.Seconds()/n, "cmp-s")
			b.ReportMetric(tCmp.Seconds()/tVerdict.Seconds(), "x-cmp-verdict")
		})
	}
}
