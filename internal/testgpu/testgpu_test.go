package testgpu

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
)

// rec records how SkipOrFail ends a test; like testing's, its Skipf and Fatalf stop the goroutine.
type rec struct {
	testing.TB
	skipped, failed string
}

func (r *rec) Helper() {}
func (r *rec) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *rec) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func skipOrFail(t *testing.T, err error) *rec {
	r := &rec{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		SkipOrFail(r, err, "no GPU here (%v)", err)
	}()
	<-done
	return r
}

func TestSkipOrFail(t *testing.T) {
	err := errors.New("no driver")
	t.Setenv(RequireEnv, "")
	if r := skipOrFail(t, err); r.skipped != "no GPU here (no driver)" || r.failed != "" || Required() {
		t.Errorf("unset: skipped %q, failed %q", r.skipped, r.failed)
	}
	t.Setenv(RequireEnv, "1")
	if r := skipOrFail(t, err); r.skipped != "" || r.failed != "BITALIGN_REQUIRE_GPU=1 but: no driver" || !Required() {
		t.Errorf("%s=1: skipped %q, failed %q", RequireEnv, r.skipped, r.failed)
	}
}
