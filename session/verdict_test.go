package session

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"bitalign/capture"
	"bitalign/engine"
	"bitalign/session/view"
)

// checkVerdict fails unless DiffVerdict(a, b, opts) is the verdict of Diff's complete report full: the same
// first divergence (every field), verdict line, Identical, Missing, routing, Compared, every op's status,
// first mismatch and cause, and every op it compared in full (the first divergent one, the routers) equal
// to the complete report's, field for field.
func checkVerdict(t *testing.T, name string, a, b *capture.Capture, full *Report, opts ...Option) *Report {
	t.Helper()
	v, err := DiffVerdict(context.Background(), a, b, opts...)
	if err != nil {
		t.Fatalf("%s: DiffVerdict: %v", name, err)
	}
	if !reflect.DeepEqual(v.First, full.First) {
		t.Errorf("%s: verdict's first divergence %+v, complete report's %+v", name, v.First, full.First)
	}
	if full.Check == nil && v.Verdict() != full.Verdict() {
		t.Errorf("%s: verdict %q, complete report %q", name, v.Verdict(), full.Verdict())
	}
	if v.Identical != full.Identical || v.Compared != full.Compared || v.Located != full.Located {
		t.Errorf("%s: identical %v compared %d located %d, complete report %v %d %d", name, v.Identical, v.Compared,
			v.Located, full.Identical, full.Compared, full.Located)
	}
	same := func(what string, x, y any) {
		if !reflect.DeepEqual(x, y) {
			jx, _ := json.Marshal(x)
			jy, _ := json.Marshal(y)
			t.Errorf("%s: verdict's %s %s, complete report's %s", name, what, jx, jy)
		}
	}
	same("missing", v.Missing, full.Missing)
	same("routing", v.Routing, full.Routing)
	same("located-only ops", v.LocatedOnly, full.LocatedOnly)
	same("warnings", v.Warnings, full.Warnings)
	if len(v.Ops) != len(full.Ops) {
		t.Fatalf("%s: %d ops, complete report %d", name, len(v.Ops), len(full.Ops))
	}
	pending := false
	for i := range v.Ops {
		g, w := &v.Ops[i], &full.Ops[i]
		if g.pending {
			pending = true
			if g.Op != w.Op || g.Role != w.Role || g.Status != w.Status || g.Cause != w.Cause ||
				g.CauseDetail != w.CauseDetail || !reflect.DeepEqual(g.FirstAt, w.FirstAt) || g.Elements != w.Elements {
				t.Errorf("%s: pending %s [%s]: status %s cause %s (%s) first %+v elements %d; complete %s %s (%s) %+v %d",
					name, g.Op, g.Role, g.Status, g.Cause, g.CauseDetail, g.FirstAt, g.Elements, w.Status, w.Cause,
					w.CauseDetail, w.FirstAt, w.Elements)
			}
			continue
		}
		same(fmt.Sprintf("op %s [%s]", g.Op, g.Role), *g, *w)
	}
	if pending != v.Pending() || full.Pending() {
		t.Errorf("%s: Pending() %v with pending ops %v; complete report pending %v", name, v.Pending(), pending, full.Pending())
	}
	if f := full.First; f != nil {
		if i := v.FindOp(f.Op, f.Role); i < 0 || v.Ops[i].pending {
			t.Errorf("%s: the first divergent op %s is not compared in full", name, f.Op)
		}
	}
	return v
}

// TestVerdictSizeVariants: the size pair's four variants (identical, tensors, one bit, all), small, give the
// complete report's verdict first, with the producer graph as Load uses it, with WithOps and with a map size.
func TestVerdictSizeVariants(t *testing.T) {
	s := sizeSpec{layers: 2, seqs: 2, tokens: 16}
	dir := t.TempDir()
	pa := filepath.Join(dir, "a.arrow")
	writeSizeCapture(t, pa, "trainer", s, sizeIdentical)
	for _, v := range sizeVariants {
		t.Run(string(v), func(t *testing.T) {
			pb := filepath.Join(dir, string(v)+".arrow")
			writeSizeCapture(t, pb, "sampler", s, v)
			a, b := openTestCapture(t, pa), openTestCapture(t, pb)
			g := ProducerGraph(nil, a.Meta(), b.Meta())
			for _, opts := range [][]Option{nil, {WithProducers(g)}, {WithProducers(g), WithOps("layers.1.*", capture.OpLogits)},
				{WithProducers(g), WithWorkers(1), WithMapSize(7, 3)}} {
				full, err := Diff(context.Background(), a, b, opts...)
				if err != nil {
					t.Fatal(err)
				}
				vr := checkVerdict(t, string(v), a, b, full, opts...)
				if v == sizeIdentical && vr.First != nil || v != sizeIdentical && vr.First == nil {
					t.Fatalf("%s: first divergence %+v", v, vr.First)
				}
				if v == sizeAll && !vr.Pending() {
					t.Errorf("all: nothing pending")
				}
			}
		})
	}
}

// TestVerdictDemos: the engine's demos (dense with its faults, the MoE pair with a routing flip) through
// Load's options: the verdict is the complete report's. (Fingerprint captures: fpDiff checks every
// fingerprint test's diff the same way.)
func TestVerdictDemos(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the engine's demo")
	}
	for _, tc := range []struct{ fault string }{{""}, {"fusion"}, {"router-split-k"}} {
		t.Run(cmpName(tc.fault), func(t *testing.T) {
			dir := t.TempDir()
			if err := engine.Demo(dir, engine.DemoOptions{Fault: tc.fault, Layer: DefaultDemoLayer}); err != nil {
				t.Fatal(err)
			}
			a := openTestCapture(t, filepath.Join(dir, "trainer"))
			b := openTestCapture(t, filepath.Join(dir, "sampler"))
			opts := []Option{WithProducers(ProducerGraph(nil, a.Meta(), b.Meta()))}
			full, err := Diff(context.Background(), a, b, opts...)
			if err != nil {
				t.Fatal(err)
			}
			checkVerdict(t, tc.fault, a, b, full, opts...)
			if tc.fault == "router-split-k" && (full.Routing == nil || full.First == nil) {
				t.Fatalf("MoE demo: routing %v, first %v", full.Routing, full.First)
			}
		})
	}
}

