package etcd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/atomicfile"
	"github.com/harmonykaas/harmony/internal/etcdsnapshot"
)

// SnapshotCopies is the controller's keeping of copies of the cluster's
// snapshots, off the masters' data disks, as the agent reaches it.
type SnapshotCopies interface {
	// List is the copies the controller keeps and which it takes next.
	List(ctx context.Context) (v1.EtcdSnapshotCopyList, error)
	// Put sends the snapshot file at path, taken at takenAt; copied is
	// false when the controller did not want it (another master's came
	// first).
	Put(ctx context.Context, takenAt time.Time, path string) (copied bool, err error)
	// Get writes the controller's copy of the snapshot taken at takenAt
	// into w, at most limit bytes.
	Get(ctx context.Context, takenAt time.Time, w io.Writer, limit int64) error
}

// copyNewest sends the newest snapshot in dir to the controller, unless
// the controller has it or one new enough (every master sends its own,
// and the controller keeps one of each half interval). A failure does not
// fail the pass; it is tried again snapshotRetryAfter later, and reported
// until a copy succeeds.
func (c *Component) copyNewest(ctx context.Context, dir string, snaps snapshotState) ([]string, error) {
	newest := snaps.newest()
	now := c.cfg.Now()
	if c.cfg.Copies == nil || newest.IsZero() || !newest.After(c.copied) || now.Before(c.copyRetry) {
		return nil, c.copyErr
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.SnapshotTimeout)
	defer cancel()
	actions, err := c.copy(ctx, dir, newest)
	c.copyErr = err
	if err != nil {
		c.copyRetry = now.Add(snapshotRetryAfter)
		c.metrics.copyFailed()
		return actions, err
	}
	c.copied = newest
	return actions, nil
}

func (c *Component) copy(ctx context.Context, dir string, newest time.Time) ([]string, error) {
	list, err := c.cfg.Copies.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("ask the controller for its copies: %w", err)
	}
	// A copy the controller holds is never after nextAfter.
	name := etcdsnapshot.Name(newest)
	if !newest.After(list.NextAfter) {
		return nil, nil
	}
	copied, err := c.cfg.Copies.Put(ctx, newest, filepath.Join(dir, name))
	if err != nil {
		return nil, fmt.Errorf("copy %s to the controller: %w", name, err)
	}
	if !copied {
		return nil, nil
	}
	return []string{"copied snapshot " + name + " to the controller"}, nil
}

// fetchCopy writes the controller's copy of the snapshot taken at
// takenAt into dir under its name, as one of this member's snapshots:
// checked as it streams (size and SHA-256), 0600, in place only whole.
// It returns the file's path.
func (c *Component) fetchCopy(ctx context.Context, dir string, takenAt time.Time) (string, error) {
	if c.cfg.Copies == nil {
		return "", errors.New("this agent reaches no controller for snapshot copies")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("snapshot directory: %w", err)
	}
	limit, err := etcdsnapshot.Room(dir, 0)
	if err != nil {
		return "", fmt.Errorf("no room for the controller's copy: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.SnapshotTimeout)
	defer cancel()
	name := etcdsnapshot.Name(takenAt)
	path := filepath.Join(dir, name)
	err = atomicfile.WriteFunc(path, 0o600, func(w io.Writer) error {
		check := etcdsnapshot.NewChecker()
		if err := c.cfg.Copies.Get(ctx, takenAt, io.MultiWriter(w, check), limit); err != nil {
			return err
		}
		return check.Check()
	})
	if err != nil {
		return "", fmt.Errorf("fetch the controller's copy of %s: %w", name, err)
	}
	return path, nil
}
