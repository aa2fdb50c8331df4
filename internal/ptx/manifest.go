// Package ptx checks the PTX that bitalign embeds against its sources. `make ptx` compiles every CUDA
// source of kernels/cuda and nvls/cuda with the Makefile's NVCCFLAGS and writes, in each directory,
// MANIFEST.sha256:
//
//	# nvcc: Build cuda_13.0.r13.0/compiler.36424714_0
//	# flags: -ptx -arch=sm_90 -fmad=false -ftz=false -prec-div=true -prec-sqrt=true -O3
//	<sha256>  attention.cu
//	...
//	<sha256>  attention.ptx
//
// (sha256sum's format after two comment lines: the compiler that wrote the PTX and the flags it was given).
// Check, run by each package's tests without a GPU, fails when a source changed without its PTX being
// regenerated, a PTX was edited by hand, or the Makefile's flags are not the ones the PTX was built with.
package ptx

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// ManifestName is the manifest's file name in each PTX directory.
const ManifestName = "MANIFEST.sha256"

// Fix is what every Check error tells the reader to do.
const Fix = "run make ptx on a machine with nvcc (docs/gpu.md)"

// Manifest is a parsed MANIFEST.sha256.
type Manifest struct {
	NVCC  string            // the "# nvcc:" line: the compiler build that wrote the PTX
	Flags string            // the "# flags:" line: NVCCFLAGS as make ptx passed them
	Files map[string]string // file name → sha256, lower-case hex
}

// Parse reads a manifest; name (the file's path) prefixes its errors.
func Parse(name string, b []byte) (*Manifest, error) {
	m := &Manifest{Files: map[string]string{}}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if v, ok := strings.CutPrefix(text, "# nvcc:"); ok {
			m.NVCC = strings.TrimSpace(v)
			continue
		}
		if v, ok := strings.CutPrefix(text, "# flags:"); ok {
			m.Flags = strings.Join(strings.Fields(v), " ")
			continue
		}
		if strings.HasPrefix(text, "#") || strings.TrimSpace(text) == "" {
			continue
		}
		f := strings.Fields(text)
		if len(f) != 2 || len(f[0]) != 64 || strings.Trim(f[0], "0123456789abcdef") != "" {
			return nil, fmt.Errorf("%s:%d: want \"<sha256>  <file>\", got %q", name, line, text)
		}
		file := strings.TrimPrefix(f[1], "*")
		if _, dup := m.Files[file]; dup {
			return nil, fmt.Errorf("%s:%d: %s listed twice", name, line, file)
		}
		m.Files[file] = f[0]
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	if m.Flags == "" {
		return nil, fmt.Errorf("%s: no \"# flags:\" line", name)
	}
	return m, nil
}

// Check compares dir's manifest with the files in dir: every source (*.cu, *.cuh) and every PTX (*.ptx) must
// be listed with its current sha256, every listed file must exist, every .cu must have the PTX files ptxOf
// names for it and every PTX must come from a .cu, and the manifest's flags must be flags (the Makefile's
// NVCCFLAGS, see MakefileFlags). It returns one error per problem, sorted by file, each ending in Fix.
func Check(dir string, ptxOf func(cu string) []string, flags string) []error {
	raw, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		return []error{fmt.Errorf("%v: %s", err, Fix)}
	}
	m, err := Parse(filepath.Join(dir, ManifestName), raw)
	if err != nil {
		return []error{fmt.Errorf("%v: %s", err, Fix)}
	}
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format+": "+Fix, a...)) }
	if m.Flags != strings.Join(strings.Fields(flags), " ") {
		fail("%s: the PTX was built with %q, the Makefile's NVCCFLAGS are %q", ManifestName, m.Flags, flags)
	}
	var files []string
	for _, pat := range []string{"*.cu", "*.cuh", "*.ptx"} {
		fs, err := filepath.Glob(filepath.Join(dir, pat))
		if err != nil {
			return []error{err}
		}
		for _, f := range fs {
			files = append(files, filepath.Base(f))
		}
	}
	slices.Sort(files)
	if len(files) == 0 {
		return []error{fmt.Errorf("%s: no CUDA sources or PTX", dir)}
	}
	fromSource := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, ".cu") {
			for _, p := range ptxOf(f) {
				fromSource[p] = true
			}
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return []error{err}
		}
		sum := sha256.Sum256(b)
		got := hex.EncodeToString(sum[:])
		switch want, ok := m.Files[f]; {
		case !ok:
			fail("%s is not in %s", f, ManifestName)
		case want != got && strings.HasSuffix(f, ".ptx"):
			fail("%s differs from the PTX make ptx wrote (sha256 %s, manifest %s)", f, got[:12], want[:12])
		case want != got:
			fail("%s changed since its PTX was generated (sha256 %s, manifest %s)", f, got[:12], want[:12])
		}
		if strings.HasSuffix(f, ".cu") {
			for _, p := range ptxOf(f) {
				if !slices.Contains(files, p) {
					fail("%s has no %s", f, p)
				}
			}
		}
		if strings.HasSuffix(f, ".ptx") && !fromSource[f] {
			fail("%s comes from no .cu in %s", f, dir)
		}
	}
	listed := make([]string, 0, len(m.Files))
	for f := range m.Files {
		listed = append(listed, f)
	}
	slices.Sort(listed)
	for _, f := range listed {
		if !slices.Contains(files, f) {
			fail("%s lists %s, which does not exist", ManifestName, f)
		}
	}
	return errs
}

var flagsLine = regexp.MustCompile(`(?m)^NVCCFLAGS\s*:?=(.*)$`)

// MakefileFlags returns NVCCFLAGS as the Makefile at path defines it (its one "NVCCFLAGS := ..." line).
func MakefileFlags(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	ms := flagsLine.FindAllSubmatch(b, -1)
	if len(ms) != 1 {
		return "", errors.New(path + ": want exactly one NVCCFLAGS := line")
	}
	return strings.Join(strings.Fields(string(ms[0][1])), " "), nil
}
