package ui

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// formatOf maps an export path's extension to a report format.
func formatOf(path string) (string, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".md", ".markdown":
		return "md", nil
	case ".json":
		return "json", nil
	case ".html", ".htm":
		return "html", nil
	}
	return "", fmt.Errorf("export: %s: unknown extension (use .md, .json or .html)", path)
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// writeAtomic writes path through a temp file in the same directory (fsync, then rename). Without overwrite
// it links the temp file into place, which fails when path exists, so a file created meanwhile is never
// clobbered.
func writeAtomic(path string, overwrite bool, write func(w *countingWriter) error) (int64, error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".bitalign-export-*")
	if err != nil {
		return 0, fmt.Errorf("export: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a successful link or rename this removes nothing or the extra name
	bw := bufio.NewWriter(f)
	cw := &countingWriter{w: bw}
	if err := write(cw); err != nil {
		f.Close()
		return 0, fmt.Errorf("export: %s: %w", path, err)
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return 0, fmt.Errorf("export: %s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return 0, fmt.Errorf("export: %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return 0, fmt.Errorf("export: %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return 0, fmt.Errorf("export: %s: %w", path, err)
	}
	if overwrite {
		err = os.Rename(tmp, path)
	} else {
		err = os.Link(tmp, path)
	}
	if err != nil {
		if os.IsExist(err) {
			return 0, fmt.Errorf("export: %s already exists", path)
		}
		return 0, fmt.Errorf("export: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return cw.n, nil
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
