// Package hftest holds what the tests that compare bitalign with transformers share: the walk over the
// directories a torch script wrote (found through an environment variable, skipped without it) and the argmax
// the logits are compared by. Only tests import it.
package hftest

import (
	"cmp"
	"os"
	"path/filepath"
	"testing"
)

// EachDir runs f as a subtest, named after the entry, for every entry of the directory $env; the test skips
// with the message skip when env is unset, and fails when the directory cannot be read.
func EachDir(t *testing.T, env, skip string, f func(t *testing.T, dir string)) {
	t.Helper()
	root := os.Getenv(env)
	if root == "" {
		t.Skip(skip)
	}
	dirs, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		dir := filepath.Join(root, d.Name())
		t.Run(d.Name(), func(t *testing.T) { f(t, dir) })
	}
}

// Argmax is the index of x's largest value, the first of equal ones (0 for an empty x).
func Argmax[T cmp.Ordered](x []T) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}
