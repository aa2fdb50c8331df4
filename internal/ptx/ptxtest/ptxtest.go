// Package ptxtest is the PTX manifest test of each package that embeds PTX (kernels/cuda, nvls). Only tests
// import it.
package ptxtest

import (
	"testing"

	"bitalign/internal/ptx"
)

// CheckManifest fails the test when the PTX directory dir is not what `make ptx` makes of its sources with the
// flags of the Makefile at makefile (ptx.Check: a source changed without its PTX being regenerated, a PTX
// edited by hand, other flags); modules names the PTX files a source compiles to.
func CheckManifest(t testing.TB, makefile, dir string, modules func(cu string) []string) {
	t.Helper()
	flags, err := ptx.MakefileFlags(makefile)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range ptx.Check(dir, modules, flags) {
		t.Error(err)
	}
}
