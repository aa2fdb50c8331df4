package nvls

import (
	"embed"
	"encoding/json"
	"fmt"
)

// The GPU transport's kernels: nvls/cuda/collectives.cu compiled by nvls/cuda/gen.sh into one PTX module per
// rank count. manifest.json records the source's sha256 (TestPTXManifest fails when the .cu changed without
// regenerating) and each PTX file's.
//
//go:embed cuda/collectives_nr1.ptx cuda/collectives_nr2.ptx cuda/collectives_nr4.ptx cuda/collectives_nr8.ptx
//go:embed cuda/manifest.json
var ptxFS embed.FS

// ptxManifest is nvls/cuda/manifest.json.
type ptxManifest struct {
	Source       string            `json:"source"`
	SourceSHA256 string            `json:"source_sha256"`
	NVCC         string            `json:"nvcc"`
	Flags        string            `json:"flags"`
	PTX          map[string]string `json:"ptx"` // file name → sha256
}

func readPTXManifest() (ptxManifest, error) {
	var m ptxManifest
	b, err := ptxFS.ReadFile("cuda/manifest.json")
	if err != nil {
		return m, fmt.Errorf("nvls: cuda/manifest.json: %w", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("nvls: cuda/manifest.json: %w", err)
	}
	return m, nil
}

// ptxFor returns the PTX module for n ranks (1, 2, 4 or 8).
func ptxFor(n int) ([]byte, error) {
	switch n {
	case 1, 2, 4, 8:
	default:
		return nil, fmt.Errorf("nvls: the GPU transport supports 1, 2, 4 or 8 ranks, not %d", n)
	}
	return ptxFS.ReadFile(fmt.Sprintf("cuda/collectives_nr%d.ptx", n))
}
