package session

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"html/template"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"bitalign/capture"
	"bitalign/internal/golden"
)

// f32Tensor is an f32 [n, v] tensor ([n] when v is 1): bf16 activations widened to f32, with low bits set
// (a genuine f32 op) unless widened.
func f32Tensor(op string, index int32, seq, pos, n, v int64, salt uint64, widened bool) capture.Tensor {
	bf := activation(seq, salt, pos, n, v)
	data := make([]byte, n*v*4)
	for i := int64(0); i < n*v; i++ {
		x := uint32(binary.LittleEndian.Uint16(bf[i*2:])) << 16
		if !widened {
			x |= uint32((pos*v + i) % 7)
		}
		binary.LittleEndian.PutUint32(data[i*4:], x)
	}
	shape := []int64{n, v}
	if v == 1 {
		shape = []int64{n}
	}
	return capture.Tensor{Seq: seq, Pos: pos, NTok: n, Op: op, Index: index, Role: "out", DType: capture.F32,
		Shape: shape, Shard: capture.NoShard, Data: data}
}

func tokTensor(seq, pos, n int64) capture.Tensor {
	data := make([]byte, n*4)
	for i := int64(0); i < n; i++ {
		binary.LittleEndian.PutUint32(data[i*4:], uint32((pos+i)*7+seq))
	}
	return capture.Tensor{Seq: seq, Pos: pos, NTok: n, Op: "tokens", Index: 0, Role: "out", DType: capture.I32,
		Shape: []int64{n}, Shard: capture.NoShard, Data: data}
}

