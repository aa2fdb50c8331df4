package session

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"testing"

	"bitalign/capture"
)

// writeAll renders r in every format, for checks that must hold in all of them.
func writeAll(t *testing.T, r *Report) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, w := range map[string]func(*bytes.Buffer) error{
		"txt":  func(b *bytes.Buffer) error { return WriteText(b, r) },
		"md":   func(b *bytes.Buffer) error { return WriteMarkdown(b, r) },
		"html": func(b *bytes.Buffer) error { return WriteHTML(b, r) },
		"json": func(b *bytes.Buffer) error { return WriteJSON(b, r) },
	} {
		var b bytes.Buffer
		if err := w(&b); err != nil {
			t.Fatal(err)
		}
		out[name] = b.String()
	}
	return out
}

func TestDiffOps(t *testing.T) {
	rep := scenario(t, true, WithOps("layers.0.attn*", "logit?"))
	var got []string
	for _, o := range rep.Ops {
		got = append(got, o.Op+"["+o.Role+"]")
	}
	want := "layers.0.attn_norm[out] layers.0.attn.q_proj[in] layers.0.attn.q_proj[out] layers.0.attn_residual[out] logits[out]"
	if strings.Join(got, " ") != want {
		t.Fatalf("ops %v, want %s", got, want)
	}
	if len(rep.Missing) != 0 || rep.Compared != 4*320+480 {
		t.Errorf("missing %v, compared %d", rep.Missing, rep.Compared)
	}
	for name, s := range writeAll(t, rep) {
		if !strings.Contains(s, "layers.0.attn*") {
			t.Errorf("%s report does not name the op patterns", name)
		}
	}
	// a residual whose producer q_proj is left out: unknown, and said why
	rep = scenario(t, true, WithOps("layers.0.attn_residual", "embed"))
	if o := rep.Ops[rep.FindOp("layers.0.attn_residual", "out")]; o.Cause != CauseUnknown ||
		!strings.Contains(o.CauseDetail, "not compared (left out by the op patterns): layers.0.attn.q_proj") {
		t.Errorf("residual: %s (%s)", o.Cause, o.CauseDetail)
	}
	for _, tc := range []struct {
		pats []string
		err  string
	}{
		{[]string{"layers.9*"}, `op pattern "layers.9*" matches no op`},
		{[]string{"embed", "lgits"}, `op pattern "lgits" matches no op`},
		{[]string{"layers.[0"}, `op pattern "layers.[0": syntax error`},
	} {
		dir := t.TempDir()
		ts := prefill(testOps, 1, 4, 8)
		a := writeCapture(t, dir+"/a.arrow", "trainer", 1, ts)
		b := writeCapture(t, dir+"/b.arrow", "sampler", 1, ts)
		if _, err := Diff(context.Background(), a, b, WithOps(tc.pats...)); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%v: error %v, want %q", tc.pats, err, tc.err)
		}
	}
}

func TestDiffIgnoreMissing(t *testing.T) {
	dir := t.TempDir()
	full := prefill(testOps, 2, 6, 8)
	var part []capture.Tensor // B lacks one op and seq 1 of another
	for _, x := range full {
		if x.Op != "layers.0.attn_residual" && !(x.Op == "embed" && x.Seq == 1) {
			part = append(part, x)
		}
	}
	a := writeCapture(t, dir+"/a.arrow", "trainer", 1, full)
	b := writeCapture(t, dir+"/b.arrow", "sampler", 1, part)
	strict, err := Diff(context.Background(), a, b)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Diff(context.Background(), a, b, WithIgnoreMissing())
	if err != nil {
		t.Fatal(err)
	}
	if strict.Identical || !rep.Identical || len(rep.Missing) != 3 || !rep.IgnoreMissing {
		t.Fatalf("identical %v / %v with --ignore-missing, missing %d", strict.Identical, rep.Identical, len(rep.Missing))
	}
	if v := rep.Verdict(); v != "bitwise identical (3 missing tensors ignored)" {
		t.Errorf("verdict %q", v)
	}
	for name, s := range writeAll(t, rep) {
		if name == "json" {
			if !strings.Contains(s, `"ignore_missing": true`) || strings.Count(s, `"missing_in": "B"`) != 3 {
				t.Errorf("json does not say it ignored 3 missing tensors:\n%s", s)
			}
			continue
		}
		if !strings.Contains(s, "issing ignored: 3 tensors on one side only (1 whole op, 18 positions)") {
			t.Errorf("%s: no line counting the missing tensors:\n%s", name, s)
		}
		if strings.Contains(s, "lacks") || strings.Contains(s, "layers.0.attn_residual") {
			t.Errorf("%s lists missing tensors as problems:\n%s", name, s)
		}
	}
	// a tensor that cannot be aligned is not merely absent: it still counts
	odd := tensor("layers.0.attn_residual", 3, "out", 0, 0, 2, 8, make([]byte, 2*9))
	odd.Shape = []int64{3, 3}
	b = writeCapture(t, dir+"/b1.arrow", "sampler", 1, append(slices.Clone(part), odd))
	if rep, err = Diff(context.Background(), a, b, WithIgnoreMissing()); err != nil || rep.Identical || len(rep.MissingProblems()) != 1 {
		t.Fatalf("unalignable tensor with --ignore-missing: identical %v, problems %v, err %v", rep.Identical, rep.MissingProblems(), err)
	}
	var txt bytes.Buffer
	if err := WriteText(&txt, rep); err != nil || !strings.Contains(txt.String(), "does not split into 2 token rows") {
		t.Errorf("the unalignable tensor is not listed: %v\n%s", err, txt.String())
	}
	// a shape mismatch is not "missing": still not identical
	for i := range part {
		if part[i].Op == "embed" {
			part[i].Shape = []int64{6, 4, 2}
		}
	}
	b = writeCapture(t, dir+"/b2.arrow", "sampler", 1, part)
	if rep, err = Diff(context.Background(), a, b, WithIgnoreMissing()); err != nil || rep.Identical {
		t.Fatalf("shape mismatch with --ignore-missing: identical %v, err %v", rep.Identical, err)
	}
}

