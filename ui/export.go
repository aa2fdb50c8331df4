package ui

import (
	"errors"
	"fmt"
	"io"

	"bitalign/internal/atomicfile"
)

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// writeAtomic writes path atomically (internal/atomicfile): a temp file in the same directory, fsynced, then
// linked into place (renamed with overwrite), so a crash leaves no half-written report and a file created
// meanwhile is never clobbered. It returns the bytes written.
func writeAtomic(path string, overwrite bool, write func(w *countingWriter) error) (int64, error) {
	var n int64
	err := atomicfile.Write(path, overwrite, func(w io.Writer) error {
		cw := &countingWriter{w: w}
		err := write(cw)
		n = cw.n
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

func byteCount(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
