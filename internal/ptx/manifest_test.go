package ptx

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const flags = "-ptx -arch=sm_90 -fmad=false"

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// tree writes files and a manifest listing manifest (name → content it was generated from).
func tree(t *testing.T, files map[string]string, manifest map[string]string, mflags string) string {
	t.Helper()
	dir := t.TempDir()
	for n, c := range files {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m := "# nvcc: Build test\n# flags: " + mflags + "\n"
	for n, c := range manifest {
		m += fmt.Sprintf("%s  %s\n", sha(c), n)
	}
	if err := os.WriteFile(filepath.Join(dir, ManifestName), []byte(m), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func samePTX(cu string) []string { return []string{strings.TrimSuffix(cu, ".cu") + ".ptx"} }

func TestCheck(t *testing.T) {
	good := map[string]string{"a.cu": "src a", "a.ptx": "ptx a", "c.cuh": "header"}
	cases := []struct {
		name     string
		files    map[string]string
		manifest map[string]string
		flags    string
		want     []string // one substring per expected error, in order
	}{
		{"clean", good, good, flags, nil},
		{"source edited", map[string]string{"a.cu": "src a v2", "a.ptx": "ptx a", "c.cuh": "header"}, good, flags,
			[]string{"a.cu changed since its PTX was generated"}},
		{"header edited", map[string]string{"a.cu": "src a", "a.ptx": "ptx a", "c.cuh": "header v2"}, good, flags,
			[]string{"c.cuh changed since its PTX was generated"}},
		{"ptx edited", map[string]string{"a.cu": "src a", "a.ptx": "hand-made", "c.cuh": "header"}, good, flags,
			[]string{"a.ptx differs from the PTX make ptx wrote"}},
		{"new source", map[string]string{"a.cu": "src a", "a.ptx": "ptx a", "c.cuh": "header", "b.cu": "src b"}, good, flags,
			[]string{"b.cu is not in", "b.cu has no b.ptx"}},
		{"stale ptx", map[string]string{"a.cu": "src a", "a.ptx": "ptx a", "c.cuh": "header", "old.ptx": "x"},
			map[string]string{"a.cu": "src a", "a.ptx": "ptx a", "c.cuh": "header", "old.ptx": "x"}, flags,
			[]string{"old.ptx comes from no .cu"}},
		{"listed file gone", map[string]string{"a.cu": "src a", "a.ptx": "ptx a"}, good, flags,
			[]string{"lists c.cuh, which does not exist"}},
		{"other flags", good, good, flags + " -O3", []string{`the PTX was built with "` + flags + ` -O3"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mflags := flags
			if c.flags != flags {
				mflags = c.flags
			}
			dir := tree(t, c.files, c.manifest, mflags)
			errs := Check(dir, samePTX, flags)
			if len(errs) != len(c.want) {
				t.Fatalf("got %d errors %v, want %d %v", len(errs), errs, len(c.want), c.want)
			}
			for i, err := range errs {
				if !strings.Contains(err.Error(), c.want[i]) || !strings.HasSuffix(err.Error(), "run make ptx on a machine with nvcc (docs/gpu.md)") {
					t.Errorf("error %d: %v, want %q and the fix", i, err, c.want[i])
				}
			}
		})
	}
}

func TestParseRejectsGarbage(t *testing.T) {
	for _, m := range []string{
		"# flags: x\nabc a.cu\n",
		"# flags: x\n" + strings.Repeat("A", 64) + "  a.cu\n", // upper-case hex is not sha256sum's
		"# flags: x\n" + strings.Repeat("a", 64) + "  a.cu\n" + strings.Repeat("b", 64) + "  a.cu\n",
		strings.Repeat("a", 64) + "  a.cu\n", // no flags line
	} {
		if _, err := Parse("M", []byte(m)); err == nil {
			t.Errorf("accepted %q", m)
		}
	}
	m, err := Parse("M", []byte("# nvcc: Build x\n# flags:  -a   -b \n"+strings.Repeat("a", 64)+"  *x.cu\n\n"))
	if err != nil || m.Files["x.cu"] != strings.Repeat("a", 64) || m.Flags != "-a -b" || m.NVCC != "Build x" {
		t.Errorf("parse: %+v %v", m, err)
	}
}

func TestMakefileFlags(t *testing.T) {
	got, err := MakefileFlags("../../Makefile")
	if err != nil || !strings.Contains(got, "-fmad=false") || !strings.Contains(got, "-arch=sm_90") {
		t.Fatalf("the repository's NVCCFLAGS: %q %v", got, err)
	}
	p := filepath.Join(t.TempDir(), "Makefile")
	os.WriteFile(p, []byte("NVCCFLAGS := -a\nNVCCFLAGS := -b\n"), 0o644)
	if _, err := MakefileFlags(p); err == nil {
		t.Error("two NVCCFLAGS lines accepted")
	}
}

func TestLoad(t *testing.T) {
	emb := func(name string) ([]byte, error) { return []byte("embedded " + name), nil }
	t.Setenv(DirEnv, "")
	if b, err := Load("kernels/cuda", "a.ptx", emb); err != nil || string(b) != "embedded a.ptx" {
		t.Fatalf("unset: %q %v", b, err)
	}
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "nvls", "cuda"), 0o755)
	os.WriteFile(filepath.Join(dir, "nvls", "cuda", "a.ptx"), []byte("fresh"), 0o644)
	t.Setenv(DirEnv, dir)
	if b, err := Load("nvls/cuda", "a.ptx", emb); err != nil || string(b) != "fresh" {
		t.Fatalf("set: %q %v", b, err)
	}
	if _, err := Load("kernels/cuda", "a.ptx", emb); err == nil || !strings.Contains(err.Error(), DirEnv) {
		t.Fatalf("missing file: %v", err)
	}
}