// TestLoadVerdict: LoadVerdict's source shows the verdict first (Pending, every op's status, the first
// divergence as Load's), and after Wait exactly Load's report: the same view, the same text and JSON.
func TestLoadVerdict(t *testing.T) {
	s := sizeSpec{layers: 2, seqs: 2, tokens: 16}
	dir := t.TempDir()
	pa := filepath.Join(dir, "a.arrow")
	writeSizeCapture(t, pa, "trainer", s, sizeIdentical)
	for _, v := range sizeVariants {
		t.Run(string(v), func(t *testing.T) {
			pb := filepath.Join(dir, string(v)+".arrow")
			writeSizeCapture(t, pb, "sampler", s, v)
			in := Inputs{A: pa, B: pb, Device: "cpu"}
			l, err := Load(context.Background(), in, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			want := l.Source().Report()
			p, err := LoadVerdict(context.Background(), in, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			src := p.Source()
			early := src.Report()
			if early.Pending == "" || !strings.Contains(early.Pending, "the logprob section") {
				t.Errorf("verdict pending %q: want the statistics and the logprob section", early.Pending)
			}
			if !reflect.DeepEqual(early.First, want.First) || early.Identical != want.Identical || len(early.Ops) != len(want.Ops) {
				t.Fatalf("verdict first %+v identical %v, %d ops; Load's %+v %v, %d", early.First, early.Identical,
					len(early.Ops), want.First, want.Identical, len(want.Ops))
			}
			for i := range early.Ops {
				g, w := early.Ops[i], want.Ops[i]
				if g.Status != w.Status || g.Cause != w.Cause || !g.Pending && !reflect.DeepEqual(g, w) {
					t.Errorf("verdict op %s: %+v; Load's %+v", g.Op, g, w)
				}
			}
			c, ok := src.(view.Completer)
			if !ok {
				t.Fatal("LoadVerdict's source is no view.Completer")
			}
			if src.Report() != early {
				t.Error("the report changed before Wait returned")
			}
			if err := c.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := src.Report(); got.Pending != "" || !reflect.DeepEqual(got, want) {
				t.Errorf("complete report differs from Load's (pending %q)", got.Pending)
			}
			for _, format := range []string{"text", "json"} {
				var gb, wb bytes.Buffer
				if err := src.WriteReport(&gb, format); err != nil {
					t.Fatal(err)
				}
				if err := l.Source().WriteReport(&wb, format); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(gb.Bytes(), wb.Bytes()) {
					t.Errorf("%s report differs from Load's:\n%s\n---\n%s", format, gb.Bytes(), wb.Bytes())
				}
			}
		})
	}
}

// TestLoadVerdictBadInput: LoadVerdict refuses what Load refuses, with Load's error, before any background.
func TestLoadVerdictBadInput(t *testing.T) {
	dir := t.TempDir()
	trunc := filepath.Join(dir, "truncated.arrow")
	writeSizeCapture(t, trunc, "trainer", sizeSpec{layers: 1, seqs: 1, tokens: 4}, sizeIdentical)
	data, err := os.ReadFile(trunc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(trunc, data[:len(data)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	for _, in := range []Inputs{{A: filepath.Join(dir, "absent.arrow"), B: trunc}, {A: trunc, B: trunc}} {
		_, want := Load(context.Background(), in, nil)
		p, got := LoadVerdict(context.Background(), in, nil)
		if want == nil || got == nil || got.Error() != want.Error() || p != nil {
			t.Errorf("%s ↔ %s: LoadVerdict %v, Load %v", in.A, in.B, got, want)
		}
	}
}

// TestLoadVerdictClose: closing (quitting the TUI) while the complete report is still being made stops the
// background promptly and leaves no goroutine behind; so does cancelling LoadVerdict's context.
func TestLoadVerdictClose(t *testing.T) {
	s := sizeSpec{layers: 2, seqs: 2, tokens: 64}
	pa, pb := sizePair(t, s, sizeAll)
	in := Inputs{A: pa, B: pb, Device: "cpu"}
	base := runtime.NumGoroutine()
	for _, how := range []string{"close", "cancel"} {
		ctx, cancel := context.WithCancel(context.Background())
		p, err := LoadVerdict(ctx, in, nil)
		if err != nil {
			t.Fatal(err)
		}
		if p.Complete() != nil {
			t.Fatalf("%s: complete before the background could run", how)
		}
		t0 := time.Now()
		if how == "cancel" {
			cancel()
			if _, err := p.Wait(context.Background()); !errors.Is(err, context.Canceled) {
				t.Errorf("cancel: Wait = %v, want context.Canceled", err)
			}
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		cancel()
		if d := time.Since(t0); d > 5*time.Second {
			t.Errorf("%s: the background took %v to stop", how, d)
		}
		if _, err := p.Wait(context.Background()); err == nil {
			t.Errorf("%s: Wait after Close gave no error", how)
		}
	}
	for i := 0; runtime.NumGoroutine() > base && i < 100; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base {
		t.Errorf("%d goroutines left running (%d before)", n, base)
	}
}
