package nvls

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"
	"testing"
)

// The embedded PTX must be what nvls/cuda/gen.sh makes of the current collectives.cu: a changed .cu without
// regenerated PTX (or a hand-edited PTX) fails here, on CI, without a GPU.
func TestPTXManifest(t *testing.T) {
	m, err := readPTXManifest()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("cuda/" + m.Source)
	if err != nil {
		t.Fatal(err)
	}
	if got := sha256Hex(src); got != m.SourceSHA256 {
		t.Errorf("cuda/%s has sha256 %s but the PTX was generated from %s: run `sh nvls/cuda/gen.sh` with nvcc 13.0 (on the GPU machine)",
			m.Source, got, m.SourceSHA256)
	}
	if !strings.Contains(m.Flags, "-fmad=false") || !strings.Contains(m.Flags, "sm_90") {
		t.Errorf("manifest flags %q: want -arch=sm_90 -fmad=false", m.Flags)
	}
	for _, n := range []int{1, 2, 4, 8} {
		ptx, err := ptxFor(n)
		if err != nil {
			t.Fatal(err)
		}
		name := "collectives_nr" + string(rune('0'+n)) + ".ptx"
		if want, ok := m.PTX[name]; !ok || sha256Hex(ptx) != want {
			t.Errorf("%s: sha256 %s, manifest says %q", name, sha256Hex(ptx), want)
		}
		// every kernel the transport launches is in the module
		for _, k := range kernelNames(n) {
			if !strings.Contains(string(ptx), ".entry "+k+"(") {
				t.Errorf("%s has no kernel %s", name, k)
			}
		}
		// NVLink multicast must never be used on these machines.
		if strings.Contains(string(ptx), "multimem") {
			t.Errorf("%s uses multimem instructions", name)
		}
	}
	if _, err := ptxFor(3); err == nil {
		t.Error("ptxFor(3) succeeded: rank counts are powers of two")
	}
}

func sha256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func kernelNames(ranks int) []string {
	var s []string
	for _, k := range kernelKeys() {
		s = append(s, k.name(ranks))
	}
	return s
}