func TestDiffNothingCompared(t *testing.T) {
	dir := t.TempDir()
	a := writeCapture(t, dir+"/a.arrow", "trainer", 1, prefill(testOps[:2], 1, 4, 8))
	b := writeCapture(t, dir+"/b.arrow", "sampler", 1, prefill([]string{"x", "y"}, 1, 4, 8))
	for _, opts := range [][]Option{nil, {WithIgnoreMissing()}, {WithOps("embed", "y")}} {
		rep, err := Diff(context.Background(), a, b, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Identical || rep.Compared != 0 || !strings.HasPrefix(rep.Verdict(), "nothing compared") {
			t.Errorf("identical %v, compared %d, verdict %q", rep.Identical, rep.Compared, rep.Verdict())
		}
		if len(opts) == 1 && len(rep.Filter) > 0 && !strings.Contains(rep.Verdict(), "ops matching embed, y") {
			t.Errorf("verdict %q does not name the patterns", rep.Verdict())
		}
		for name, s := range writeAll(t, rep) {
			if strings.Contains(s, "compared elements identical") || strings.Contains(s, "bitwise identical") {
				t.Errorf("%s report claims identity with nothing compared:\n%s", name, s)
			}
		}
	}
	// empty captures: nothing compared either
	a = writeCapture(t, dir+"/e1.arrow", "trainer", 1, nil)
	b = writeCapture(t, dir+"/e2.arrow", "sampler", 1, nil)
	if rep, err := Diff(context.Background(), a, b); err != nil || rep.Identical || rep.Verdict() != "nothing compared" {
		t.Errorf("empty captures: %v %q", err, rep.Verdict())
	}
}

func TestDiffTolerance(t *testing.T) {
	attn := WithOps("layers.0.attn*")
	for _, tc := range []struct {
		name    string
		opts    []Option
		tol     Tolerance
		within  bool
		ulpHeld bool
		relHeld bool
		text    string
	}{
		{"ulp held", []Option{attn}, Tolerance{MaxULP: 64, HasULP: true}, true, true, true, "max ULP ≤ 64: held (largest 64 ULP, layers.0.attn_residual [out])"},
		{"ulp failed", []Option{attn}, Tolerance{MaxULP: 63, HasULP: true}, false, false, true, "max ULP ≤ 63: failed (largest 64 ULP"},
		{"rel failed", []Option{attn}, Tolerance{MaxULP: 64, HasULP: true, MaxRel: 0.5, HasRel: true}, false, true, false, "|a−b|/RMS ≤ 0.5: failed (largest 0.502"},
		{"rel held", []Option{attn}, Tolerance{MaxRel: 0.6, HasRel: true}, true, true, true, "|a−b|/RMS ≤ 0.6: held"},
		{"nan fails both", []Option{WithOps("logits")}, Tolerance{MaxULP: 1000, HasULP: true, MaxRel: 1, HasRel: true}, false, false, false,
			"NaN against a number in logits [out]"},
		{"missing is a problem", nil, Tolerance{MaxULP: 1 << 40, HasULP: true}, false, false, true, "problem: 3 missing tensors"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := scenario(t, true, append(tc.opts, WithTolerance(tc.tol))...)
			c := rep.Check
			if c == nil || c.Within != tc.within || c.ULPHeld != tc.ulpHeld || c.RelHeld != tc.relHeld {
				t.Fatalf("check %+v", c)
			}
			var b bytes.Buffer
			if err := WriteText(&b, rep); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.String(), tc.text) {
				t.Errorf("text report lacks %q:\n%s", tc.text, b.String())
			}
			if prefix := map[bool]string{true: "within tolerance", false: "outside tolerance"}[tc.within]; !strings.HasPrefix(rep.Verdict(), prefix) {
				t.Errorf("verdict %q", rep.Verdict())
			}
		})
	}
	// differing integers fail whatever the bounds
	dir := t.TempDir()
	ta, tb := tokTensor(0, 0, 4), tokTensor(0, 0, 4)
	tb.Data = bytes.Clone(tb.Data)
	tb.Data[8] ^= 1
	a := writeCapture(t, dir+"/a.arrow", "trainer", 1, []capture.Tensor{ta})
	b := writeCapture(t, dir+"/b.arrow", "sampler", 1, []capture.Tensor{tb})
	rep, err := Diff(context.Background(), a, b, WithTolerance(Tolerance{MaxULP: 1 << 60, HasULP: true}))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Check.Within || len(rep.Check.Problems) != 1 || rep.Check.Problems[0] != "tokens [out]: 1 value differs" {
		t.Errorf("tokens differ: %+v", rep.Check)
	}
	if o := rep.Ops[0]; o.ULPDType != "" || o.MaxULP != 0 || o.MaxAt != nil || o.Hist[0] != 3 || o.Map.Cells[0] > 1 {
		t.Errorf("integer op carries distances: %+v", o)
	}
}

