package session

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"bitalign/engine"
	"bitalign/logprobs"
)

// testdata/logprobs (capture/python/tests/make_logprob_fixtures.py): a trainer table written by pyarrow (one
// row per token, shuffled, its own column names), the sampler's by bitalign_capture.write_logprobs (one row
// per sequence, Parquet and JSONL), and expected.json, the NumPy reference of their metrics
// (capture/python/tests/rl_reference.py). Both compute in float64 from the same float32 values; they sum in
// different orders, so figures agree to float64 rounding: relative 1e-12 (absolute 1e-15 near zero).
const rlTol = 1e-12

var fixtureRL = RLOptions{Columns: logprobs.Columns{Seq: "sample_id,seq", Pos: "position", Logprob: "old_log_prob"}}

func loadFixture(t *testing.T, sampler string) *Loaded {
	t.Helper()
	dir := filepath.Join("..", "testdata", "logprobs")
	l, err := Load(context.Background(), Inputs{A: filepath.Join(dir, "trainer.parquet"), B: filepath.Join(dir, sampler),
		Device: "cpu", RL: fixtureRL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func near(got, want float64) bool {
	return got == want || math.Abs(got-want) <= rlTol*math.Max(math.Abs(got), math.Abs(want)) || math.Abs(got-want) <= 1e-15
}

type expected struct {
	Overall   map[string]*float64            `json:"overall"`
	Sequences map[string]map[string]*float64 `json:"sequences"`
}

// statsFields maps the reference's names to bitalign's figures (the JSON report's names).
func statsFields(s *logprobs.Stats) map[string]float64 {
	return map[string]float64{"tokens": float64(s.Tokens), "equal_tokens": float64(s.Equal), "max_abs_diff": s.MaxAbs,
		"mean_abs_diff": s.MeanAbs, "mean_diff": s.MeanDiff, "kl_k1": s.K1, "kl_k2": s.K2, "kl_k3": s.K3,
		"is_ratio_min": s.ISMin, "is_ratio_max": s.ISMax, "is_ratio_mean": s.ISMean, "is_outside_frac": s.ISOutsideFrac(),
		"chi2": s.Chi2, "token_mult_prob_error": s.MultProbErr, "rollout_train_prob_diff": s.ProbDiff, "ppl_a": s.PPLA,
		"ppl_b": s.PPLB, "log_ratio_sum": s.LogRatioSum}
}

func checkStats(t *testing.T, what string, got *logprobs.Stats, want map[string]*float64) {
	t.Helper()
	g := statsFields(got)
	for name, w := range want {
		gv, ok := g[name]
		if !ok || w == nil {
			continue
		}
		if !near(gv, *w) {
			t.Errorf("%s %s = %v, NumPy reference %v (relative %.2g)", what, name, gv, *w, math.Abs(gv-*w)/math.Abs(*w))
		}
	}
}

// TestLogprobFixtureMatchesNumPy: tables written by pyarrow and by write_logprobs, read by bitalign, give the
// NumPy reference's metrics overall and for every sequence, from Parquet and from JSONL alike.
func TestLogprobFixtureMatchesNumPy(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "testdata", "logprobs", "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var want expected
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	for _, sampler := range []string{"sampler.parquet", "sampler.jsonl"} {
		t.Run(sampler, func(t *testing.T) {
			l := loadFixture(t, sampler)
			rl := l.Report.RL
			if rl == nil || !l.Report.TablePair() {
				t.Fatal("no logprob section")
			}
			if rl.A.Layout != "per-token" || rl.B.Layout != "per-sequence" || rl.B.Side != map[bool]string{true: "sampler", false: "sampler.jsonl"}[rl.B.Format == "parquet"] ||
				rl.A.Side != "trainer.parquet" { // JSONL and this Parquet file name no side: their file names do
				t.Errorf("layouts %s, %s, sides %q %q", rl.A.Layout, rl.B.Layout, rl.A.Side, rl.B.Side)
			}
			checkStats(t, "overall", &rl.Overall, want.Overall)
			if len(rl.Seqs) != len(want.Sequences) {
				t.Fatalf("%d sequences, reference %d", len(rl.Seqs), len(want.Sequences))
			}
			for i := range rl.Seqs {
				q := &rl.Seqs[i]
				ws := want.Sequences[strconv.FormatInt(q.Seq, 10)]
				checkStats(t, "seq "+strconv.FormatInt(q.Seq, 10), &q.Stats, ws)
				wf := ws["first_diff_pos"]
				if (wf == nil) != (q.FirstDiff < 0) || wf != nil && int64(*wf) != q.FirstDiff {
					t.Errorf("seq %d: first diff %d, reference %v", q.Seq, q.FirstDiff, wf)
				}
				if i > 0 && logprobs.Worse(&rl.Seqs[i-1], q) > 0 {
					t.Errorf("sequences not worst first at %d", i)
				}
			}
			// the planted faults: seq 52 has a token id that differs (first), seq 38 the outlier (max |Δ| 1.2)
			if rl.Seqs[0].Seq != 52 || rl.Seqs[0].TokenDiffers != 1 || rl.Seqs[1].Seq != 38 || rl.Overall.ISOutside != 1 {
				t.Errorf("worst: %d (token ids differ %d), %d; outside IS %d", rl.Seqs[0].Seq, rl.Seqs[0].TokenDiffers, rl.Seqs[1].Seq, rl.Overall.ISOutside)
			}
			if q := &rl.Seqs[rl.Find(80)]; q.OnlyA != 5 || q.OnlyB != 0 {
				t.Errorf("seq 80: only in A %d, only in B %d; want 5, 0", q.OnlyA, q.OnlyB)
			}
			if l.Report.Passed() || l.Report.Compared != rl.Overall.Tokens {
				t.Errorf("passed %v, compared %d", l.Report.Passed(), l.Report.Compared)
			}
		})
	}
}

// TestLogprobJSONReport: the version 3 keys, sequences worst first with the fields the schema names.
func TestLogprobJSONReport(t *testing.T) {
	l := loadFixture(t, "sampler.parquet")
	var b bytes.Buffer
	if err := WriteJSON(&b, l.Report); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Version   int                      `json:"version"`
		Logprobs  map[string]any           `json:"logprobs"`
		Sequences []map[string]json.Number `json:"sequences"`
	}
	dec := json.NewDecoder(bytes.NewReader(b.Bytes()))
	dec.UseNumber()
	var generic map[string]any
	if err := json.Unmarshal(b.Bytes(), &generic); err != nil {
		t.Fatal(err)
	}
	seqs := generic["sequences"].([]any)
	if generic["version"] != float64(SchemaVersion) || generic["logprobs"] == nil || len(seqs) != 12 {
		t.Fatalf("version %v, logprobs %v, %d sequences", generic["version"], generic["logprobs"] != nil, len(seqs))
	}
	_ = doc
	for _, k := range []string{"seq", "tokens", "equal_tokens", "max_abs_diff", "mean_abs_diff", "kl_k3", "is_ratio_max", "first_diff_pos"} {
		if _, ok := seqs[0].(map[string]any)[k]; !ok {
			t.Errorf("sequences[0] has no %q", k)
		}
	}
	if s0 := seqs[0].(map[string]any); s0["seq"] != float64(52) || s0["first_diff_pos"] != float64(101) {
		t.Errorf("sequences[0] = seq %v first diff %v", s0["seq"], s0["first_diff_pos"])
	}
	lp := generic["logprobs"].(map[string]any)
	if lp["tokens"] != float64(l.Report.RL.Overall.Tokens) || lp["sequences_differ"] != float64(10) {
		t.Errorf("logprobs: tokens %v, sequences_differ %v", lp["tokens"], lp["sequences_differ"])
	}
}

// TestLogprobReports: the text report lists the worst sequences and the line that records them; Markdown and
// HTML (with its two pictures) carry the same section.
func TestLogprobReports(t *testing.T) {
	l := loadFixture(t, "sampler.parquet")
	l.Report.RL.Shown = 3
	var text, md, html bytes.Buffer
	for f, b := range map[string]*bytes.Buffer{"text": &text, "md": &md, "html": &html} {
		if err := WriteReport(b, l.Report, f); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"Worst sequences (3 of 12)", "np.isin(ids, [52, 38, 17])", "token_mult_prob_error", "k3 0.00236"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, text.String())
		}
	}
	if !strings.Contains(md.String(), "| 38 | 40 |") {
		t.Errorf("Markdown report lacks seq 38's row:\n%s", md.String())
	}
	if n := strings.Count(html.String(), "data:image/png;base64,"); n < 2 {
		t.Errorf("HTML report has %d pictures, want the Δ distribution and the worst sequences' strips", n)
	}
}