// scenario builds a small trainer (prefill) and sampler (decode) pair exercising every status: a local
// divergence, a propagated one, NaN against a number and a 2-ULP difference in bf16 logits widened to f32,
// missing positions, an op on one side only, a shape mismatch. opts are added to Diff's.
func scenario(t *testing.T, diverge bool, opts ...Option) *Report {
	const T, H, V, P = 10, 16, 24, 4
	side := func(sampler bool) []capture.Tensor {
		var ts []capture.Tensor
		for s := int64(0); s < 2; s++ {
			spans := [][2]int64{{0, T}}
			if sampler {
				spans = [][2]int64{{0, P}}
				for p := int64(P); p < T; p++ {
					spans = append(spans, [2]int64{p, 1})
				}
			}
			for _, sp := range spans {
				pos, n := sp[0], sp[1]
				ts = append(ts, tokTensor(s, pos, n))
				ts = append(ts, tensor("embed", 1, "out", s, pos, n, H, activation(s, 1, pos, n, H)))
				ts = append(ts, tensor("layers.0.attn_norm", 2, "out", s, pos, n, H, activation(s, 2, pos, n, H)))
				ts = append(ts, tensor("layers.0.attn.q_proj", 3, "in", s, pos, n, H, activation(s, 2, pos, n, H)))
				q := activation(s, 3, pos, n, H)
				res := activation(s, 4, pos, n, H)
				lg := f32Tensor("logits", 7, s, pos, n, V, 5, true)
				if sampler && diverge && s == 1 && pos <= 6 && 6 < pos+n {
					flipBit(q, (6-pos)*H+5, 3)
					for j := int64(0); j < H; j += 3 {
						flipBit(res, (6-pos)*H+j, uint(j%9))
					}
				}
				if sampler && diverge && s == 1 && pos <= 8 && 8 < pos+n {
					binary.LittleEndian.PutUint32(lg.Data[((8-pos)*V+3)*4:], 0x7fc00000)
				}
				if sampler && diverge && s == 1 && pos <= 9 && 9 < pos+n {
					x := lg.Data[((9-pos)*V+5)*4:]
					binary.LittleEndian.PutUint32(x, binary.LittleEndian.Uint32(x)+2<<16)
				}
				ts = append(ts, tensor("layers.0.attn.q_proj", 3, "out", s, pos, n, H, q))
				ts = append(ts, tensor("layers.0.attn_residual", 4, "out", s, pos, n, H, res))
				w := int64(H)
				if sampler {
					w = H / 2
				}
				ts = append(ts, tensor("layers.0.mlp_norm", 5, "out", s, pos, n, w, activation(s, 6, pos, n, w)))
				if !sampler {
					ts = append(ts, tensor("final_norm", 6, "out", s, pos, n, H, activation(s, 7, pos, n, H)))
				}
				ts = append(ts, lg)
				if !(sampler && s == 1 && pos >= 8) {
					ts = append(ts, f32Tensor("logprobs", 8, s, pos, n, 1, 8, false))
				}
			}
		}
		return ts
	}
	dir := t.TempDir()
	a := writeCapture(t, dir+"/a.arrow", "trainer", 1, side(false))
	b := writeCapture(t, dir+"/b.arrow", "sampler", 1, side(true))
	producers := func(op string) []string {
		return map[string][]string{"layers.0.attn_residual": {"embed", "layers.0.attn.q_proj"}}[op]
	}
	rep, err := Diff(context.Background(), a, b, append([]Option{WithProducers(producers), WithMapSize(8, 16)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	rep.A.Path, rep.B.Path = "trainer.arrow", "sampler.arrow"
	return rep
}

// styleSheet matches an HTML report's stylesheet: constant code, not data, so the goldens leave it out.
var styleSheet = regexp.MustCompile(`(?s)<style>.*?</style>`)

func goldenReport(t *testing.T, name string, got []byte) {
	t.Helper()
	if strings.HasSuffix(name, ".html") {
		if !styleSheet.Match(got) {
			t.Errorf("%s has no stylesheet", name)
		}
		got = styleSheet.ReplaceAll(got, []byte("<style>/* session/html.go's stylesheet */</style>"))
	}
	golden.Check(t, filepath.Join("..", "testdata", "session", name), got, "go test ./session -update")
}

func TestReportGolden(t *testing.T) {
	writers := []struct {
		ext   string
		write func(*bytes.Buffer, *Report) error
	}{
		{"txt", func(b *bytes.Buffer, r *Report) error { return WriteText(b, r) }},
		{"json", func(b *bytes.Buffer, r *Report) error { return WriteJSON(b, r) }},
		{"md", func(b *bytes.Buffer, r *Report) error { return WriteMarkdown(b, r) }},
		{"html", func(b *bytes.Buffer, r *Report) error { return WriteHTML(b, r) }},
	}
	for _, sc := range []struct {
		name    string
		diverge bool
		opts    []Option
	}{{"divergent", true, nil}, {"identical", false, nil},
		// the same divergent pair, gated: some ops (not the logits' NaN), missing tensors ignored, within tolerance
		{"gated", true, []Option{WithOps("layers.0.attn*", "final_norm"), WithIgnoreMissing(),
			WithTolerance(Tolerance{MaxULP: 64, HasULP: true, MaxRel: 0.6, HasRel: true})}}} {
		rep := scenario(t, sc.diverge, sc.opts...)
		for _, w := range writers {
			var b1, b2 bytes.Buffer
			if err := w.write(&b1, rep); err != nil {
				t.Fatal(err)
			}
			// deterministic: a second diff and write give the same bytes
			if err := w.write(&b2, scenario(t, sc.diverge, sc.opts...)); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b1.Bytes(), b2.Bytes()) {
				t.Errorf("%s.%s: two runs differ", sc.name, w.ext)
			}
			if w.ext == "html" && sc.name != "divergent" {
				// one HTML golden (the others would repeat its capture table): the rest must carry their verdict
				if h := b1.String(); !strings.Contains(h, template.HTMLEscapeString(rep.Verdict())) || !strings.HasSuffix(h, "</html>\n") {
					t.Errorf("%s.html lacks its verdict %q or is not whole:\n%s", sc.name, rep.Verdict(), h)
				}
				continue
			}
			goldenReport(t, "report-"+sc.name+"."+w.ext, b1.Bytes())
		}
	}
}

func TestReportScenario(t *testing.T) {
	rep := scenario(t, true)
	want := map[string]struct {
		status Status
		cause  Cause
	}{
		"tokens": {StatusIdentical, ""}, "embed": {StatusIdentical, ""}, "layers.0.attn_norm": {StatusIdentical, ""},
		"layers.0.attn.q_proj": {StatusDivergent, CauseLocal}, "layers.0.attn_residual": {StatusDivergent, CausePropagated},
		"layers.0.mlp_norm": {StatusShapeMismatch, ""}, "final_norm": {StatusMissingB, ""}, "logits": {StatusDivergent, CauseUnknown},
		"logprobs": {StatusIncomplete, ""},
	}
	for _, o := range rep.Ops {
		if o.Role != "out" {
			continue
		}
		if w := want[o.Op]; o.Status != w.status || o.Cause != w.cause {
			t.Errorf("%s: %s %q, want %s %q", o.Op, o.Status, o.Cause, w.status, w.cause)
		}
	}
	f := rep.First
	if f == nil || f.Op != "layers.0.attn.q_proj" || f.At.Seq != 1 || f.At.Pos != 6 || f.At.Col != 5 || f.ULP != 8 || f.Cause != CauseLocal {
		t.Fatalf("first divergence %+v", f)
	}
	lg := rep.Ops[rep.FindOp("logits", "out")]
	if lg.NaNNumber != 1 || lg.NaNB != 1 || lg.NaNA != 0 || lg.MaxULP != 2 || lg.ULPDType != "bf16" || lg.Mismatched != 2 {
		t.Fatalf("logits: %+v", lg)
	}
	if lp := rep.Ops[rep.FindOp("logprobs", "out")]; lp.ULPDType != "f32" {
		t.Errorf("logprobs (f32 with low bits set): ULPs in %q, want f32", lp.ULPDType)
	}
	// the JSON schema's required fields
	var b bytes.Buffer
	if err := WriteJSON(&b, rep); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	fd := doc["first_divergence"].(map[string]any)
	for _, k := range []string{"op", "index", "step", "seq", "pos", "element", "a", "b", "ulp"} {
		if _, ok := fd[k]; !ok {
			t.Errorf("first_divergence lacks %q", k)
		}
	}
	if fd["a"].(map[string]any)["hex"] == nil || doc["identical"] != false || doc["version"] != float64(SchemaVersion) {
		t.Errorf("json: %v", doc)
	}
	for _, op := range doc["ops"].([]any) {
		for _, k := range []string{"op", "index", "role", "elements", "mismatched", "max_ulp", "status"} {
			if _, ok := op.(map[string]any)[k]; !ok {
				t.Errorf("op lacks %q", k)
			}
		}
	}
	b.Reset()
	if err := WriteJSON(&b, scenarioIdentical(t)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"first_divergence": null`) {
		t.Errorf("identical report: first_divergence not null")
	}
	b.Reset()
	if err := WriteHTML(&b, rep); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(b.String(), `src="data:image/png;base64,`); n != 3 {
		t.Errorf("HTML has %d inline heatmaps, want 3 (one per divergent op)", n)
	}
}

func scenarioIdentical(t *testing.T) *Report {
	dir := t.TempDir()
	ts := prefill(testOps, 1, 4, 8)
	a := writeCapture(t, dir+"/a.arrow", "trainer", 1, ts)
	b := writeCapture(t, dir+"/b.arrow", "sampler", 1, ts)
	rep, err := Diff(context.Background(), a, b)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}
