package ui

import (
	"errors"
	"fmt"
	"io"

	"bitalign/internal/atomicfile"
	"bitalign/ui/overview"
)

// countingWriter is what a report is written through: it counts the bytes.
type countingWriter = atomicfile.Counter

// writeAtomic writes path atomically (internal/atomicfile): a temp file in the same directory, fsynced, then
// linked into place (renamed with overwrite), so a crash leaves no half-written report and a file created
// meanwhile is never clobbered. It returns the bytes written.
func writeAtomic(path string, overwrite bool, write func(w *countingWriter) error) (int64, error) {
	var n int64
	err := atomicfile.Write(path, overwrite, func(w io.Writer) error {
		cw := &countingWriter{W: w}
		err := write(cw)
		n = cw.N
		return err
	})
	if errors.Is(err, atomicfile.ErrExist) {
		return 0, fmt.Errorf("export: %s already exists", path)
	}
	if err != nil {
		return 0, fmt.Errorf("export: %s: %w", path, err)
	}
	return n, nil
}

// byteCount formats a written report's size, as the overview formats sizes.
func byteCount(n int64) string { return overview.Bytes(n) }
