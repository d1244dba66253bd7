package etcd

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
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
	name := etcdsnapshot.Name(newest)
	if !newest.After(list.NextAfter) || slices.ContainsFunc(list.Items, func(i v1.EtcdSnapshotCopy) bool { return i.TakenAt.Equal(newest) }) {
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
