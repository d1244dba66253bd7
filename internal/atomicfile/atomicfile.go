// Package atomicfile writes files so that a reader, or a restart after a
// crash, sees either the old content or the new, never a torn file.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
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
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmpName := tmp.Name()
	defer os.Remove(tmpName) // no-op after a successful rename
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := tmp.Write(data); err != nil {
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
