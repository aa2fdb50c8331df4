package cuda

import (
	"errors"
	"strings"
	"testing"

	"bitalign/internal/testgpu"
)

// openLibraryFails opens name as the CUDA driver: it must fail with an error that wraps ErrUnavailable,
// returned for the caller to check its text.
func openLibraryFails(t *testing.T, name string) error {
	t.Helper()
	_, err := openLibrary(name)
	if err == nil {
		t.Fatalf("%s passed for a CUDA driver", name)
	}
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("error does not wrap ErrUnavailable: %v", err)
	}
	return err
}

func TestOpenLibraryMissing(t *testing.T) {
	err := openLibraryFails(t, "libbitalign-no-such-driver.so.1")
	if !strings.Contains(err.Error(), "no CUDA driver") || !strings.Contains(err.Error(), "libbitalign-no-such-driver.so.1") {
		t.Errorf("unclear error: %v", err)
	}
}

func TestOpenLibraryMissingSymbol(t *testing.T) {
	// libc exists on every Linux machine and has none of the driver's symbols.
	err := openLibraryFails(t, "libc.so.6")
	if !strings.Contains(err.Error(), "has no symbol cuInit") {
		t.Errorf("error does not name the missing symbol: %v", err)
	}
}

func TestErrorMessage(t *testing.T) {
	e := &Error{Call: "cuMemAlloc_v2", Code: ErrorOutOfMemory, Name: "CUDA_ERROR_OUT_OF_MEMORY", Desc: "out of memory"}
	if got, want := e.Error(), "cuda: cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !IsOutOfMemory(e) || IsOutOfMemory(errors.New("x")) {
		t.Error("IsOutOfMemory misclassifies")
	}
}

// Without a GPU, Open must fail with ErrUnavailable and never panic; with one, it must succeed.
func TestOpenWithoutOrWithGPU(t *testing.T) {
	d, err := Open(0)
	if err != nil {
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Open(0) failed without ErrUnavailable: %v", err)
		}
		testgpu.SkipOrFail(t, err, "no GPU here (%v): device paths are tested on the GPU machine", err)
	}
	defer d.Close()
	if _, err := Open(1 << 20); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Open(huge ordinal) = %v, want ErrUnavailable", err)
	}
}

func TestSymbolTableComplete(t *testing.T) {
	for i, names := range symNames {
		if len(names) == 0 {
			t.Errorf("symbol %d has no name", i)
		}
		for _, n := range names {
			if n == "cuMulticastCreate" {
				t.Error("cuMulticastCreate must never be bound")
			}
		}
	}
}
