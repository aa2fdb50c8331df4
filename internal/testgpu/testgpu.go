// Package testgpu holds the one rule of bitalign's GPU tests: without a GPU they skip, saying that they were
// not passed, and with BITALIGN_REQUIRE_GPU=1 (scripts/gpu.sh on the GPU machine) they fail instead, so that a
// broken driver binding cannot hide behind a skip. Only tests import it.
package testgpu

import (
	"os"
	"testing"
)

// RequireEnv names the environment variable that, set to 1, turns a GPU test's skip into a failure.
const RequireEnv = "BITALIGN_REQUIRE_GPU"

// Required reports whether RequireEnv is 1: a missing GPU must fail the test.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// SkipOrFail ends a test that found no usable GPU (err says why): it fails when Required, and otherwise skips
// with the message format and args.
func SkipOrFail(t testing.TB, err error, format string, args ...any) {
	t.Helper()
	if Required() {
		t.Fatalf("%s=1 but: %v", RequireEnv, err)
	}
	t.Skipf(format, args...)
}
