package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// run executes the CLI in-process and returns its exit status (as main would) and output.
func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	root := newRootCmd()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	var ee *exitError
	switch {
	case err == nil:
		code = 0
	case errors.As(err, &ee):
		code = ee.code
		if ee.err != nil {
			errb.WriteString(ee.err.Error())
		}
	default:
		code = 2
		errb.WriteString(err.Error())
	}
	return code, out.String(), errb.String()
}

func TestCLIDemoDiffExitCodes(t *testing.T) {
	dir := t.TempDir()
	clean, faulted := filepath.Join(dir, "clean"), filepath.Join(dir, "fusion")
	if code, _, errs := run(t, "demo", "--out", clean); code != 0 {
		t.Fatalf("demo: exit %d: %s", code, errs)
	}
	if code, _, errs := run(t, "demo", "--out", faulted, "--fault", "fusion", "--layer", "2"); code != 0 {
		t.Fatalf("demo --fault: exit %d: %s", code, errs)
	}
	code, out, _ := run(t, "diff", filepath.Join(clean, "trainer"), filepath.Join(clean, "sampler"))
	if code != 0 || !strings.Contains(out, "bitwise identical") {
		t.Fatalf("diff of the clean demo: exit %d\n%s", code, out)
	}
	report := filepath.Join(dir, "r.json")
	code, _, errs := run(t, "diff", filepath.Join(faulted, "trainer"), filepath.Join(faulted, "sampler"), "--format", "json", "-o", report)
	if code != 1 {
		t.Fatalf("diff of the faulted demo: exit %d, want 1: %s", code, errs)
	}
	var r struct {
		Identical bool `json:"identical"`
		First     *struct {
			Op string `json:"op"`
		} `json:"first_divergence"`
	}
	data, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	if r.Identical || r.First == nil || r.First.Op != "layers.2.mlp_norm" {
		t.Fatalf("report: identical %v, first %+v; want layers.2.mlp_norm", r.Identical, r.First)
	}
	// the report exists now: without --force it is not replaced
	if code, _, errs := run(t, "diff", filepath.Join(faulted, "trainer"), filepath.Join(faulted, "sampler"), "-o", report); code != 2 || !strings.Contains(errs, "exists") {
		t.Fatalf("diff -o onto an existing file: exit %d, %q; want 2 and 'exists'", code, errs)
	}
	if after, _ := os.ReadFile(report); !bytes.Equal(after, data) {
		t.Fatal("the existing report was changed")
	}
	// replay of the faulted sampler: the deterministic engine departs from it (exit 1), and from the trainer not
	if code, _, errs := run(t, "replay", "--checkpoint", filepath.Join(faulted, "checkpoint"), "--capture", filepath.Join(faulted, "trainer")); code != 0 {
		t.Fatalf("replay of the trainer: exit %d, want 0: %s", code, errs)
	}
	if code, out, errs := run(t, "replay", "--checkpoint", filepath.Join(faulted, "checkpoint"), "--capture", filepath.Join(faulted, "sampler")); code != 1 || !strings.Contains(out, "layers.2.mlp_norm") {
		t.Fatalf("replay of the faulted sampler: exit %d, want 1 naming layers.2.mlp_norm: %s\n%s", code, errs, out)
	}
	// replay --ops: only layer 2, the verdict saying so; a pattern matching no op is bad input
	if code, out, errs := run(t, "replay", "--checkpoint", filepath.Join(faulted, "checkpoint"), "--capture", filepath.Join(faulted, "sampler"),
		"--ops", "layers.2.*"); code != 1 || !strings.HasPrefix(out, "bitalign replay: first divergence: layers.2.mlp_norm") ||
		!strings.Contains(strings.SplitN(out, "\n", 2)[0], "(ops matching layers.2.*)") {
		t.Fatalf("replay --ops layers.2.*: exit %d, want 1 naming layers.2.mlp_norm and the pattern: %s\n%s", code, errs, out)
	}
	if code, _, errs := run(t, "replay", "--checkpoint", filepath.Join(faulted, "checkpoint"), "--capture", filepath.Join(faulted, "sampler"),
		"--ops", "layers.2.*,layers.9*"); code != 2 || !strings.Contains(errs, `"layers.9*" matches no op of `) {
		t.Fatalf("replay --ops matching nothing: exit %d, want 2: %s", code, errs)
	}
}

