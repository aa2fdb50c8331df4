package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestWritePublishesOnlyOnCommit(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "report.md")
	f, err := Create(path, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the final name exists before Commit: %v", err)
	}
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "hello" {
		t.Fatalf("read back %q, %v", got, err)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != Mode {
		t.Errorf("mode %v, want %v", st.Mode().Perm(), os.FileMode(Mode))
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("temporary files left: %v", ents)
	}
}

func TestNeverOverwritesUnlessAsked(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x")
	os.WriteFile(path, []byte("mine"), 0o644)
	if err := Write(path, false, func(w io.Writer) error { _, err := w.Write([]byte("new")); return err }); !errors.Is(err, ErrExist) {
		t.Fatalf("err = %v, want ErrExist", err)
	}
	// a file that appears between Create and Commit is not replaced either
	other := filepath.Join(dir, "y")
	f, err := Create(other, false)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(other, []byte("theirs"), 0o644)
	if err := f.Commit(); !errors.Is(err, ErrExist) {
		t.Fatalf("Commit err = %v, want ErrExist", err)
	}
	if got, _ := os.ReadFile(other); string(got) != "theirs" {
		t.Fatalf("file replaced: %q", got)
	}
	if err := Write(path, true, func(w io.Writer) error { _, err := w.Write([]byte("new")); return err }); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != "new" {
		t.Fatalf("overwrite: %q", got)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("temporary files left: %v", ents)
	}
}

func TestFailedFillLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x")
	boom := errors.New("boom")
	if err := Write(path, false, func(w io.Writer) error { w.Write([]byte("partial")); return boom }); !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("files left after a failed write: %v", ents)
	}
}
