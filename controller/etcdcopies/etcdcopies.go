// Package etcdcopies keeps the controller's copies of its tenant clusters'
// etcd snapshots. Every master keeps its own snapshots on its data disk;
// the masters' disks usually share a datastore, and a cluster that lost
// it lost them all. A copy on the controller's disk survives that.
//
// A cluster's copies are files in one directory of the controller's data
// directory, named as the agent names its snapshots (etcdsnapshot.Name),
// so that a copy put on a master's data disk is one of its snapshots and
// restores with `harmonyctl cluster restore`. They are written 0600: a
// snapshot holds every secret of its cluster.
package etcdcopies

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/atomicfile"
	"github.com/harmonykaas/harmony/internal/etcdsnapshot"
	"github.com/harmonykaas/harmony/internal/lazyregexp"
)

// Dir is where, under the controller's data directory, the copies are.
const Dir = "etcd-snapshots"

// Cluster names whose copies: the name and the UID, so that a cluster
// made again under a deleted one's name never mixes its copies with
// those the deleted cluster left.
type Cluster struct {
	Name string
	UID  string
}

var safeName = lazyregexp.New(`^[a-z0-9]([a-z0-9-]{0,62})$`)

func (c Cluster) dirName() (string, error) {
	if !safeName.MatchString(c.Name) || !safeName.MatchString(c.UID) {
		return "", fmt.Errorf("cluster %.64q (uid %.64q) cannot name a directory", c.Name, c.UID)
	}
	return v1.ClusterInstance(c.Name, c.UID), nil
}

// Rule is what a cluster's spec says of its copies.
type Rule struct {
	// Keep is how many copies are kept, the newest.
	Keep int
	// Gap is how much newer than the newest copy a snapshot must be to
	// be copied: every master sends its snapshots, and one of each
	// interval is enough.
	Gap time.Duration
	// Want, when set, asks for a copy of a snapshot taken after it,
	// whatever the gap, until one is kept: the answer to a snapshot
	// asked for by hand.
	Want time.Time
}

// NotWantedError refuses a copy older than the rule asks for.
type NotWantedError struct {
	TakenAt, NextAfter time.Time
}

func (e *NotWantedError) Error() string {
	return fmt.Sprintf("a snapshot taken at %s is not copied: the controller takes one taken after %s",
		e.TakenAt.Format(time.RFC3339), e.NextAfter.Format(time.RFC3339))
}

// ErrBadSnapshot wraps what is wrong with a copy sent: not a whole
// snapshot, or not the size the sender said; ErrNoRoom a copy the
// controller's disk has no room for.
var (
	ErrBadSnapshot = errors.New("not a whole etcd snapshot")
	ErrNoRoom      = errors.New("no room for the copy")
)

// Store is the copies of every cluster.
type Store struct {
	dir string
	// mu orders the check that a copy is wanted with its rename, the
	// pruning after it and Put's kept, and List after all of them; the
	// upload itself runs outside it.
	mu sync.Mutex
}

