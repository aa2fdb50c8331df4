package session

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"bitalign/capture"
	"bitalign/engine"
)

// fpDiff diffs two captures with the engine's producers, as bitalign diff does.
func fpDiff(t *testing.T, a, b *capture.Capture) *Report {
	t.Helper()
	var opts []Option
	if g := ProducerGraph(nil, a.Meta(), b.Meta()); g != nil {
		opts = append(opts, WithProducers(g))
	}
	r, err := Diff(context.Background(), a, b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	checkVerdict(t, a.Path()+" ↔ "+b.Path(), a, b, r, opts...)
	return r
}

// writeFP writes c as a fingerprint capture (full ops beside) and opens it.
func writeFP(t *testing.T, c *capture.Capture, path string, full ...string) *capture.Capture {
	t.Helper()
	if _, err := WriteFingerprints(context.Background(), c, path, FingerprintOptions{FullOps: full}); err != nil {
		t.Fatal(err)
	}
	return openTestCapture(t, path)
}

// sameVerdicts fails unless fingerprint report got finds what the full report want finds: the same first
// divergence (op, role, step, seq, pos) and the same status, cause and differing row positions of every op.
func sameVerdicts(t *testing.T, name string, want, got *Report, fullOps map[string]bool) {
	t.Helper()
	if (want.First == nil) != (got.First == nil) {
		t.Fatalf("%s: first divergence %v, full diff %v", name, got.First, want.First)
	}
	if want.Identical != got.Identical {
		t.Errorf("%s: identical %v, full diff %v", name, got.Identical, want.Identical)
	}
	if w, g := want.First, got.First; w != nil {
		if w.Op != g.Op || w.Role != g.Role || w.At.Step != g.At.Step || w.At.Seq != g.At.Seq || w.At.Pos != g.At.Pos {
			t.Errorf("%s: first divergence %s [%s] at %s, full diff %s [%s] at %s", name, g.Op, g.Role, where(g.At), w.Op, w.Role, where(w.At))
		}
		if g.Located != wantLocated(g.Op, fullOps) {
			t.Errorf("%s: first divergence located %v with full ops %v", name, g.Located, fullOps)
		}
	}
	if len(want.Ops) != len(got.Ops) {
		t.Fatalf("%s: %d ops, full diff %d", name, len(got.Ops), len(want.Ops))
	}
	var divergent []string
	for i := range want.Ops {
		w, g := &want.Ops[i], &got.Ops[i]
		if w.Op != g.Op || w.Role != g.Role || w.Status != g.Status || w.Cause != g.Cause {
			t.Errorf("%s: op %d: %s [%s] %s (%s), full diff %s [%s] %s (%s)", name, i, g.Op, g.Role, g.Status, g.Cause, w.Op, w.Role, w.Status, w.Cause)
			continue
		}
		if g.Located != wantLocated(g.Op, fullOps) {
			t.Errorf("%s: %s located %v", name, g.Op, g.Located)
		}
		if w.Divergent() && (w.FirstAt.Pos != g.FirstAt.Pos || w.FirstAt.Seq != g.FirstAt.Seq) {
			t.Errorf("%s: %s first differs at seq %d pos %d, full diff seq %d pos %d", name, g.Op, g.FirstAt.Seq, g.FirstAt.Pos, w.FirstAt.Seq, w.FirstAt.Pos)
		}
		if g.Located && w.Divergent() && !strings.Contains(strings.Join(divergent, ","), g.Op) {
			divergent = append(divergent, g.Op)
		}
	}
	if strings.Join(divergent, ",") != strings.Join(got.LocatedOnly, ",") {
		t.Errorf("%s: located only %v, want %v", name, got.LocatedOnly, divergent)
	}
}

// wantLocated: an op is compared through fingerprints unless it is in full on both sides.
func wantLocated(op string, fullOps map[string]bool) bool {
	return !fullOps[op] && !slices.Contains(capture.FullAlways, op)
}

// TestFingerprintDemoFaults: on the engine's demo with each of its faults (and none), a diff of fingerprint
// captures, of a fingerprint capture against a full one (either way round), and of fingerprints with some ops
// in full, find the full diff's first divergence and its per-op verdicts.
func TestFingerprintDemoFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the engine's demo")
	}
	faults := []string{""}
	for _, f := range engine.Faults() {
		faults = append(faults, f.Name)
	}
	for _, fault := range faults {
		t.Run(cmpName(fault), func(t *testing.T) {
			dir := t.TempDir()
			if err := engine.Demo(dir, engine.DemoOptions{Fault: fault, Layer: DefaultDemoLayer}); err != nil {
				t.Fatal(err)
			}
			ta := openTestCapture(t, filepath.Join(dir, "trainer"))
			sb := openTestCapture(t, filepath.Join(dir, "sampler"))
			full := fpDiff(t, ta, sb)
			fa := writeFP(t, ta, filepath.Join(dir, "trainer.fp.arrow"))
			fb := writeFP(t, sb, filepath.Join(dir, "sampler.fp.arrow"))
			none := map[string]bool{}
			ff := fpDiff(t, fa, fb)
			sameVerdicts(t, "fp/fp", full, ff, none)
			// the record line names where divergences start (the first among them), never a propagated op
			if f := ff.First; f != nil && f.Located && !strings.Contains(ff.RecordFull(), `"`+f.Op+`"`) {
				t.Errorf("record line %q lacks the first divergence %s", ff.RecordFull(), f.Op)
			}
			for _, o := range ff.Ops {
				if o.Cause == CausePropagated && strings.Contains(ff.RecordFull(), `"`+o.Op+`"`) && (ff.First == nil || o.Op != ff.First.Op) {
					t.Errorf("record line %q names the propagated %s", ff.RecordFull(), o.Op)
				}
			}
			sameVerdicts(t, "fp/full", full, fpDiff(t, fa, sb), none)
			sameVerdicts(t, "full/fp", full, fpDiff(t, ta, fb), none)
			if full.First == nil {
				return
			}
			// the first divergent op recorded in full on both sides: its values and ULPs come back
			op := full.First.Op
			ga := writeFP(t, ta, filepath.Join(dir, "trainer.fp2.arrow"), op)
			gb := writeFP(t, sb, filepath.Join(dir, "sampler.fp2.arrow"), op)
			mixed := fpDiff(t, ga, gb)
			sameVerdicts(t, "fp+full", full, mixed, map[string]bool{op: true})
			if f := mixed.First; f.A != full.First.A || f.B != full.First.B || f.ULP != full.First.ULP {
				t.Errorf("with %s in full: first divergence %v/%v %d ULP, full diff %v/%v %d ULP", op, f.A, f.B, f.ULP, full.First.A, full.First.B, full.First.ULP)
			}
			// the size of the fingerprint captures against the full ones (files)
			for _, side := range []string{"trainer", "sampler"} {
				t.Logf("%s: %s capture %d bytes, its fingerprint capture %d bytes", cmpName(fault), side,
					pathSize(t, filepath.Join(dir, side)), pathSize(t, filepath.Join(dir, side+".fp.arrow")))
			}
		})
	}
}

