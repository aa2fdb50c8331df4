package nvls

import (
	"os"
	"strings"
	"testing"

	"bitalign/internal/ptx"
	"bitalign/internal/ptx/ptxtest"
)

// The embedded PTX must be what `make ptx` makes of the current collectives.cu with the Makefile's flags: a
// changed .cu without regenerated PTX (or a hand-edited PTX) fails here, without a GPU.
func TestPTXManifest(t *testing.T) {
	modules := func(cu string) []string {
		if cu != "collectives.cu" {
			return nil
		}
		var names []string
		for _, n := range ptxRanks {
			names = append(names, ptxName(n))
		}
		return names
	}
	ptxtest.CheckManifest(t, "../Makefile", "cuda", modules)
	t.Setenv(ptx.DirEnv, "")
	for _, n := range ptxRanks {
		src, err := ptxFor(n)
		if err != nil {
			t.Fatal(err)
		}
		name := ptxName(n)
		if disk, err := os.ReadFile("cuda/" + name); err != nil || string(disk) != string(src) {
			t.Errorf("%s: the embedded copy differs from the file (%v)", name, err)
		}
		// every kernel the transport launches is in the module
		for _, k := range kernelNames(n) {
			if !strings.Contains(string(src), ".entry "+k+"(") {
				t.Errorf("%s has no kernel %s", name, k)
			}
		}
		// NVLink multicast must never be used on these machines.
		if strings.Contains(string(src), "multimem") {
			t.Errorf("%s uses multimem instructions", name)
		}
	}
	if _, err := ptxFor(3); err == nil {
		t.Error("ptxFor(3) succeeded: rank counts are powers of two")
	}
}

func kernelNames(ranks int) []string {
	var s []string
	for _, k := range kernelKeys() {
		s = append(s, k.name(ranks))
	}
	return s
}
