// Package atomicfile writes files so that a crash never leaves a half-written file under the final name and an
// existing file is never replaced unless the caller asks: the bytes go to a temporary file in the target's
// directory, which is fsynced and then published under the final name in one step — a hard link, which fails if
// the name exists, or a rename when overwriting was asked for — and the directory is fsynced.
package atomicfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// ErrExist is returned (wrapped, with the path) when the target exists and overwriting was not asked for.
var ErrExist = fs.ErrExist

// Mode is the permission of published files (temporary files start at 0600).
const Mode = 0o644

// File is a file being written under a temporary name next to its target.
type File struct {
	f         *os.File
	path, tmp string
	overwrite bool
	done      bool
}

// Create starts writing path. Without overwrite it fails at once if path exists (and again at Commit, should a
// file appear there meanwhile).
func Create(path string, overwrite bool) (*File, error) {
	if !overwrite {
		if _, err := os.Lstat(path); err == nil {
			return nil, fmt.Errorf("%s: %w", path, ErrExist)
		}
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(Mode); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return &File{f: f, path: path, tmp: f.Name(), overwrite: overwrite}, nil
}

// Write writes to the temporary file.
func (f *File) Write(p []byte) (int, error) { return f.f.Write(p) }

// Path is the final name.
func (f *File) Path() string { return f.path }

// Commit fsyncs and closes the temporary file and publishes it under the final name. On error nothing is left
// under the final name, and the temporary file is removed.
func (f *File) Commit() error {
	if f.done {
		return errors.New("atomicfile: commit after commit or abort")
	}
	f.done = true
	err := f.f.Sync()
	if cerr := f.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = publish(f.tmp, f.path, f.overwrite)
	}
	if err != nil {
		os.Remove(f.tmp)
		return err
	}
	if d, derr := os.Open(filepath.Dir(f.path)); derr == nil {
		_ = d.Sync() // best effort: not every platform can fsync a directory
		d.Close()
	}
	return nil
}

// Abort discards the file. It does nothing after Commit or a first Abort.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	f.f.Close()
	os.Remove(f.tmp)
}

// publish gives tmp the name path. Without overwrite it hard-links (atomically failing if path exists) and
// removes tmp; where hard links are unsupported it checks, then renames.
func publish(tmp, path string, overwrite bool) error {
	if overwrite {
		return os.Rename(tmp, path)
	}
	err := os.Link(tmp, path)
	if err == nil {
		return os.Remove(tmp)
	}
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s: %w", path, ErrExist)
	}
	if _, serr := os.Lstat(path); serr == nil {
		return fmt.Errorf("%s: %w", path, ErrExist)
	}
	return os.Rename(tmp, path)
}

// Write writes a whole file through fill, buffered.
func Write(path string, overwrite bool, fill func(io.Writer) error) error {
	f, err := Create(path, overwrite)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	if err := fill(bw); err != nil {
		f.Abort()
		return err
	}
	if err := bw.Flush(); err != nil {
		f.Abort()
		return err
	}
	return f.Commit()
}

// Counter passes writes on to W and counts the bytes that went through: the position in a file being written
// from its start (what a report's size or an Arrow file's block offsets need).
type Counter struct {
	W io.Writer
	N int64
}

func (c *Counter) Write(p []byte) (int, error) {
	n, err := c.W.Write(p)
	c.N += int64(n)
	return n, err
}