// TestDiffRMSRel checks OpStat.MaxRMSRel against its definition, and that a sign flip near zero, which
// max_rel calls a 200% error, is small against the row's scale.
func TestDiffRMSRel(t *testing.T) {
	const H = 8
	bf := func(vals ...float32) []byte {
		out := make([]byte, 2*len(vals))
		for i, v := range vals {
			binary.LittleEndian.PutUint16(out[2*i:], uint16(math.Float32bits(v)>>16))
		}
		return out
	}
	rowA := []float32{1, -2, 0.5, 4, -1, 0.0009765625, 3, -0.25}
	rowB := []float32{1, -2, 0.5, 4, -1, -0.0009765625, 3, -0.25} // element 5 flips sign
	rowC := []float32{8, 8, 8, 8, 8, 8, 8, 8.0625}                // row 2 differs in element 7
	dataA := append(append(bf(rowA...), bf(rowA...)...), bf(rowC[:7]...)...)
	dataA = append(dataA, bf(8)...)
	dataB := append(append(bf(rowA...), bf(rowB...)...), bf(rowC...)...)
	dir := t.TempDir()
	a := writeCapture(t, dir+"/a.arrow", "trainer", 1, []capture.Tensor{tensor("h", 1, "out", 0, 0, 3, H, dataA)})
	b := writeCapture(t, dir+"/b.arrow", "sampler", 1, []capture.Tensor{tensor("h", 1, "out", 0, 0, 3, H, dataB)})
	rep, err := Diff(context.Background(), a, b)
	if err != nil {
		t.Fatal(err)
	}
	rms := func(x, y []float32) float64 {
		var s float64
		for i := range x {
			s += float64(x[i])*float64(x[i]) + float64(y[i])*float64(y[i])
		}
		return math.Sqrt(s / float64(2*len(x)))
	}
	rowCA := append(append([]float32{}, rowC[:7]...), 8)
	want := max(2*0.0009765625/rms(rowA, rowB), 0.0625/rms(rowCA, rowC))
	o := rep.Ops[0]
	if o.Mismatched != 2 || math.Abs(o.MaxRMSRel-want) > 1e-15 {
		t.Fatalf("max |a−b|/RMS %g (%d mismatched), want %g", o.MaxRMSRel, o.Mismatched, want)
	}
	if o.MaxRel != 2 || o.MaxRMSRel > 0.01 {
		t.Errorf("max rel %g, max |a−b|/RMS %g: the sign flip near zero should be 2 and small", o.MaxRel, o.MaxRMSRel)
	}
	if f := rep.First; f == nil || f.At.Pos != 1 || math.Abs(f.RMSRel-2*0.0009765625/rms(rowA, rowB)) > 1e-15 {
		t.Errorf("first divergence %+v", f)
	}
}

// The captures' header leaves out what their metadata does not have, in every human format.
func TestReportHeaderOmitsAbsentFields(t *testing.T) {
	rep := scenario(t, false)
	rep.A.BatchSize, rep.A.KernelProfile, rep.A.Architecture = 0, "", ""
	rep.B.BatchSize, rep.B.KernelProfile, rep.B.Architecture = 0, "", ""
	for name, s := range writeAll(t, rep) {
		if name == "json" {
			continue
		}
		for _, bad := range []string{"batch", "profile", "llama"} {
			if strings.Contains(s, bad) {
				t.Errorf("%s report shows %q though neither capture has it", name, bad)
			}
		}
	}
	// one side with a field: shown, the other side "—"
	rep.B.BatchSize = 3
	out := writeAll(t, rep)
	if !strings.Contains(out["md"], "| batch | — | 3 |") || !strings.Contains(out["html"], "<th>batch</th><td>—</td><td>3</td>") ||
		!strings.Contains(out["txt"], "B: sampler sampler.arrow — 124 tensors, 5.5 KiB, tp 1 pp 1 dp 1, batch 3\n") {
		t.Errorf("batch of one side only:\n%s\n%s\n%s", out["txt"], out["md"], out["html"])
	}
}
