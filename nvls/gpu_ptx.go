package nvls

import (
	"embed"
	"fmt"
	"slices"

	"bitalign/internal/ptx"
)

// The GPU transport's kernels: `make ptx` compiles nvls/cuda/collectives.cu into one PTX module per rank count
// (-DNVLS_NR=n, n in ptxRanks) and writes nvls/cuda/MANIFEST.sha256 (internal/ptx; TestPTXManifest checks it).
//
//go:embed cuda/collectives_nr1.ptx cuda/collectives_nr2.ptx cuda/collectives_nr4.ptx cuda/collectives_nr8.ptx
var ptxFS embed.FS

// ptxRanks are the rank counts collectives.cu is compiled for (scripts/ptx.sh's NVLS_RANKS).
var ptxRanks = []int{1, 2, 4, 8}

// ptxName is the PTX module of collectives.cu for n ranks.
func ptxName(n int) string { return fmt.Sprintf("collectives_nr%d.ptx", n) }

// ptxFor returns the PTX module for n ranks (1, 2, 4 or 8): from $BITALIGN_PTX_DIR/nvls/cuda when set
// (ptx.DirEnv), else the embedded copy.
func ptxFor(n int) ([]byte, error) {
	if !slices.Contains(ptxRanks, n) {
		return nil, fmt.Errorf("nvls: the GPU transport supports 1, 2, 4 or 8 ranks, not %d", n)
	}
	b, err := ptx.Load("nvls/cuda", ptxName(n), func(name string) ([]byte, error) { return ptxFS.ReadFile("cuda/" + name) })
	if err != nil {
		return nil, fmt.Errorf("nvls: %w", err)
	}
	return b, nil
}
