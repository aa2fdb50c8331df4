package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"bitalign/internal/atomicfile"
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

// writeFileAtomic writes path atomically (internal/atomicfile): a crash never leaves a half-written file under
// the final name, and without force an existing file is never replaced.
func writeFileAtomic(path string, force bool, fill func(io.Writer) error) error {
	if err := atomicfile.Write(path, force, fill); err != nil {
		if errors.Is(err, atomicfile.ErrExist) {
			return fmt.Errorf("%s exists; pass --force to overwrite it", path)
		}
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
