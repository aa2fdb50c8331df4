// Package golden compares a test's output with a file committed beside the code (a golden file, or a generated
// document such as docs/keys.md); `go test -update` rewrites the files instead. Only tests import it.
package golden

import (
	"bytes"
	"flag"
	"os"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files (and generated docs) that the tests compare with")

// Check fails the test unless the file at path holds got; with -update it first writes got there. regen is
// the command that rewrites the file, for the failure message.
func Check(t testing.TB, path string, got []byte, regen string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (regenerate: %s)", err, regen)
	}
	if !bytes.Equal(want, got) {
		t.Errorf("%s is not what the test makes (regenerate with %s after checking the difference); the test makes:\n%s",
			path, regen, got)
	}
}
