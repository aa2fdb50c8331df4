package cudakernels

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestManifest fails when a kernel source changed without its PTX being regenerated (`make ptx`), or when
// a PTX file was edited by hand.
func TestManifest(t *testing.T) {
	raw, err := os.ReadFile(ManifestName)
	if err != nil {
		t.Fatal(err)
	}
	want, err := parseManifest(raw)
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("*.cu*")
	if err != nil {
		t.Fatal(err)
	}
	ptx, _ := filepath.Glob("*.ptx")
	files = append(files, ptx...)
	if len(files) == 0 {
		t.Fatal("no kernel sources found")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		got := hex.EncodeToString(sum[:])
		switch w, ok := want[f]; {
		case !ok:
			t.Errorf("%s is not in %s: run `make ptx` where nvcc exists", f, ManifestName)
		case w != got:
			t.Errorf("%s changed since its PTX was generated (sha256 %s, manifest %s): run `make ptx`", f, got[:12], w[:12])
		}
		if src, ok := strings.CutSuffix(f, ".cu"); ok {
			if _, err := os.Stat(src + ".ptx"); err != nil {
				t.Errorf("%s has no %s.ptx: run `make ptx`", f, src)
			}
		}
	}
	for name := range want {
		if _, err := os.Stat(name); err != nil {
			t.Errorf("%s lists %s, which does not exist", ManifestName, name)
		}
	}
}

// TestEmbeddedPTX checks that the embedded modules are the files on disk and that each declares sm_90 code
// from the PTX ISA the driver floor (cuda.MinDriverVersion) accepts.
func TestEmbeddedPTX(t *testing.T) {
	mods := Modules()
	if len(mods) < 7 {
		t.Fatalf("only %d embedded modules: %v", len(mods), mods)
	}
	t.Setenv("BITALIGN_PTX_DIR", "")
	for _, m := range mods {
		b, err := PTX(m)
		if err != nil {
			t.Fatal(err)
		}
		disk, err := os.ReadFile(m + ".ptx")
		if err != nil || string(disk) != string(b) {
			t.Errorf("%s.ptx: embedded copy differs from the file (%v)", m, err)
		}
		s := string(b)
		if !strings.Contains(s, ".target sm_90") || !strings.Contains(s, ".version 9.0") {
			t.Errorf("%s.ptx is not PTX ISA 9.0 for sm_90", m)
		}
		if len(entryNames(b)) == 0 {
			t.Errorf("%s.ptx has no kernels", m)
		}
	}
}

func TestParseManifestRejectsGarbage(t *testing.T) {
	if _, err := parseManifest([]byte("abc matmul.cu\n")); err == nil {
		t.Error("a short hash was accepted")
	}
	m, err := parseManifest([]byte(strings.Repeat("a", 64) + "  x.cu\n\n"))
	if err != nil || m["x.cu"] != strings.Repeat("a", 64) {
		t.Errorf("parse: %v %v", m, err)
	}
}

// TestDecConfigMatchesSource: the Go table of the decode kernels' (span, stages), which sizes their shared
// memory, is the one matmul.cu instantiates; every configuration fits the H200's 227 KB per block.
func TestDecConfigMatchesSource(t *testing.T) {
	src, err := os.ReadFile("matmul.cu")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^DEC\((\d+), (\d+), (\d+)\)$`)
	found := map[int][2]int{}
	for _, m := range re.FindAllStringSubmatch(string(src), -1) {
		mt, _ := strconv.Atoi(m[1])
		ch, _ := strconv.Atoi(m[2])
		st, _ := strconv.Atoi(m[3])
		found[mt] = [2]int{ch, st}
	}
	if !reflect.DeepEqual(found, decConfig) {
		t.Errorf("matmul.cu instantiates %v, decConfig says %v", found, decConfig)
	}
	for mt := range decConfig {
		if b := decSharedBytes(mt); b > 232448-64 {
			t.Errorf("matmul_dec%d needs %d bytes of shared memory, over the 227 KB limit", mt, b)
		}
	}
}

func TestBounds(t *testing.T) {
	if got := SegBounds(13, 8); got[1] != 1 || got[8] != 13 || got[4] != 6 {
		t.Errorf("SegBounds(13, 8) = %v", got)
	}
	if got := ChunkBounds(5, 4); len(got) != 4 || got[1] != 2 || got[3] != 5 {
		t.Errorf("ChunkBounds(5, 4) = %v", got)
	}
	if b := segs([]int{0, 3, 7}); b[0] != 2 || b[8] != 3 || b[12] != 7 || len(b) != 40 {
		t.Errorf("segs packing: %v", b)
	}
}
