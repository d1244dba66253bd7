package body

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/harmonykaas/harmony/internal/procfs"
)

// Mount is one line of the mount table.
type Mount = procfs.Mount

// Mounts reads this process's mount table.
func Mounts() ([]Mount, error) { return procfs.Mounts() }

// MountAt returns the topmost mount whose mount point is exactly dir.
func MountAt(dir string) (Mount, bool, error) { return procfs.MountAt(dir) }

// MountsUnder returns the mount points at or below dir, deepest first.
func MountsUnder(dir string) ([]string, error) {
	ms, err := Mounts()
	if err != nil {
		return nil, err
	}
	dir = filepath.Clean(dir)
	var points []string
	for _, m := range ms {
		if m.Point == dir || strings.HasPrefix(m.Point, dir+"/") {
			points = append(points, m.Point)
		}
	}
	// Deepest first; a path mounted twice appears twice and is unmounted
	// twice.
	sort.SliceStable(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	return points, nil
}

// unmountAll unmounts everything at or below dir. A busy mount is retried
// for a few seconds: a process that just died may still hold it.
func unmountAll(ctx context.Context, dir string) error {
	points, err := MountsUnder(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range points {
		if err := unmount(ctx, p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func unmount(ctx context.Context, point string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := syscall.Unmount(point, 0)
		switch {
		case err == nil, errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.ENOENT):
			// EINVAL: no longer a mount point.
			return nil
		case errors.Is(err, syscall.EBUSY) && time.Now().Before(deadline):
			if err := sleep(ctx, 100*time.Millisecond); err != nil {
				return fmt.Errorf("unmount %s: %w", point, err)
			}
		default:
			return fmt.Errorf("unmount %s: %w", point, err)
		}
	}
}

// sleep waits for d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