func cmpName(fault string) string {
	if fault == "" {
		return "none"
	}
	return fault
}

// fpOps are three ops of two sequences, bf16 [4, 6] per sequence.
func fpOps() []capture.Tensor {
	var ts []capture.Tensor
	for seq := int64(0); seq < 2; seq++ {
		for i, op := range []string{"embed", "layers.0.attn_norm", "layers.0.mlp"} {
			ts = append(ts, tensor(op, int32(i), "out", seq, 0, 4, 6, activation(seq, uint64(i), 0, 4, 6)))
		}
	}
	return ts
}

// A single flipped bit anywhere in a full capture is found by a fingerprint diff at its op, sequence and
// position, against fingerprints of the unflipped capture and in a mixed pair, every format saying it was
// located only and printing the record line.
func TestFingerprintFindsEveryFlippedBit(t *testing.T) {
	dir := t.TempDir()
	base := writeCapture(t, filepath.Join(dir, "a.arrow"), "trainer", 1, fpOps())
	fa := writeFP(t, base, filepath.Join(dir, "a.fp.arrow"))
	ts := fpOps()
	for ti := range ts {
		for bit := 0; bit < len(ts[ti].Data)*8; bit += 7 { // every 7th bit: each byte and bit position is hit
			ts := fpOps()
			ts[ti].Data[bit/8] ^= 1 << (bit % 8)
			path := filepath.Join(dir, fmt.Sprintf("b%d-%d.arrow", ti, bit))
			b := writeCapture(t, path, "sampler", 1, ts)
			for _, pair := range []struct {
				name string
				b    *capture.Capture
			}{{"fp/full", b}, {"fp/fp", writeFP(t, b, path+".fp")}} {
				r := fpDiff(t, fa, pair.b)
				sameVerdicts(t, fmt.Sprintf("%s, bit %d of %s seq %d", pair.name, bit, ts[ti].Op, ts[ti].Seq), fpDiff(t, base, b), r, map[string]bool{})
				row := int64(bit/8) / 12 // 6 bf16 features: 12 bytes a row
				if r.First == nil || r.First.Op != ts[ti].Op || r.First.At.Seq != ts[ti].Seq || r.First.At.Pos != row || !r.First.Located {
					t.Fatalf("%s: bit %d of %s seq %d (pos %d): first divergence %+v", pair.name, bit, ts[ti].Op, ts[ti].Seq, row, r.First)
				}
				if r.Mismatched != 1 || r.Located != 3 || len(r.LocatedOnly) != 1 {
					t.Fatalf("%s: %d rows mismatched, %d located, located only %v", pair.name, r.Mismatched, r.Located, r.LocatedOnly)
				}
			}
		}
	}
	// the reports say it, in every format
	ts = fpOps()
	ts[4].Data[13] ^= 0x10 // layers.0.attn_norm seq 1, pos 1
	b := writeCapture(t, filepath.Join(dir, "b.arrow"), "sampler", 1, ts)
	r := fpDiff(t, fa, b)
	line := `bitalign_capture.record(..., mode="fingerprint", full_ops=["layers.0.attn_norm"])`
	if r.RecordFull() != line {
		t.Errorf("record line %q", r.RecordFull())
	}
	for _, w := range []struct {
		name  string
		write func(*bytes.Buffer, *Report) error
	}{
		{"text", func(b *bytes.Buffer, r *Report) error { return WriteText(b, r) }},
		{"markdown", func(b *bytes.Buffer, r *Report) error { return WriteMarkdown(b, r) }},
		{"html", func(b *bytes.Buffer, r *Report) error { return WriteHTML(b, r) }},
	} {
		var buf bytes.Buffer
		if err := w.write(&buf, r); err != nil {
			t.Fatal(err)
		}
		s := buf.String()
		if w.name == "html" {
			s = strings.ReplaceAll(s, "&#34;", `"`)
		}
		for _, want := range []string{"3 ops compared through fingerprints", "located only", line, "step 0 seq 1 pos 1 (the whole row)"} {
			if !strings.Contains(strings.ToLower(s), strings.ToLower(want)) {
				t.Errorf("%s report lacks %q:\n%s", w.name, want, s)
			}
		}
	}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, r); err != nil {
		t.Fatal(err)
	}
	var j struct {
		Version     int      `json:"version"`
		Located     int      `json:"located"`
		LocatedOnly []string `json:"located_only"`
		RecordFull  string   `json:"record_full"`
		First       struct {
			Located bool   `json:"located"`
			Pos     int64  `json:"pos"`
			Op      string `json:"op"`
		} `json:"first_divergence"`
		Ops []struct {
			Located  bool   `json:"located"`
			Elements int64  `json:"elements"`
			Status   string `json:"status"`
		} `json:"ops"`
	}
	if err := json.Unmarshal(buf.Bytes(), &j); err != nil {
		t.Fatal(err)
	}
	if j.Version != 4 || j.Located != 3 || len(j.LocatedOnly) != 1 || j.RecordFull != line || !j.First.Located ||
		j.First.Pos != 1 || j.First.Op != "layers.0.attn_norm" || len(j.Ops) != 3 || !j.Ops[1].Located || j.Ops[1].Elements != 8 {
		t.Errorf("JSON report: %s", buf.String())
	}
}

