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

// The tensor-core kernels' PTX (the tc profile, docs/arithmetic.md §18): `make ptx` compiles each .cu of tc/
// into one .ptx beside it (the wgmma and TMA ones for sm_90a) and writes tc/MANIFEST.sha256 (TestManifestTC
// checks it). Load takes these modules only when they load (loadTC): each is optional.
//
//go:embed tc/*.ptx
var embeddedTC embed.FS

// pkgDir is this package's directory in the repository (where a PTX tree in ptx.DirEnv keeps its PTX), tcDir
// the tc kernels' (sources and PTX).
const (
	pkgDir = "kernels/cuda"
	tcDir  = pkgDir + "/tc"
)

// Modules returns the PTX module names (one per .cu source, e.g. "matmul"), sorted.
func Modules() []string { return ptxNames(embedded, ".") }

// tcModules returns the tc PTX module names (one per tc/*.cu source, e.g. "tc_matmul"), sorted.
func tcModules() []string { return ptxNames(embeddedTC, "tc") }

// ptxNames lists the .ptx files of dir in fsys without their suffix, sorted.
func ptxNames(fsys embed.FS, dir string) []string {
	entries, _ := fsys.ReadDir(dir)
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
	return loadPTX(pkgDir, embedded, "", name)
}

// tcPTX returns tc module name's PTX: from $BITALIGN_PTX_DIR/kernels/cuda/tc when set (ptx.DirEnv), else the
// embedded copy.
func tcPTX(name string) ([]byte, error) {
	return loadPTX(tcDir, embeddedTC, "tc/", name)
}

// loadPTX reads name.ptx of the repository directory dir through ptx.Load, its embedded copy at prefix+file in fs.
func loadPTX(dir string, fs embed.FS, prefix, name string) ([]byte, error) {
	b, err := ptx.Load(dir, name+".ptx", func(file string) ([]byte, error) {
		b, err := fs.ReadFile(prefix + file)
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
