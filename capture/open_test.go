//go:build unix

package capture

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestOpenNotRegular: a FIFO is refused at once (opening it would block until a writer came), as not a
// regular file rather than as empty.
func TestOpenNotRegular(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo.arrow")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no FIFOs here: %v", err)
	}
	_, err := Open(fifo)
	if err == nil || !strings.Contains(err.Error(), "fifo.arrow: not a regular file") || strings.Contains(err.Error(), "empty") {
		t.Fatalf("Open(FIFO): %v", err)
	}
}

// TestComplete: one rank's file of a TP capture is incomplete, naming the missing ranks; the directory is whole.
func TestComplete(t *testing.T) {
	dir := t.TempDir()
	writeRanks(t, dir, []Meta{testMeta("trainer", 0), testMeta("trainer", 1)})
	one, err := Open(filepath.Join(dir, "rank1.arrow"))
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	if err := one.Complete(); err == nil || !strings.Contains(err.Error(), "rank1.arrow") || !strings.Contains(err.Error(), "ranks [0] are missing") {
		t.Fatalf("Complete of one rank's file: %v", err)
	}
	all, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	if err := all.Complete(); err != nil {
		t.Fatalf("Complete of the directory: %v", err)
	}
}