// Fingerprints that do not match the other side's rows: a different per-token shape is a different
// fingerprint (the row length is mixed in), positions one side lacks are missing, not divergent.
func TestFingerprintShapesAndMissing(t *testing.T) {
	dir := t.TempDir()
	a := writeCapture(t, filepath.Join(dir, "a.arrow"), "trainer", 1, fpOps())
	fa := writeFP(t, a, filepath.Join(dir, "a.fp.arrow"))
	var ts []capture.Tensor
	for _, x := range fpOps() {
		if x.Seq == 1 && x.Op == "layers.0.mlp" { // positions 0..2 only
			x.NTok, x.Shape, x.Data = 3, []int64{3, 6}, x.Data[:3*12]
		}
		if x.Op == "embed" { // 6 bf16 features padded to 8: every row's fingerprint differs
			d := make([]byte, 4*16)
			for r := 0; r < 4; r++ {
				copy(d[r*16:], x.Data[r*12:(r+1)*12])
			}
			x.Shape, x.Data = []int64{4, 8}, d
		}
		ts = append(ts, x)
	}
	b := writeCapture(t, filepath.Join(dir, "b.arrow"), "sampler", 1, ts)
	r := fpDiff(t, fa, b)
	st := map[string]OpStat{}
	for _, o := range r.Ops {
		st[o.Op] = o
	}
	if o := st["embed"]; o.Status != StatusDivergent || o.Mismatched != 8 || o.DType != "bf16" || len(o.Shape) != 1 || o.Shape[0] != 8 {
		t.Errorf("embed: %+v", o)
	}
	if o := st["layers.0.mlp"]; o.Status != StatusIncomplete || o.MissingRowsB != 1 {
		t.Errorf("layers.0.mlp: %+v", o)
	}
	if o := st["layers.0.attn_norm"]; o.Status != StatusIdentical || o.Elements != 8 {
		t.Errorf("layers.0.attn_norm: %+v", o)
	}
	// a fingerprint capture written over an existing file is refused unless asked
	if _, err := WriteFingerprints(context.Background(), a, filepath.Join(dir, "a.fp.arrow"), FingerprintOptions{}); err == nil {
		t.Error("WriteFingerprints replaced an existing file")
	}
	if _, err := WriteFingerprints(context.Background(), a, filepath.Join(dir, "c.arrow"), FingerprintOptions{FullOps: []string{"nope.*"}}); err == nil ||
		!strings.Contains(err.Error(), "matches no op") {
		t.Errorf("a full-ops pattern matching nothing: %v", err)
	}
}

