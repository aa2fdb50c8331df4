package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"bitalign/capture"
)

// TestCLIDiffGate: --ops, --ignore-missing, --max-ulp and --max-rel reach the diff and decide the exit status.
func TestCLIDiffGate(t *testing.T) {
	dir := t.TempDir()
	faulted := filepath.Join(dir, "fusion")
	if code, _, errs := run(t, "demo", "--out", faulted, "--fault", "fusion", "--layer", "2"); code != 0 {
		t.Fatalf("demo --fault: exit %d: %s", code, errs)
	}
	a, b := filepath.Join(faulted, "trainer"), filepath.Join(faulted, "sampler")
	for _, tc := range []struct {
		name string
		args []string
		code int
		out  string // in stdout, or in stderr when code is 2
	}{
		{"ops before the fault", []string{"--ops", "layers.1*"}, 0, "ops matching layers.1*"},
		{"ops matching nothing", []string{"--ops", "embed", "--ops", "layers.9*"}, 2, `"layers.9*" matches no op`},
		{"bad pattern", []string{"--ops", "layers.[1"}, 2, "layers.[1"},
		{"bad max-rel", []string{"--max-rel", "-1"}, 2, "--max-rel -1"},
		{"NaN max-rel", []string{"--max-rel", "NaN"}, 2, "--max-rel NaN"},
		{"within max-ulp", []string{"--ops", "layers.2.mlp_norm", "--max-ulp", "2"}, 0, "max ULP ≤ 2: held"},
		{"outside max-ulp", []string{"--ops", "layers.2.mlp_norm", "--max-ulp", "1"}, 1, "max ULP ≤ 1: failed"},
		{"within max-rel", []string{"--ops", "layers.2.mlp_norm,layers.1.mlp_norm", "--max-rel", "0.05"}, 0, "|a−b|/RMS ≤ 0.05: held"},
		{"outside max-rel", []string{"--ops", "layers.2.mlp*", "--max-rel", "0.05"}, 1, "|a−b|/RMS ≤ 0.05: failed"},
		{"sampled token differs", []string{"--max-ulp", "1000000000000"}, 1, "problem: sample [out]: 1 value differs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := run(t, append([]string{"diff", a, b}, tc.args...)...)
			where := out
			if tc.code == 2 {
				where = errs
			}
			if code != tc.code || !strings.Contains(where, tc.out) {
				t.Fatalf("exit %d, want %d with %q in:\n%s%s", code, tc.code, tc.out, out, errs)
			}
		})
	}
	// comma-separated patterns: both ops compared
	code, out, errs := run(t, "diff", a, b, "--ops", "layers.2.mlp_norm,layers.1.mlp_norm", "--format", "json")
	var r struct {
		OpsFilter []string `json:"ops_filter"`
		Ops       []struct {
			Op string `json:"op"`
		} `json:"ops"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 1 || len(r.Ops) != 2 || len(r.OpsFilter) != 2 {
		t.Fatalf("exit %d, %v: %+v %s", code, err, r, errs)
	}

	// nothing in common: the report says so and the exit status is 2
	x, y := filepath.Join(dir, "x.arrow"), filepath.Join(dir, "y.arrow")
	for path, op := range map[string]string{x: "x", y: "y"} {
		ts := []capture.Tensor{{NTok: 1, Op: op, Role: "out", DType: capture.BF16, Shape: []int64{1, 2},
			Shard: capture.NoShard, Data: make([]byte, 4)}}
		if err := capture.WriteAll(path, capture.Meta{FormatVersion: 1, Side: "trainer", Producer: "test"}, ts); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errs = run(t, "diff", x, y, "--ignore-missing")
	if code != 2 || !strings.Contains(out, "nothing compared") || !strings.Contains(errs, "nothing compared") ||
		strings.Contains(out, "identical") {
		t.Fatalf("nothing compared: exit %d\n%s%s", code, out, errs)
	}
	// the header leaves out what the captures' metadata does not have
	if strings.Contains(out, "batch") || strings.Contains(out, "profile") {
		t.Errorf("header shows fields the captures lack:\n%s", out)
	}
}
