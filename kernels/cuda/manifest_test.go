package cudakernels

import (
	"encoding/binary"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"bitalign/internal/ptx"
	"bitalign/internal/ptx/ptxtest"
	"bitalign/kernels"
)

// TestManifest fails when a kernel source changed without its PTX being regenerated (`make ptx`), a PTX file
// was edited by hand, or the Makefile's NVCCFLAGS are not the flags the PTX was built with.
func TestManifest(t *testing.T) {
	ptxtest.CheckManifest(t, "../../Makefile", ".", func(cu string) []string { return []string{strings.TrimSuffix(cu, ".cu") + ".ptx"} })
}

// TestManifestTC: the same for the tensor-core kernels (tc/: their sources, their PTX, tc/MANIFEST.sha256).
func TestManifestTC(t *testing.T) {
	ptxtest.CheckManifest(t, "../../Makefile", "tc", func(cu string) []string { return []string{strings.TrimSuffix(cu, ".cu") + ".ptx"} })
}

// TestEmbeddedTCPTX: the embedded tc modules are tc/*.ptx on disk, one per tc/*.cu, each PTX ISA 9.0 with
// kernels, for sm_90a where the source uses wgmma or TMA (scripts/ptx.sh's tc_flags: *wgmma*, *tma*) and sm_90
// otherwise.
func TestEmbeddedTCPTX(t *testing.T) {
	mods := tcModules()
	want := []string{tcAttModule, tcModule, tcTMAModule, tcWGModule}
	if !reflect.DeepEqual(mods, want) {
		t.Fatalf("embedded tc modules %v, want %v", mods, want)
	}
	t.Setenv(ptx.DirEnv, "")
	for _, m := range mods {
		b, err := tcPTX(m)
		if err != nil {
			t.Fatal(err)
		}
		disk, err := os.ReadFile("tc/" + m + ".ptx")
		if err != nil || string(disk) != string(b) {
			t.Errorf("tc/%s.ptx: embedded copy differs from the file (%v)", m, err)
		}
		target := ".target sm_90\n"
		if strings.Contains(m, "wgmma") || strings.Contains(m, "tma") {
			target = ".target sm_90a\n"
		}
		s := string(b)
		if !strings.Contains(s, target) || !strings.Contains(s, ".version 9.0") {
			t.Errorf("tc/%s.ptx is not PTX ISA 9.0 with %q", m, target)
		}
		if len(entryNames(b)) == 0 {
			t.Errorf("tc/%s.ptx has no kernels", m)
		}
	}
	if _, err := tcPTX("matmul"); err == nil {
		t.Error("tcPTX found matmul, a module of kernels/cuda, not of tc/")
	}
}

// TestPTXDirTC: with $BITALIGN_PTX_DIR set, the tc modules come from its kernels/cuda/tc (the tree
// `make ptx PTX_OUT=dir` writes), and a tree without them is an error naming the variable.
func TestPTXDirTC(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(dir+"/kernels/cuda/tc", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/kernels/cuda/tc/tc_matmul.ptx", []byte("// fresh"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(ptx.DirEnv, dir)
	if b, err := tcPTX(tcModule); err != nil || string(b) != "// fresh" {
		t.Errorf("tcPTX(%s) = %q, %v; want the tree's file", tcModule, b, err)
	}
	if _, err := tcPTX(tcWGModule); err == nil || !strings.Contains(err.Error(), ptx.DirEnv) {
		t.Errorf("tcPTX(%s) from a tree without it: %v, want an error naming %s", tcWGModule, err, ptx.DirEnv)
	}
}

// TestEmbeddedPTX checks that the embedded modules are the files on disk and that each declares sm_90 code
// from the PTX ISA the driver floor (cuda.MinDriverVersion) accepts.
func TestEmbeddedPTX(t *testing.T) {
	mods := Modules()
	if len(mods) < 7 {
		t.Fatalf("only %d embedded modules: %v", len(mods), mods)
	}
	t.Setenv(ptx.DirEnv, "")
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

// TestDecConfigMatchesSource: launch.json's table of the decode kernels' (span, stages), which sizes their
// shared memory, is the one matmul.cu instantiates; every configuration fits the H200's 227 KB per block.
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
	decConfig := map[int][2]int{}
	for _, d := range rules.Matmul.Dec {
		decConfig[d.MT] = [2]int{d.Span, d.Stages}
	}
	if !reflect.DeepEqual(found, decConfig) {
		t.Errorf("matmul.cu instantiates %v, launch.json says %v", found, decConfig)
	}
	for mt := range decConfig {
		if b := decSharedBytes(mt); b > 232448-64 {
			t.Errorf("matmul_dec%d needs %d bytes of shared memory, over the 227 KB limit", mt, b)
		}
	}
}

// TestLaunchBounds: the launchers take the chains' bounds from package kernels (MatmulBounds, PartialBounds),
// and segs packs them into the kernels' Segs struct (int n; int b[9]) without loss, for both profiles at
// every batch size where the standard split changes; a TP degree the 8-segment rule rejects fails before any
// launch with the CPU reference's own error.
func TestLaunchBounds(t *testing.T) {
	unpack := func(buf []byte) []int {
		n := int(int32(binary.LittleEndian.Uint32(buf)))
		b := make([]int, n+1)
		for i := range b {
			b[i] = int(int32(binary.LittleEndian.Uint32(buf[4+4*i:])))
		}
		return b
	}
	for _, p := range []kernels.Profile{kernels.Canonical, kernels.Standard} {
		for _, M := range []int{1, 7, 8, 63, 64, 4096} {
			for _, K := range []int{0, 1, 7, 13, 4096, 18944} {
				b, _ := kernels.MatmulBounds(p, M, K)
				buf := segs(b)
				if len(buf) != 40 || !reflect.DeepEqual(unpack(buf), b) {
					t.Fatalf("%v M=%d K=%d: segs packs %v as %v", p, M, K, b, unpack(buf))
				}
			}
		}
		for _, tp := range []int{1, 2, 4, 8} {
			b, _, err := kernels.PartialBounds(p, 1000, tp)
			if err != nil || !reflect.DeepEqual(unpack(segs(b)), b) {
				t.Fatalf("%v tp=%d: %v %v", p, tp, b, err)
			}
		}
	}
	want := kernels.MatmulPartial(kernels.Canonical, nil, nil, nil, 1, 6, 1, 0, 3)
	got := (&Kernels{}).MatmulPartial(nil, kernels.Canonical, 0, 0, 0, 1, 6, 1, 3)
	if want == nil || got == nil || got.Error() != want.Error() {
		t.Fatalf("tp = 3: launcher says %v, CPU reference %v", got, want)
	}
}