// TestLogprobDemoFaults: on the engine's demo, the sequences a fault touches come out first. rng-slot keys the
// sampler's noise by batch slot: its log-probabilities agree bit for bit, but the sequences whose draws
// differ (the capture diff's `sample` mismatches) lead, each with `sample` as its first divergent op. fusion
// changes layer 2 of every sequence: all differ, each first at layers.2.mlp_norm.
func TestLogprobDemoFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the engine's demo")
	}
	for _, tt := range []struct {
		fault string
		first string
	}{{"rng-slot", "sample"}, {"fusion", "layers.2.mlp_norm"}} {
		t.Run(tt.fault, func(t *testing.T) {
			dir := t.TempDir()
			if err := engine.Demo(dir, engine.DemoOptions{Fault: tt.fault, Layer: 2}); err != nil {
				t.Fatal(err)
			}
			l, err := Load(context.Background(), Inputs{A: filepath.Join(dir, "trainer"), B: filepath.Join(dir, "sampler"),
				Device: "cpu", RL: RLOptions{Sequences: 100}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			rl := l.Report.RL
			if rl == nil || !rl.Captures {
				t.Fatal("no logprob section")
			}
			// ground truth: the sequences whose tensors of the fault's first op differ
			op := tt.first
			var touched []int64
			for _, q := range l.Seqs(op, "out") {
				p, err := l.Pair(op, "out", q.Step, q.Seq)
				if err != nil {
					t.Fatal(err)
				}
				if p.Mismatched > 0 {
					touched = append(touched, q.Seq)
				}
			}
			if len(touched) == 0 {
				t.Fatalf("%s touches no sequence", op)
			}
			var lead []int64
			for _, q := range rl.Seqs[:len(touched)] {
				lead = append(lead, q.Seq)
				if d := rl.First[q.Seq]; d == nil || d.Op != op {
					t.Errorf("seq %d: first divergent op %+v, want %s", q.Seq, d, op)
				}
			}
			slices.Sort(lead)
			if !slices.Equal(lead, touched) {
				t.Errorf("first %d sequences %v, the fault touches %v", len(touched), lead, touched)
			}
			for _, q := range rl.Seqs[len(touched):] {
				if q.Differs() {
					t.Errorf("seq %d differs but the fault's op agrees there", q.Seq)
				}
			}
			if tt.fault == "rng-slot" && (rl.Overall.Equal != rl.Overall.Tokens || rl.Overall.SampleDiffers == 0) {
				t.Errorf("rng-slot: %d of %d logprobs equal, %d draws differ", rl.Overall.Equal, rl.Overall.Tokens, rl.Overall.SampleDiffers)
			}
			if tt.fault == "fusion" && (rl.Overall.Equal == rl.Overall.Tokens || rl.Overall.Dist == 0) {
				t.Errorf("fusion: %d of %d logprobs equal, %d with logits", rl.Overall.Equal, rl.Overall.Tokens, rl.Overall.Dist)
			}
		})
	}
}

// TestLogprobTableVsCapture: a capture pairs with a table of its own logprobs (written here as JSONL in the
// table convention: position p+1 scores the token at p+1): bitwise equal, both numberings.
func TestLogprobTableVsCapture(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the engine's demo")
	}
	dir := t.TempDir()
	if err := engine.Demo(dir, engine.DemoOptions{}); err != nil {
		t.Fatal(err)
	}
	c, err := openCapture(filepath.Join(dir, "sampler"))
	if err != nil {
		t.Fatal(err)
	}
	tab, _, _, err := TableOf(c)
	c.Close()
	if err != nil || tab == nil {
		t.Fatal(err)
	}
	for _, gen := range []bool{false, true} {
		var b strings.Builder
		for _, q := range tab.Seqs {
			for i := range q.Len() {
				pos := q.PosAt(i)
				if gen {
					if pos -= q.Prompt; pos < 0 {
						continue // a prompt token: response-only tables do not hold them
					}
				}
				row, _ := json.Marshal(map[string]any{"seq": q.ID, "pos": pos, "token": q.TokenAt(i), "logprob": q.Logprob[i]})
				b.Write(append(row, '\n'))
			}
		}
		path := filepath.Join(dir, "table.jsonl")
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		in := Inputs{A: filepath.Join(dir, "trainer"), B: path, Device: "cpu"}
		if gen {
			in.RL.Positions, in.RL.PositionsSet = logprobs.Generated, true
		}
		l, err := Load(context.Background(), in, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !l.Report.Identical || l.Report.RL.Overall.Tokens == 0 {
			t.Errorf("generated %v: %s", gen, l.Report.Verdict())
		}
		l.Close()
	}
}

// TestLogprobInputErrors: bad tables are errors naming the file, never a panic.
func TestLogprobInputErrors(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join("..", "testdata", "logprobs", "sampler.parquet")
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name, path, want string
	}{
		{"pickle", write("old.pt", []byte("\x80\x04\x95...")), "never unpickles"},
		{"torch zip", write("x.bin", []byte("PK\x03\x04rest")), "never unpickles"},
		{"truncated parquet", write("t.parquet", data[:len(data)/2]), "t.parquet"},
		{"parquet body garbage", write("g.parquet", append(append([]byte("PAR1"), bytes.Repeat([]byte{0xAB}, 200)...), data[len(data)-8:]...)), "g.parquet"},
		{"no columns", write("c.jsonl", []byte(`{"a": 1}`+"\n")), `no "seq"`},
		{"duplicate position", write("d.jsonl", []byte(`{"seq":1,"pos":2,"logprob":-1}`+"\n"+`{"seq":1,"pos":2,"logprob":-2}`+"\n")), "position 2 given twice"},
		{"bad json", write("b.jsonl", []byte(`{"seq":1,"pos":`+"\n")), "line 1"},
		{"negative seq", write("n.jsonl", []byte(`{"seq":-1,"pos":2,"logprob":-1}`+"\n")), "ids must be ≥ 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(context.Background(), Inputs{A: tt.path, B: good, Device: "cpu"}, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), filepath.Base(tt.path)) {
				t.Errorf("error %v, want one naming %s and saying %q", err, tt.path, tt.want)
			}
		})
	}
}
