package session_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"bitalign/capture"
	"bitalign/engine"
	"bitalign/internal/hftest"
	"bitalign/session"
)

// testdata/python holds a trainer-style and a sampler-style capture of the same sequences through a one-layer
// random Qwen3 in float32, both written by the Python module (capture/python, make_fixtures.py), and the
// checkpoint they came from. These tests diff them as a user would and check the report against a brute-force
// comparison of the two files, so the Python writer, the Go reader and the diff cannot drift apart.

func pyOpen(t *testing.T, name string) *capture.Capture {
	t.Helper()
	c, err := capture.Open(filepath.Join("..", "testdata", "python", name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

type pyRow struct {
	op       string
	seq, pos int64
}

// pyRows splits every tensor of c into per-position rows.
func pyRows(t *testing.T, c *capture.Capture) map[pyRow][]byte {
	t.Helper()
	rows := map[pyRow][]byte{}
	for i := 0; i < c.Len(); i++ {
		e := c.Entry(i)
		d, err := c.Data(i)
		if err != nil {
			t.Fatal(err)
		}
		n := int64(len(d)) / e.NTok
		for p := int64(0); p < e.NTok; p++ {
			rows[pyRow{e.Op, e.Seq, e.Pos + p}] = d[p*n : (p+1)*n]
		}
	}
	return rows
}

// TestPythonOpNamesAreEngineOpNames: the Python module names and numbers ops as engine.OpNames does for the
// checkpoint's config.
func TestPythonOpNamesAreEngineOpNames(t *testing.T) {
	cfg, err := engine.LoadConfig(filepath.Join("..", "testdata", "python", "checkpoint"))
	if err != nil {
		t.Fatal(err)
	}
	names := engine.OpNames(cfg)
	for _, f := range []string{"trainer.arrow", "sampler.arrow"} {
		c := pyOpen(t, f)
		seen := map[string]bool{}
		for i := 0; i < c.Len(); i++ {
			e := c.Entry(i)
			if idx := slices.Index(names, e.Op); idx < 0 || int32(idx) != e.Index {
				t.Fatalf("%s: op %q has index %d; engine.OpNames puts it at %d", f, e.Op, e.Index, idx)
			}
			seen[e.Op] = true
		}
		for _, op := range names {
			hooked := op != "layers.0.attn.q_rope" && op != "layers.0.attn.k_rope" && (op != "sample" || f == "sampler.arrow")
			if seen[op] != hooked {
				t.Errorf("%s: op %s recorded = %v, want %v", f, op, seen[op], hooked)
			}
		}
	}
}

// TestDiffPythonTrainerSampler diffs the two fixtures and checks the report against the files themselves.
func TestDiffPythonTrainerSampler(t *testing.T) {
	a, b := pyOpen(t, "trainer.arrow"), pyOpen(t, "sampler.arrow")
	cfg, err := engine.LoadConfig(filepath.Join("..", "testdata", "python", "checkpoint"))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := session.Diff(context.Background(), a, b,
		session.WithProducers(func(op string) []string { return engine.Producers(cfg, op) }))
	if err != nil {
		t.Fatal(err)
	}
	if rep.A.Side != "trainer" || rep.B.Side != "sampler" || rep.A.Architecture != "qwen3" {
		t.Errorf("capture info %+v / %+v", rep.A, rep.B)
	}
	ra, rb := pyRows(t, a), pyRows(t, b)

	// brute force: per op, do the shared rows differ, and is any row on one side only?
	type verdict struct{ differs, onlyA, onlyB bool }
	want := map[string]*verdict{}
	get := func(op string) *verdict {
		if want[op] == nil {
			want[op] = &verdict{}
		}
		return want[op]
	}
	for k, da := range ra {
		v := get(k.op)
		if db, ok := rb[k]; !ok {
			v.onlyA = true
		} else if !bytes.Equal(da, db) {
			v.differs = true
		}
	}
	for k := range rb {
		if _, ok := ra[k]; !ok {
			get(k.op).onlyB = true
		}
	}
	for _, o := range rep.Ops {
		v := want[o.Op]
		if v == nil {
			t.Errorf("report has op %s that neither capture holds", o.Op)
			continue
		}
		var st session.Status
		switch {
		case !pyHasOp(ra, o.Op):
			st = session.StatusMissingA
		case !pyHasOp(rb, o.Op):
			st = session.StatusMissingB
		case v.differs:
			st = session.StatusDivergent
		case v.onlyA || v.onlyB:
			st = session.StatusIncomplete
		default:
			st = session.StatusIdentical
		}
		if o.Status != st {
			t.Errorf("%s: status %s, brute force says %s", o.Op, o.Status, st)
		}
	}
	// the first divergence: the differing row of lowest (seq, pos), then lowest execution index
	index := map[string]int32{}
	for _, o := range rep.Ops {
		index[o.Op] = o.Index
	}
	var first *pyRow
	for k, da := range ra {
		if db, ok := rb[k]; !ok || bytes.Equal(da, db) {
			continue
		}
		if first == nil || k.seq < first.seq || k.seq == first.seq && (k.pos < first.pos ||
			k.pos == first.pos && index[k.op] < index[first.op]) {
			first = &k
		}
	}
	firstOp := ""
	if first != nil {
		firstOp = first.op
	}
	if len(rep.Ops) != len(want) {
		t.Errorf("report has %d ops, the captures %d", len(rep.Ops), len(want))
	}
	// the sampler never computed logits before the last prompt position, and only it has "sample"
	for _, o := range rep.Ops {
		switch o.Op {
		case "tokens", "embed":
			if o.Status != session.StatusIdentical {
				t.Errorf("%s: %s (a gather is the same bits at any batch shape)", o.Op, o.Status)
			}
		case "logits":
			if o.MissingRowsB != 3 || o.MissingRowsA != 0 { // positions 0..P-2: 2 + 1
				t.Errorf("logits: missing rows A %d, B %d; want 0, 3", o.MissingRowsA, o.MissingRowsB)
			}
		case "sample":
			if o.Status != session.StatusMissingA {
				t.Errorf("sample: %s, want %s", o.Status, session.StatusMissingA)
			}
		}
	}
	switch {
	case firstOp == "" && rep.First != nil:
		t.Errorf("report's first divergence %s, but the shared rows are identical", rep.First.Op)
	case firstOp != "" && (rep.First == nil || rep.First.Op != firstOp):
		t.Errorf("report's first divergence %+v, want op %s (the differing row of lowest seq, pos, index)", rep.First, firstOp)
	case first != nil && (rep.First.At.Seq != first.seq || rep.First.At.Pos != first.pos):
		t.Errorf("report's first divergence at seq %d pos %d, want seq %d pos %d", rep.First.At.Seq, rep.First.At.Pos, first.seq, first.pos)
	}
	if rep.Identical {
		t.Error("report says identical; the captures cover different positions")
	}
	if rep.First != nil {
		t.Logf("first divergence: %s at seq %d pos %d (%d ULP)", rep.First.Op, rep.First.At.Seq, rep.First.At.Pos, rep.First.ULP)
	}
}

func pyHasOp(rows map[pyRow][]byte, op string) bool {
	for k := range rows {
		if k.op == op {
			return true
		}
	}
	return false
}

// TestReplayPythonFixtures replays both Python captures with the engine (float32, CPU) from their token ids:
// every op transformers produced must come back within float32 accuracy (max |a−b| / max |b| over the op
// below 1e-5) with the same argmax of the logits. This is the CI-sized version of capture/python's
// test_torch_replay.py, which does the same for Llama, Qwen2 and Qwen3 with torch at hand.
func TestReplayPythonFixtures(t *testing.T) {
	m, err := engine.Load(filepath.Join("..", "testdata", "python", "checkpoint"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"trainer.arrow", "sampler.arrow"} {
		t.Run(name, func(t *testing.T) {
			out := t.TempDir()
			if _, err := m.Replay(context.Background(), filepath.Join("..", "testdata", "python", name), out,
				engine.ReplayOptions{}); err != nil {
				t.Fatal(err)
			}
			rc, err := capture.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			want, got := pyRows(t, pyOpen(t, name)), pyRows(t, rc)
			maxDiff, maxAbs := map[string]float64{}, map[string]float64{}
			for k, w := range want {
				if k.op == "tokens" || k.op == "sample" {
					continue
				}
				g, ok := got[k]
				if !ok || len(g) != len(w) {
					t.Fatalf("%v: not in the replay (or another shape)", k)
				}
				wf, gf := pyFloats(w), pyFloats(g)
				for i := range wf {
					maxDiff[k.op] = max(maxDiff[k.op], math.Abs(gf[i]-wf[i]))
					maxAbs[k.op] = max(maxAbs[k.op], math.Abs(wf[i]))
				}
				if k.op == "logits" && hftest.Argmax(wf) != hftest.Argmax(gf) {
					t.Errorf("%v: argmax %d in the capture, %d in the replay", k, hftest.Argmax(wf), hftest.Argmax(gf))
				}
			}
			if len(maxDiff) != 19 { // every op but tokens, sample and the rope ops HF hooks cannot see
				t.Errorf("compared %d ops, want 19", len(maxDiff))
			}
			for op, d := range maxDiff {
				if rel := d / maxAbs[op]; !(rel < 1e-5) {
					t.Errorf("%s: relative error %.3g between transformers and the replay", op, rel)
				}
			}
		})
	}
}

func pyFloats(b []byte) []float64 {
	out := make([]float64, len(b)/4)
	for i := range out {
		out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	}
	return out
}

// TestDiffPythonFingerprintFixtures: the Python recorder's fingerprint captures of the same runs
// (trainer-fp.arrow, sampler-fp.arrow: each forward's fingerprint tensors in one record batch of many rows,
// docs/capture-format.md "Many a record batch") equal their full captures, and their diff finds the full pair's
// first divergence (op, role, step, seq, pos) and every op's verdict.
func TestDiffPythonFingerprintFixtures(t *testing.T) {
	ctx := context.Background()
	for _, side := range []string{"trainer", "sampler"} {
		rep, err := session.Diff(ctx, pyOpen(t, side+"-fp.arrow"), pyOpen(t, side+".arrow"))
		if err != nil {
			t.Fatal(err)
		}
		if !rep.Identical || rep.Located == 0 {
			t.Errorf("%s-fp.arrow vs %s.arrow: identical %v, %d ops through fingerprints, first %+v", side, side,
				rep.Identical, rep.Located, rep.First)
		}
	}
	full, err := session.Diff(ctx, pyOpen(t, "trainer.arrow"), pyOpen(t, "sampler.arrow"))
	if err != nil {
		t.Fatal(err)
	}
	fp, err := session.Diff(ctx, pyOpen(t, "trainer-fp.arrow"), pyOpen(t, "sampler-fp.arrow"))
	if err != nil {
		t.Fatal(err)
	}
	if full.First == nil || fp.First == nil {
		t.Fatalf("first divergence: full %+v, fingerprints %+v", full.First, fp.First)
	}
	f, g := full.First, fp.First
	if f.Op != g.Op || f.Role != g.Role || f.At.Step != g.At.Step || f.At.Seq != g.At.Seq || f.At.Pos != g.At.Pos {
		t.Errorf("first divergence: full %s [%s] %d/%d/%d, fingerprints %s [%s] %d/%d/%d", f.Op, f.Role, f.At.Step,
			f.At.Seq, f.At.Pos, g.Op, g.Role, g.At.Step, g.At.Seq, g.At.Pos)
	}
	status := func(r *session.Report) map[string]session.Status {
		m := map[string]session.Status{}
		for _, o := range r.Ops {
			m[o.Op+" "+o.Role] = o.Status
		}
		return m
	}
	sf, sg := status(full), status(fp)
	if len(sf) != len(sg) || len(sf) < 20 {
		t.Errorf("%d ops in the full diff, %d in the fingerprint diff", len(sf), len(sg))
	}
	for k, v := range sf {
		if sg[k] != v {
			t.Errorf("%s: full diff %s, fingerprint diff %s", k, v, sg[k])
		}
	}
}
