package capture

import (
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

func withGenericIndex() OpenOption { return func(c *openConfig) { c.genericOnly = true } }

// wantErr checks that err is "capture: <path>: ..." and mentions want.
func wantErr(t *testing.T, err error, path, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one mentioning %q", want)
	}
	prefix := "capture: " + path + ": "
	if path == "" {
		prefix = "capture: "
	}
	if !strings.HasPrefix(err.Error(), prefix) || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q, want prefix %q and %q", err, prefix, want)
	}
}

func defaultAllocator() memory.Allocator { return memory.DefaultAllocator }
