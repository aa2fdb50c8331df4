package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// checkWritable fails early (exit 2) when path exists and overwriting was not asked for.
func checkWritable(path string, force bool) error {
	if force {
		return nil
	}
	if _, err := os.Lstat(path); err == nil {
		return usageErr("%s exists; pass --force to overwrite it", path)
	}
	return nil
}

// writeFileAtomic writes path through a temporary file in the same directory, fsyncs it and renames it into
// place, so a crash never leaves a half-written file under the final name. Without force an existing file is
// never replaced.
func writeFileAtomic(path string, force bool, fill func(io.Writer) error) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	bw := bufio.NewWriterSize(tmp, 1<<20)
	if err = fill(bw); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err = bw.Flush(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if force {
		err = os.Rename(tmp.Name(), path)
	} else {
		// A hard link fails if the name exists: no window in which another writer's file is replaced.
		if err = os.Link(tmp.Name(), path); err == nil {
			os.Remove(tmp.Name())
		}
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("%s: %w", path, err)
	}
	if d, derr := os.Open(dir); derr == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
