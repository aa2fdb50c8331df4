package cudakernels

import (
	"bufio"
	"bytes"
	"embed"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

//go:embed *.ptx MANIFEST.sha256
var embedded embed.FS

// ManifestName is the file listing "sha256  name" for every .cu, .cuh and .ptx file (sha256sum's format).
const ManifestName = "MANIFEST.sha256"

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

// PTX returns module name's PTX: from $BITALIGN_PTX_DIR when set, else the embedded copy.
func PTX(name string) ([]byte, error) {
	if dir := os.Getenv("BITALIGN_PTX_DIR"); dir != "" {
		b, err := os.ReadFile(filepath.Join(dir, name+".ptx"))
		if err != nil {
			return nil, fmt.Errorf("cudakernels: BITALIGN_PTX_DIR: %w", err)
		}
		return b, nil
	}
	b, err := embedded.ReadFile(name + ".ptx")
	if err != nil {
		return nil, fmt.Errorf("cudakernels: no embedded PTX for %q", name)
	}
	return b, nil
}

// parseManifest reads sha256sum output: "<64 hex>  <name>" per line.
func parseManifest(b []byte) (map[string]string, error) {
	m := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 || len(f[0]) != 64 {
			return nil, fmt.Errorf("cudakernels: %s:%d: want \"<sha256>  <file>\", got %q", ManifestName, line, sc.Text())
		}
		m[strings.TrimPrefix(f[1], "*")] = f[0]
	}
	return m, sc.Err()
}