func TestCLIBadInput(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.arrow")
	os.WriteFile(junk, []byte("definitely not an arrow file"), 0o644)
	junkPQ, badPQ := filepath.Join(dir, "junk.parquet"), filepath.Join(dir, "bad.parquet")
	os.WriteFile(junkPQ, []byte("definitely not a parquet file"), 0o644)
	os.WriteFile(badPQ, []byte("PAR1 but nothing after it PAR1"), 0o644)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"missing file", []string{"diff", filepath.Join(dir, "nope"), junk}, "nope"},
		{"not a capture", []string{"diff", junk, junk}, "junk.arrow"},
		{"one argument", []string{"diff", junk}, "arg"},
		{"unknown format", []string{"diff", junk, junk, "--format", "xml"}, "xml"},
		{"unknown fault", []string{"demo", "--out", filepath.Join(dir, "d"), "--fault", "cosmic-ray"}, "cosmic-ray"},
		{"demo without --out", []string{"demo"}, "--out"},
		{"unknown device", []string{"demo", "--out", filepath.Join(dir, "d"), "--device", "tpu"}, "tpu"},
		{"replay without checkpoint", []string{"replay", "--capture", junk}, "--checkpoint"},
		{"open a missing capture", []string{"open", filepath.Join(dir, "a"), filepath.Join(dir, "b")}, "no such file"},
		{"unknown flag", []string{"diff", "--frobnicate"}, "frobnicate"},
		{"unknown demo model", []string{"demo", "--out", filepath.Join(dir, "d"), "--model", "mamba"}, "mamba"},
		{"MoE fault on the dense demo", []string{"demo", "--out", filepath.Join(dir, "d"), "--model", "dense", "--fault", "router-split-k"}, "--model moe"},
		{"routing weights without routing", []string{"replay", "--checkpoint", dir, "--capture", junk, "--routing-weights"}, "--routing-from"},
		{"routing replay as html", []string{"replay", "--checkpoint", dir, "--capture", junk, "--routing-from", junk, "--format", "html"}, "html"},
		{"junk .parquet to diff", []string{"diff", junkPQ, junk}, junkPQ + ": not a valid Parquet file"},
		{"junk .parquet to open", []string{"open", junk, junkPQ}, junkPQ + ": not a valid Parquet file"},
		{"truncated Parquet", []string{"diff", badPQ, junk}, badPQ + ": not a valid Parquet file"},
		{"routing from a missing capture", []string{"replay", "--checkpoint", dir, "--capture", junk, "--routing-from", filepath.Join(dir, "nope")}, "nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := run(t, tc.args...)
			if code != 2 || !strings.Contains(errs, tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, errs, tc.want)
			}
		})
	}
}

func TestCLIListFaults(t *testing.T) {
	code, out, _ := run(t, "demo", "--list-faults")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, f := range []string{"split-k", "ring-allreduce", "fusion", "fast-exp", "rng-slot", "stale-weights",
		"router-split-k", "first routing flip: layers.1.mlp.experts"} {
		if !strings.Contains(out, f) {
			t.Errorf("--list-faults lacks %s:\n%s", f, out)
		}
	}
}

// TestCLIItems: report formats from -o's extension, replay's heading and its temporary directory, --version,
// shell completion of flag values, demo --fault none.
func TestCLIItems(t *testing.T) {
	demo := fusionDemo(t)
	trainer, sampler := filepath.Join(demo, "trainer"), filepath.Join(demo, "sampler")
	dir := t.TempDir()
	for ext, want := range map[string]string{".html": "<html", ".md": "### ", ".json": `"schema"`, ".txt": "bitalign diff: "} {
		path := filepath.Join(dir, "report"+ext)
		if code, _, errs := run(t, "diff", trainer, sampler, "-o", path); code != 1 {
			t.Fatalf("diff -o %s: exit %d: %s", path, code, errs)
		}
		if b, _ := os.ReadFile(path); !strings.Contains(string(b), want) {
			t.Errorf("diff -o report%s is not that format: %.80q", ext, b)
		}
	}
	code, out, errs := run(t, "replay", "--checkpoint", filepath.Join(demo, "checkpoint"), "--capture", sampler)
	if code != 1 || !strings.HasPrefix(out, "bitalign replay: ") {
		t.Errorf("replay: exit %d, report %.60q", code, out)
	}
	if strings.Contains(out+errs, "bitalign-replay-") {
		t.Errorf("replay prints the temporary directory it removes:\n%s\n%s", errs, out)
	}
	saved := filepath.Join(dir, "replay")
	if code, out, errs := run(t, "replay", "--checkpoint", filepath.Join(demo, "checkpoint"), "--capture", trainer, "--save", saved, "-o", filepath.Join(dir, "replay.md")); code != 0 || out != "" || !strings.Contains(errs, saved) {
		t.Errorf("replay --save -o: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if _, err := os.Stat(filepath.Join(saved, "rank0.arrow")); err != nil {
		t.Errorf("replay --save kept no capture: %v", err)
	}
	if code, out, _ := run(t, "--version"); code != 0 || !strings.HasPrefix(out, "bitalign ") {
		t.Errorf("--version: exit %d, %q", code, out)
	}
	for _, c := range []struct{ args, want []string }{
		{[]string{"diff", "--format", ""}, []string{"json", "html"}},
		{[]string{"--fault", ""}, []string{"none", "fusion", "split-k"}},
		{[]string{"replay", "--device", ""}, []string{"auto", "cuda"}},
		{[]string{"demo", "--profile", ""}, []string{"canonical", "standard", "tc"}},
		{[]string{"open", "--profile", ""}, []string{"canonical", "standard", "tc"}},
	} {
		code, out, _ := run(t, append([]string{"__complete"}, c.args...)...)
		for _, w := range c.want {
			if code != 0 || !strings.Contains(out, w+"\n") {
				t.Errorf("completion of %v: exit %d, %q lacks %s", c.args, code, out, w)
			}
		}
	}
	if code, _, errs := run(t, "demo", "--out", filepath.Join(dir, "none"), "--fault", "none", "--device", "cpu"); code != 0 {
		t.Errorf("demo --fault none: exit %d: %s", code, errs)
	}
	if code, out, _ := run(t, "diff", filepath.Join(dir, "none", "trainer"), filepath.Join(dir, "none", "sampler")); code != 0 {
		t.Errorf("demo --fault none is not identical: exit %d\n%s", code, out)
	}
}
