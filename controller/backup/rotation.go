package backup

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/harmonykaas/harmony/internal/atomicfile"
	"github.com/harmonykaas/harmony/internal/lazyregexp"
)

// A directory of backups (backup --output-dir) holds them under names that
// sort as they were taken; nothing else in it is ever touched.
const (
	rotatedPrefix = "harmony-controller-"
	rotatedSuffix = ".backup"
	rotatedLayout = "20060102T150405.000Z"
)

var rotatedName = lazyregexp.New(`^harmony-controller-[0-9]{8}T[0-9]{6}\.[0-9]{3}Z\.backup$`)

// RotatedName is the file name of a backup taken at now in a directory of
// backups.
func RotatedName(now time.Time) string {
	return rotatedPrefix + now.UTC().Format(rotatedLayout) + rotatedSuffix
}

// leftoverAge is how old a temporary file of a backup must be to count
// as left by a killed one, not one another run is writing.
const leftoverAge = 24 * time.Hour

// Rotate removes from dir the backups beyond the keep newest, and what a
// backup killed while writing there left; other files stay. It returns
// the names it removed.
func Rotate(dir string, keep int, now time.Time) ([]string, error) {
	if keep < 1 {
		return nil, fmt.Errorf("keep %d backups: at least 1", keep)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("rotate backups: %w", err)
	}
	var backups, removed []string
	for _, e := range entries {
		name := e.Name()
		switch {
		case !e.Type().IsRegular():
		case rotatedName.MatchString(name):
			backups = append(backups, name)
		case atomicfile.IsLeftover(name) && strings.HasPrefix(name, "."+rotatedPrefix):
			if info, err := e.Info(); err == nil && now.Sub(info.ModTime()) > leftoverAge {
				removed = append(removed, name)
			}
		}
	}
	slices.Sort(backups)
	removed = append(removed, backups[:max(len(backups)-keep, 0)]...)
	for _, name := range removed {
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			return nil, fmt.Errorf("rotate backups: %w", err)
		}
	}
	return removed, nil
}
