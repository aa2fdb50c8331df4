package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fixture tables (testdata/logprobs): the trainer's by pyarrow with its own column names, the sampler's by
// bitalign_capture.write_logprobs.
var (
	fixTrainer = filepath.Join("testdata", "logprobs", "trainer.parquet")
	fixSampler = filepath.Join("testdata", "logprobs", "sampler.parquet")
	fixCols    = []string{"--seq-col", "sample_id,seq", "--pos-col", "position", "--logprob-col", "old_log_prob"}
)

// TestCLILogprobTables: diff of two tables is exit 1 with the worst sequences and the recording line;
// --sequences N lists N; a table against itself is exit 0; --max-ulp gates the log-probabilities.
func TestCLILogprobTables(t *testing.T) {
	code, out, errs := run(t, append([]string{"diff", fixTrainer, fixSampler, "--sequences", "2"}, fixCols...)...)
	if code != 1 || !strings.Contains(out, "Worst sequences (2 of 12)") || !strings.Contains(out, "np.isin(ids, [52, 38])") {
		t.Errorf("exit %d: %s\n%s", code, errs, out)
	}
	code, out, errs = run(t, "diff", fixSampler, filepath.Join("testdata", "logprobs", "sampler.jsonl"))
	if code != 0 || !strings.Contains(out, "logprobs bitwise equal (475 tokens in 12 sequences)") {
		t.Errorf("a table against its JSONL twin: exit %d: %s\n%s", code, errs, out)
	}
	// 1.2 nats is far outside any ULP bound; a token id differs and positions are missing: outside whatever
	code, out, _ = run(t, append([]string{"diff", fixTrainer, fixSampler, "--max-ulp", "1000000000", "--ignore-missing"}, fixCols...)...)
	if code != 1 || !strings.Contains(out, "outside tolerance") || !strings.Contains(out, "token id") {
		t.Errorf("--max-ulp with a differing token id: exit %d\n%s", code, out)
	}
	dir := t.TempDir()
	code, _, errs = run(t, append([]string{"diff", fixTrainer, fixSampler, "-o", filepath.Join(dir, "r.json")}, fixCols...)...)
	b, err := os.ReadFile(filepath.Join(dir, "r.json"))
	if code != 1 || err != nil || !strings.Contains(string(b), `"sequences": [`) || !strings.Contains(string(b), `"kl_k3"`) {
		t.Errorf("-o r.json: exit %d, %v: %s", code, err, errs)
	}
}

// TestCLILogprobBadInputs: bad tables and flags are exit 2 naming the file, in diff and open alike, and the
// TUI never starts.
func TestCLILogprobBadInputs(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pickle := write("rollout.pt", "\x80\x02}q\x00.")
	noCols := write("x.jsonl", `{"id": 1, "lp": [-1]}`+"\n")
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"pickle", []string{pickle, fixSampler}, []string{"rollout.pt", "never unpickles", "write_logprobs"}},
		{"no such column", []string{noCols, fixSampler}, []string{"x.jsonl", `no "seq"`, "--seq-col"}},
		{"wrong column flag", []string{fixTrainer, fixSampler}, []string{"trainer.parquet", `no column "seq"`, "sample_id"}},
		{"bad --positions", append([]string{fixTrainer, fixSampler, "--positions", "relative"}, fixCols...), []string{"--positions", "relative"}},
		{"bad IS bounds", append([]string{fixTrainer, fixSampler, "--is-low", "3"}, fixCols...), []string{"--is-low"}},
	} {
		for _, cmd := range []string{"diff", "open"} {
			t.Run(cmd+" "+tc.name, func(t *testing.T) {
				before := tuiStarts
				code, _, errs := run(t, append([]string{cmd}, tc.args...)...)
				if code != 2 {
					t.Errorf("exit %d, want 2: %s", code, errs)
				}
				for _, w := range tc.want {
					if !strings.Contains(errs, w) {
						t.Errorf("stderr %q lacks %q", errs, w)
					}
				}
				if tuiStarts != before {
					t.Error("the TUI started on bad input")
				}
			})
		}
	}
	code, _, errs := run(t, append([]string{"open", fixTrainer, fixSampler, "--checkpoint", dir}, fixCols...)...)
	if code != 2 || !strings.Contains(errs, "replay needs captures on both sides") {
		t.Errorf("open a table with --checkpoint: exit %d: %s", code, errs)
	}
}