// Open returns the store under dataDir, made 0700 if missing.
func Open(dataDir string) (*Store, error) {
	dir := filepath.Join(dataDir, Dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("etcd snapshot copies: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("etcd snapshot copies: %w", err)
	}
	// No upload runs yet: what one left behind, cut short by a kill, goes.
	leftovers, err := filepath.Glob(filepath.Join(dir, "*", ".*"))
	if err != nil {
		return nil, err
	}
	for _, l := range leftovers {
		if atomicfile.IsLeftover(filepath.Base(l)) {
			if err := os.Remove(l); err != nil {
				return nil, fmt.Errorf("etcd snapshot copies: %w", err)
			}
		}
	}
	return &Store{dir: dir}, nil
}

// List returns the cluster's copies, oldest first, and when a snapshot
// must have been taken after for rule to take a copy of it. A copy Put
// keeps shows here only once its kept has returned.
func (s *Store) List(c Cluster, rule Rule) (v1.EtcdSnapshotCopyList, error) {
	dir, err := s.clusterDir(c)
	if err != nil {
		return v1.EtcdSnapshotCopyList{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	items, err := list(dir)
	if err != nil {
		return v1.EtcdSnapshotCopyList{}, err
	}
	return v1.EtcdSnapshotCopyList{Items: items, NextAfter: nextAfter(items, rule)}, nil
}

func nextAfter(items []v1.EtcdSnapshotCopy, rule Rule) time.Time {
	if len(items) == 0 {
		return time.Time{}
	}
	newest := items[len(items)-1].TakenAt
	next := newest.Add(rule.Gap)
	if !rule.Want.IsZero() && !newest.After(rule.Want) && rule.Want.Before(next) {
		next = rule.Want
	}
	return next
}

// Put copies the snapshot taken at takenAt from body, when rule wants it
// (else *NotWantedError, before body is read): its size and SHA-256 are
// checked as it streams, and it is kept only whole, under its name, once
// on disk. Then the oldest copies beyond rule.Keep go. size is what the
// sender says the snapshot's size is (-1 when it does not); the copy must
// leave a tenth of the disk free (else ErrNoRoom). kept, unless nil, runs
// once the copy is kept and before List shows it: only the sender knows
// whose it is (masters asked at once take theirs to the same second), so
// what kept records of that is there for whoever lists it.
func (s *Store) Put(c Cluster, takenAt time.Time, body io.Reader, size int64, rule Rule, kept func(v1.EtcdSnapshotCopy)) (v1.EtcdSnapshotCopy, error) {
	dir, err := s.clusterDir(c)
	if err != nil {
		return v1.EtcdSnapshotCopy{}, err
	}
	if err := s.wanted(dir, takenAt, rule); err != nil {
		return v1.EtcdSnapshotCopy{}, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return v1.EtcdSnapshotCopy{}, fmt.Errorf("etcd snapshot copies of %s: %w", c.Name, err)
	}
	// A tenth of the disk stays free (the store beside the copies grows
	// too); etcd's own rule, room for its database twice, is a member's.
	limit, err := etcdsnapshot.Room(dir, 0)
	if err != nil {
		return v1.EtcdSnapshotCopy{}, fmt.Errorf("%w: %w", ErrNoRoom, err)
	}
	if size > limit {
		return v1.EtcdSnapshotCopy{}, fmt.Errorf("%w: it is %d bytes; the disk takes at most %d", ErrNoRoom, size, limit)
	}
	var n int64
	locked := false
	defer func() {
		if locked {
			s.mu.Unlock()
		}
	}()
	path := filepath.Join(dir, etcdsnapshot.Name(takenAt))
	err = atomicfile.WriteFunc(path, 0o600, func(w io.Writer) error {
		check := etcdsnapshot.NewChecker()
		var err error
		n, err = io.Copy(io.MultiWriter(w, check), io.LimitReader(body, limit+1))
		switch {
		case err != nil:
			return fmt.Errorf("after %d bytes: %w", n, err)
		case n > limit:
			return fmt.Errorf("%w: larger than the %d bytes the disk takes", ErrNoRoom, limit)
		case size >= 0 && n != size:
			return fmt.Errorf("%w: %d bytes, where the sender said %d", ErrBadSnapshot, n, size)
		}
		if err := check.Check(); err != nil {
			return fmt.Errorf("%w: %w", ErrBadSnapshot, err)
		}
		// Another master's copy may have come in meanwhile: asked again
		// under the lock, which the rename and pruning keep.
		s.mu.Lock()
		locked = true
		return s.wantedLocked(dir, takenAt, rule)
	})
	if err != nil {
		return v1.EtcdSnapshotCopy{}, err
	}
	if err := prune(dir, rule.Keep); err != nil {
		return v1.EtcdSnapshotCopy{}, err
	}
	copied := v1.EtcdSnapshotCopy{TakenAt: takenAt, Bytes: n}
	if kept != nil {
		kept(copied)
	}
	return copied, nil
}

func (s *Store) wanted(dir string, takenAt time.Time, rule Rule) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wantedLocked(dir, takenAt, rule)
}

func (s *Store) wantedLocked(dir string, takenAt time.Time, rule Rule) error {
	items, err := list(dir)
	if err != nil {
		return err
	}
	if next := nextAfter(items, rule); len(items) > 0 && !takenAt.After(next) {
		return &NotWantedError{TakenAt: takenAt, NextAfter: next}
	}
	return nil
}

// Open opens the cluster's copy of the snapshot taken at takenAt, and
// says its size; an error wrapping os.ErrNotExist when there is none.
func (s *Store) Open(c Cluster, takenAt time.Time) (*os.File, int64, error) {
	dir, err := s.clusterDir(c)
	if err != nil {
		return nil, 0, err
	}
	f, err := os.Open(filepath.Join(dir, etcdsnapshot.Name(takenAt)))
	if err != nil {
		return nil, 0, fmt.Errorf("the copy of %s: %w", takenAt.Format(time.RFC3339), err)
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, info.Size(), nil
}

// Remove removes the cluster's copies (a cluster deleted with --purge).
func (s *Store) Remove(c Cluster) error {
	dir, err := s.clusterDir(c)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return os.RemoveAll(dir)
}

func (s *Store) clusterDir(c Cluster) (string, error) {
	name, err := c.dirName()
	if err != nil {
		return "", err
	}
	return filepath.Join(s.dir, name), nil
}

// list reads a cluster's copies, oldest first.
func list(dir string) ([]v1.EtcdSnapshotCopy, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list etcd snapshot copies: %w", err)
	}
	var items []v1.EtcdSnapshotCopy
	for _, e := range entries {
		taken, ok := etcdsnapshot.ParseName(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		items = append(items, v1.EtcdSnapshotCopy{TakenAt: taken, Bytes: info.Size()})
	}
	slices.SortFunc(items, func(a, b v1.EtcdSnapshotCopy) int { return a.TakenAt.Compare(b.TakenAt) })
	return items, nil
}

func prune(dir string, keep int) error {
	items, err := list(dir)
	if err != nil {
		return err
	}
	for _, old := range items[:max(len(items)-keep, 0)] {
		if err := os.Remove(filepath.Join(dir, etcdsnapshot.Name(old.TakenAt))); err != nil {
			return fmt.Errorf("remove an old etcd snapshot copy: %w", err)
		}
	}
	return nil
}

// File is one copy on disk, named as under the data directory: its
// cluster's directory (NAME-UID) and its file.
type File struct {
	Cluster string `json:"cluster"`
	Name    string `json:"name"`
	Bytes   int64  `json:"bytes"`
}

var safeInstance = lazyregexp.New(`^[a-z0-9]([a-z0-9-]{0,127})$`)

// Check says whether f's names could be a copy's, so that a name from
// outside never leaves the copies' directory.
func (f File) Check() error {
	if !safeInstance.MatchString(f.Cluster) {
		return fmt.Errorf("%.140q cannot name a cluster's copies", f.Cluster)
	}
	if _, ok := etcdsnapshot.ParseName(f.Name); !ok {
		return fmt.Errorf("%.140q is not an etcd snapshot's name", f.Name)
	}
	return nil
}

// Path is where f is under dataDir, once its names pass Check.
func (f File) Path(dataDir string) (string, error) {
	if err := f.Check(); err != nil {
		return "", err
	}
	return filepath.Join(dataDir, Dir, f.Cluster, f.Name), nil
}

// Files lists the copies under dataDir, each cluster's (deleted ones'
// too) oldest first. It only reads: a controller may be running.
func Files(dataDir string) ([]File, error) {
	clusters, err := os.ReadDir(filepath.Join(dataDir, Dir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list etcd snapshot copies: %w", err)
	}
	var files []File
	for _, c := range clusters {
		if !c.IsDir() || !safeInstance.MatchString(c.Name()) {
			continue
		}
		items, err := list(filepath.Join(dataDir, Dir, c.Name()))
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			files = append(files, File{Cluster: c.Name(), Name: etcdsnapshot.Name(it.TakenAt), Bytes: it.Bytes})
		}
	}
	return files, nil
}

// Install moves the file at from (on the same file system) into place as
// f, unless a copy of that name is there already: a snapshot's name is
// when it was taken, so that one is the same snapshot, and it stays.
func Install(dataDir string, f File, from string) error {
	path, err := f.Path(dataDir)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(path); err == nil {
		return os.Remove(from)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("etcd snapshot copies of %s: %w", f.Cluster, err)
	}
	if err := os.Rename(from, path); err != nil {
		return fmt.Errorf("etcd snapshot copy %s/%s: %w", f.Cluster, f.Name, err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
