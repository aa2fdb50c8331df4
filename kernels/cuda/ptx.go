package cudakernels

import (
	"embed"
	"fmt"
	"sort"
	"strings"

	"bitalign/internal/ptx"
)

// The kernels' PTX: `make ptx` compiles each .cu here into one .ptx and writes MANIFEST.sha256
// (internal/ptx; TestManifest checks it).
//
//go:embed *.ptx
var embedded embed.FS

// pkgDir is this package's directory in the repository (where a PTX tree in ptx.DirEnv keeps its PTX).
const pkgDir = "kernels/cuda"

// Modules returns the PTX module names (one per .cu source, e.g. "matmul"), sorted.
func Modules() []string {
	entries, _ := embedded.ReadDir(".")
	var names []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".ptx"); ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// PTX returns module name's PTX: from $BITALIGN_PTX_DIR/kernels/cuda when set (ptx.DirEnv), else the
// embedded copy.
func PTX(name string) ([]byte, error) {
	b, err := ptx.Load(pkgDir, name+".ptx", func(file string) ([]byte, error) {
		b, err := embedded.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("no embedded PTX for %q", name)
		}
		return b, nil
	})
	if err != nil {
		return nil, fmt.Errorf("cudakernels: %w", err)
	}
	return b, nil
}
