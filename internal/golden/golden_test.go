package golden

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// rec records the failures Check reports.
type rec struct {
	testing.TB
	errs []string
}

func (r *rec) Helper()                           {}
func (r *rec) Errorf(format string, args ...any) { r.errs = append(r.errs, format) }
func (r *rec) Fatalf(format string, args ...any) {
	r.errs = append(r.errs, format)
	runtime.Goexit()
}

// check runs Check as a test would, on its own goroutine, so that Fatalf ends it there.
func check(r *rec, path, got string) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		Check(r, path, []byte(got), "go test -update")
	}()
	<-done
}

func TestCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.golden")
	if err := os.WriteFile(path, []byte("same"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &rec{TB: t}
	check(r, path, "same")
	if len(r.errs) != 0 {
		t.Errorf("equal content failed: %q", r.errs)
	}
	check(r, path, "other")
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], "not what the test makes") {
		t.Errorf("different content: %q", r.errs)
	}
	r = &rec{TB: t}
	check(r, path+".missing", "same")
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], "regenerate") {
		t.Errorf("missing file: %q", r.errs)
	}
	*update = true
	defer func() { *update = false }()
	r = &rec{TB: t}
	check(r, path, "new")
	if b, err := os.ReadFile(path); len(r.errs) != 0 || err != nil || string(b) != "new" {
		t.Errorf("-update: file %q (%v), failures %q", b, err, r.errs)
	}
}
