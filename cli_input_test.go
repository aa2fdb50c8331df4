package main

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"bitalign/engine"
)

// badCaptures writes one of each kind of bad capture into dir and returns them by name.
func badCaptures(t *testing.T, dir, demo string) map[string]string {
	t.Helper()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rank0, err := os.ReadFile(filepath.Join(demo, "trainer", "rank0.arrow"))
	if err != nil {
		t.Fatal(err)
	}
	random := make([]byte, 4096)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range random {
		random[i] = byte(r.Uint32())
	}
	hdr := []byte(`{"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]`) // unterminated JSON
	st := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	junk := filepath.Join(dir, "junk")
	if err := os.MkdirAll(junk, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(junk, "notes.txt"), []byte("not a capture\n"), 0o644)
	return map[string]string{
		"empty":       write("empty.arrow", nil),
		"truncated":   write("truncated.arrow", rank0[:len(rank0)/2]),
		"random":      write("random.arrow", random),
		"junk dir":    junk,
		"safetensors": write("corrupt.safetensors", append(st, hdr...)),
	}
}

// TestCLIBadCaptures: every bad capture is exit 2 with a message naming the file, the same in diff and in
// open, and open never starts the TUI.
func TestCLIBadCaptures(t *testing.T) {
	demo := fusionDemo(t)
	good := filepath.Join(demo, "sampler")
	for name, bad := range badCaptures(t, t.TempDir(), demo) {
		for _, cmd := range []string{"diff", "open"} {
			t.Run(cmd+" "+name, func(t *testing.T) {
				before := tuiStarts
				code, _, errs := run(t, cmd, bad, good)
				if code != 2 || !strings.Contains(errs, filepath.Base(bad)) {
					t.Errorf("exit %d, stderr %q; want 2 naming %s", code, errs, filepath.Base(bad))
				}
				if tuiStarts != before {
					t.Error("the TUI started on bad input")
				}
			})
		}
	}
}

func TestCLIBadInputs(t *testing.T) {
	demo := fusionDemo(t)
	trainer, sampler, ckpt := filepath.Join(demo, "trainer"), filepath.Join(demo, "sampler"), filepath.Join(demo, "checkpoint")
	otherCap, otherCkpt := otherModel(t)
	noCkpt := t.TempDir()
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := mkfifo(fifo); err != nil {
		t.Logf("no FIFO on this system: %v", err)
		fifo = ""
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	procSub := fmt.Sprintf("/dev/fd/%d", pr.Fd()) // what <(...) passes
	if _, err := os.Stat(procSub); err != nil {
		procSub = ""
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"open without a checkpoint", []string{"open", trainer, sampler, "--checkpoint", noCkpt}, []string{noCkpt, "config.json"}},
		{"demo layer out of range", []string{"--fault", "fusion", "--layer", "9"}, []string{"layer 9", "0..3"}},
		{"demo unknown fault", []string{"--fault", "cosmic-ray"}, []string{"cosmic-ray"}},
		{"one rank's file, diff", []string{"diff", filepath.Join(trainer, "rank0.arrow"), sampler}, []string{"rank0.arrow", "ranks [1] are missing"}},
		{"one rank's file, open", []string{"open", filepath.Join(trainer, "rank0.arrow"), sampler}, []string{"rank0.arrow", "ranks [1] are missing"}},
		{"different models, diff", []string{"diff", otherCap, sampler}, []string{"different models", "qwen3", "llama", "--force"}},
		{"different models, open", []string{"open", otherCap, sampler}, []string{"different models", "--force"}},
		{"checkpoint of another model, open", []string{"open", trainer, sampler, "--checkpoint", otherCkpt}, []string{otherCkpt, "qwen3"}},
		{"checkpoint of another model, replay", []string{"replay", "--checkpoint", otherCkpt, "--capture", sampler}, []string{otherCkpt, "qwen3", "llama"}},
		{"replay --save onto an existing directory", []string{"replay", "--checkpoint", ckpt, "--capture", sampler, "--save", demo}, []string{demo, "exists"}},
		{"diff -o with an unknown extension", []string{"diff", trainer, sampler, "-o", filepath.Join(t.TempDir(), "r.xml")}, []string{"r.xml", "extension"}},
		{"a FIFO", []string{"diff", fifo, sampler}, []string{"fifo", "not a regular file"}},
		{"process substitution", []string{"open", procSub, sampler}, []string{"not a regular file", "pipe"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if strings.Contains(tc.name, "FIFO") && fifo == "" || tc.name == "process substitution" && procSub == "" {
				t.Skip("not available on this system")
			}
			before := tuiStarts
			code, _, errs := run(t, tc.args...)
			if code != 2 {
				t.Errorf("exit %d, want 2: %s", code, errs)
			}
			for _, w := range tc.want {
				if !strings.Contains(errs, w) {
					t.Errorf("stderr %q lacks %q", errs, w)
				}
			}
			if strings.Contains(errs, "empty") {
				t.Errorf("stderr %q calls the input empty", errs)
			}
			if tuiStarts != before {
				t.Error("the TUI started on bad input")
			}
		})
	}
	// --force compares what can be compared: a report, not a refusal; here no tensor lines up (the positions
	// differ too), so the report says nothing was compared and the exit status is 2, as for any diff that
	// compares nothing
	code, out, errs := run(t, "diff", otherCap, sampler, "--force")
	if code != 2 || !strings.Contains(out, "bitalign diff: nothing compared") || !strings.Contains(errs, "nothing compared") {
		t.Errorf("diff --force of two models: exit %d, want 2 with a report saying nothing was compared: %s\n%s", code, errs, out)
	}
}

