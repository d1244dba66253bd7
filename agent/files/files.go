// Package files writes the node stack's configuration: atomically, only
// when the content changes, and only after the component's own checker
// accepts the candidate, so that a bad config never replaces a good one.
package files

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/harmonykaas/harmony/internal/atomicfile"
)

// Validator checks a candidate file at path before it replaces the live
// one, for example by running `haproxy -c -f path`.
type Validator func(path string) error

// ValidationError is a candidate the component's checker refused. The live
// file is untouched.
type ValidationError struct {
	Path string
	Err  error
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("candidate for %s refused: %v", e.Path, e.Err)
}

func (e *ValidationError) Unwrap() error { return e.Err }

// Write makes path hold data with mode perm. It returns changed=false, and
// touches nothing, when the file already holds exactly that. Otherwise it
// writes a candidate next to path, runs validate on it (if not nil), and
// renames it into place only if validate accepts it.
func Write(path string, data []byte, perm os.FileMode, validate Validator) (changed bool, err error) {
	return WriteOwing(path, data, perm, validate, nil)
}

// WriteOwing is Write for a file that a running program reads: once
// validate has accepted the candidate, and before the candidate replaces
// path, owe (if not nil) records that the program must read it again
// (reconcile.Host.OweReload). An agent that dies between the two leaves
// that debt to the next one, not a changed file nothing will re-read.
func WriteOwing(path string, data []byte, perm os.FileMode, validate Validator, owe func() error) (changed bool, err error) {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		if info, err := os.Stat(path); err == nil && info.Mode().Perm() == perm {
			return false, nil
		}
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	check := func(tmp string) error {
		if validate != nil {
			if err := validate(tmp); err != nil {
				return &ValidationError{Path: path, Err: err}
			}
		}
		if owe != nil {
			return owe()
		}
		return nil
	}
	if err := atomicfile.WriteChecked(path, data, perm, check); err != nil {
		return false, err
	}
	return true, nil
}
