package ptx

import (
	"fmt"
	"os"
	"path/filepath"
)

// DirEnv names the environment variable that, when set, makes Load read PTX from a tree that
// `make ptx PTX_OUT=dir` wrote (dir/kernels/cuda/*.ptx, dir/nvls/cuda/*.ptx) instead of the embedded copies:
// scripts/gpu.sh sets it so that the tests load the PTX it has just compiled.
const DirEnv = "BITALIGN_PTX_DIR"

// Load returns PTX file name of the package directory pkgDir (relative to the repository root, e.g.
// "kernels/cuda"): from $BITALIGN_PTX_DIR/pkgDir when DirEnv is set, else embedded(name).
func Load(pkgDir, name string, embedded func(string) ([]byte, error)) ([]byte, error) {
	if dir := os.Getenv(DirEnv); dir != "" {
		b, err := os.ReadFile(filepath.Join(dir, pkgDir, name))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", DirEnv, err)
		}
		return b, nil
	}
	return embedded(name)
}