// pathSize is the size of a file, or of the files of a directory.
func pathSize(t testing.TB, path string) int64 {
	var n int64
	err := filepath.Walk(path, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestFingerprintDemoFlippedBit: the engine's identical demo pair with one bit flipped in one of the sampler's
// tensors (a layer's q_proj, mid-sequence): fingerprint against fingerprint, against full either way round, and
// with the op in full find the full diff's first divergence and per-op verdicts (causes from the demo's
// producer graph included).
func TestFingerprintDemoFlippedBit(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the engine's demo")
	}
	dir := t.TempDir()
	if err := engine.Demo(dir, engine.DemoOptions{}); err != nil {
		t.Fatal(err)
	}
	ta := openTestCapture(t, filepath.Join(dir, "trainer"))
	sb := openTestCapture(t, filepath.Join(dir, "sampler"))
	if r := fpDiff(t, ta, sb); !r.Identical {
		t.Fatalf("the demo without a fault is not identical: %s", r.Verdict())
	}
	const op = "layers.1.attn.q_proj"
	var ts []capture.Tensor
	flipped := -1
	for i := 0; i < sb.Len(); i++ {
		x, err := sb.Tensor(i)
		if err != nil {
			t.Fatal(err)
		}
		x.Data = bytes.Clone(x.Data)
		if flipped < 0 && x.Op == op && x.Seq == 1 && x.Pos >= 3 {
			x.Data[len(x.Data)/2] ^= 0x08
			flipped = i
		}
		ts = append(ts, x)
	}
	if flipped < 0 || len(sb.Files()) != 1 {
		t.Fatalf("no %s tensor of seq 1 from pos 3 in the sampler (%d files)", op, len(sb.Files()))
	}
	fb := filepath.Join(dir, "sampler-flipped.arrow")
	if err := capture.WriteAll(fb, sb.Meta(), ts); err != nil {
		t.Fatal(err)
	}
	b := openTestCapture(t, fb)
	full := fpDiff(t, ta, b)
	if full.First == nil || full.First.Op != op || full.Mismatched != 1 {
		t.Fatalf("full diff: first %+v, %d mismatched; want one element of %s", full.First, full.Mismatched, op)
	}
	fa := writeFP(t, ta, filepath.Join(dir, "trainer.fp.arrow"))
	fbp := writeFP(t, b, filepath.Join(dir, "sampler-flipped.fp.arrow"))
	none := map[string]bool{}
	sameVerdicts(t, "fp/fp", full, fpDiff(t, fa, fbp), none)
	sameVerdicts(t, "fp/full", full, fpDiff(t, fa, b), none)
	sameVerdicts(t, "full/fp", full, fpDiff(t, ta, fbp), none)
	ga := writeFP(t, ta, filepath.Join(dir, "trainer.fp2.arrow"), op)
	gb := writeFP(t, b, filepath.Join(dir, "sampler-flipped.fp2.arrow"), op)
	mixed := fpDiff(t, ga, gb)
	sameVerdicts(t, "fp+full", full, mixed, map[string]bool{op: true})
	if f := mixed.First; f.A != full.First.A || f.B != full.First.B || f.ULP != full.First.ULP {
		t.Errorf("with %s in full: %v/%v %d ULP, full diff %v/%v %d ULP", op, f.A, f.B, f.ULP, full.First.A, full.First.B, full.First.ULP)
	}
}