// TestCLIOpenDeviceCUDA: without a usable GPU, open --device cuda fails at start like replay --device cuda.
func TestCLIOpenDeviceCUDA(t *testing.T) {
	if _, _, err := engine.SelectBackend("cuda"); err == nil {
		t.Skip("a GPU is usable here: --device cuda is valid")
	}
	demo := fusionDemo(t)
	trainer, sampler := filepath.Join(demo, "trainer"), filepath.Join(demo, "sampler")
	for _, args := range [][]string{
		{"open", trainer, sampler, "--device", "cuda"},
		{"replay", "--checkpoint", filepath.Join(demo, "checkpoint"), "--capture", sampler, "--device", "cuda"},
	} {
		before := tuiStarts
		if code, _, errs := run(t, args...); code != 2 || !strings.Contains(errs, "cuda") {
			t.Errorf("%s: exit %d, %q; want 2 naming cuda", args[0], code, errs)
		}
		if tuiStarts != before {
			t.Error("the TUI started without its device")
		}
	}
}

// TestCLIOpenStartsTUI: good input reaches the TUI (the seam the bad-input tests rely on).
func TestCLIOpenStartsTUI(t *testing.T) {
	demo := fusionDemo(t)
	before := tuiStarts
	code, _, errs := run(t, "open", filepath.Join(demo, "trainer"), filepath.Join(demo, "sampler"), "--device", "cpu")
	if tuiStarts != before+1 || !strings.Contains(errs, errTUIStarted.Error()) || code != 2 {
		t.Fatalf("open of good captures: exit %d, %q, TUI starts %d", code, errs, tuiStarts-before)
	}
}

// TestCLIFingerprint: bitalign fingerprint writes a capture that diff compares with the full one (the same
// first divergence, located only, with the record line); an existing --out, a missing capture and a
// --full-ops pattern that matches nothing are exit 2 naming the problem.
func TestCLIFingerprint(t *testing.T) {
	demo := fusionDemo(t)
	out := filepath.Join(t.TempDir(), "sampler.fp.arrow")
	code, stdout, errs := run(t, "fingerprint", filepath.Join(demo, "sampler"), "--out", out)
	if code != 0 || !strings.Contains(stdout, "wrote "+out) {
		t.Fatalf("fingerprint: exit %d\n%s%s", code, stdout, errs)
	}
	code, stdout, errs = run(t, "diff", filepath.Join(demo, "trainer"), out)
	if code != 1 || !strings.Contains(stdout, "first divergence: layers.2.mlp_norm, step 1 seq 0 pos 0 (the whole row)") ||
		!strings.Contains(stdout, `full_ops=["layers.2.mlp_norm"`) {
		t.Errorf("diff against the fingerprints: exit %d\n%s%s", code, stdout, errs)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{filepath.Join(demo, "sampler"), "--out", out}, "file exists"},
		{[]string{filepath.Join(demo, "nope"), "--out", out + "2"}, "nope"},
		{[]string{filepath.Join(demo, "sampler"), "--out", out + "3", "--full-ops", "zzz*"}, `"zzz*" matches no op`},
		{[]string{filepath.Join(demo, "sampler")}, "--out FILE is required"},
	} {
		code, _, errs := run(t, append([]string{"fingerprint"}, tc.args...)...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("fingerprint %v: exit %d, stderr %q (want 2 and %q)", tc.args, code, errs, tc.want)
		}
	}
}

// TestCLIBadFingerprint: a fingerprint tensor whose role names no tensor role (bytes patched in a file
// bitalign wrote) is exit 2 in diff and in open, naming the file and the problem, and open starts no TUI.
func TestCLIBadFingerprint(t *testing.T) {
	demo := fusionDemo(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "good.fp.arrow")
	if code, _, errs := run(t, "fingerprint", filepath.Join(demo, "sampler"), "--out", good); code != 0 {
		t.Fatal(errs)
	}
	b, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(b), "fp.out")
	if i < 0 {
		t.Fatal("no fp.out role in the file")
	}
	copy(b[i:], "fp.fp.")
	bad := filepath.Join(dir, "bad.fp.arrow")
	if err := os.WriteFile(bad, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"diff", "open"} {
		before := tuiStarts
		code, _, errs := run(t, cmd, filepath.Join(demo, "trainer"), bad)
		if code != 2 || !strings.Contains(errs, "bad.fp.arrow") || !strings.Contains(errs, `fingerprint role "fp.fp." names no tensor role`) {
			t.Errorf("%s: exit %d, stderr %q", cmd, code, errs)
		}
		if tuiStarts != before {
			t.Errorf("%s started the TUI", cmd)
		}
	}
}
