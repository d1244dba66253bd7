// Package atomicfile writes files so that a reader, or a restart after a
// crash, sees either the old content or the new, never a torn file.
//
// Write and WriteChecked are for files the program names itself (state
// files): they replace whatever is at the path, a symlink included. For a
// path a user named on the command line use WriteOutput, which never
// replaces a device, fifo or symlink.
package atomicfile

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Write replaces path with data, created with perm. The temporary file is
// created with perm from the start, so a secret is never briefly readable.
func Write(path string, data []byte, perm os.FileMode) error {
	return WriteChecked(path, data, perm, nil)
}

// WriteChecked is Write with a check: check runs on the complete temporary
// file, and path is replaced only if it returns nil. Its error is returned
// as it is.
func WriteChecked(path string, data []byte, perm os.FileMode, check func(tmpPath string) error) error {
	return replace(path, perm, writeBytes(data), check)
}

// WriteFunc is Write for content too large to hold in memory: write is
// called once with a buffered writer to the temporary file, and its error
// is returned wrapped with path.
func WriteFunc(path string, perm os.FileMode, write func(w io.Writer) error) error {
	return replace(path, perm, bufferedBody(write), nil)
}

// IsLeftover reports whether name (a base name) is a temporary file that
// a write killed before its rename leaves behind; whoever owns the
// directory may remove it.
func IsLeftover(name string) bool {
	return strings.HasPrefix(name, ".") && strings.Contains(name, tempInfix)
}

// tempInfix marks a temporary file: "." + base name + tempInfix + random.
const tempInfix = ".tmp-"

// writeBytes is the body of a write of a byte slice.
func writeBytes(data []byte) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	}
}

// replace writes a temporary file beside path with body, runs check on it,
// and renames it over path. Errors other than check's name path.
func replace(path string, perm os.FileMode, body func(io.Writer) error, check func(tmpPath string) error) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+tempInfix+"*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmpName := tmp.Name()
	defer os.Remove(tmpName) // no-op after a successful rename
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := body(tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if check != nil {
		if err := check(tmpName); err != nil {
			return err
		}
	}
	if err := os.Rename(tmpName, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // make the rename durable
		d.Close()
	}
	return nil
}

// bufferedBody runs body through a buffer, so that a body making many small
// writes (an encoder, an archive) does not make as many system calls.
func bufferedBody(body func(io.Writer) error) func(io.Writer) error {
	return func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, 64<<10)
		if err := body(bw); err != nil {
			return err
		}
		return bw.Flush()
	}
}
