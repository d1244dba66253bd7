package etcd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/internal/atomicfile"
)

// A restore (the role's etcd.restore) brings the cluster's keyspace back
// from a snapshot of its source master. The source restores it with
// etcdctl as a new cluster of one member; every other master stops its
// member and sets its state aside at once, so the old cluster loses its
// quorum, and joins the source's cluster as a new member once the role
// says the source is done (membership, with the restore's record as
// rejoin). Both sides keep the state they had, set aside on the data disk
// (setAside), so a restore loses nothing that an admin cannot look at
// again.
//
// Each step is recorded in restoreFile before the next, in the data
// directory, so that a kill at any point resumes where it stopped, and
// the record moves with the data disk in an upgrade by reimage: a role
// still asking for a restore never makes a member do it twice.

// restoreFile is the record's name in the data directory.
const restoreFile = "harmony-restore.json"

// restoreTmp is where the source restores the snapshot, in the data
// directory, before the restored state replaces the member's.
const restoreTmp = "member.restoring"

// Stages of a restore on one member.
const (
	// restoreStarted: the old state is being set aside (to Aside); the
	// source then moves the restored state in, another member joins.
	restoreStarted = "started"
	// restoreDone: this member's part is done.
	restoreDone = "done"
)

// restoreRecord is how far this member got in the restore named ID.
type restoreRecord struct {
	ID    string `json:"id"`
	Stage string `json:"stage"`
	// Aside is the name the state before the restore is set aside under
	// in the data directory; empty when there was none.
	Aside string `json:"aside,omitempty"`
	// OldCluster is the cluster ID of that state (0: unknown): a member
	// joining after the restore refuses that cluster.
	OldCluster uint64 `json:"oldCluster,omitempty"`
}

func readRestoreRecord(dataDir string) (restoreRecord, error) {
	var r restoreRecord
	if found, err := readRecord(filepath.Join(dataDir, restoreFile), &r); err != nil || !found {
		return restoreRecord{}, err
	}
	switch {
	case r.Stage != restoreStarted && r.Stage != restoreDone:
		return r, fmt.Errorf("restore record %s: stage %q is neither %q nor %q", restoreFile, truncate(r.Stage), restoreStarted, restoreDone)
	case r.Aside != "" && (filepath.Base(r.Aside) != r.Aside || r.Aside == setAsidePrefix || !strings.HasPrefix(r.Aside, setAsidePrefix)):
		return r, fmt.Errorf("restore record %s: aside %q is not a set-aside state's name", restoreFile, truncate(r.Aside))
	}
	return r, nil
}

func writeRestoreRecord(dataDir string, r restoreRecord) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(dataDir, restoreFile), append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("record restore %s: %w", r.ID, err)
	}
	return nil
}

// restore does this member's part of the role's restore up to where the
// membership takes over. It returns the record the membership joins with
// (rejoin) while this member, not the source, has yet to join the
// restored cluster; nil otherwise. A restore already done is not done
// again.
func (c *Component) restore(ctx context.Context, host *reconcile.Host, s settings, dataDir string) (rejoin *restoreRecord, actions []string, err error) {
	rec, err := readRestoreRecord(dataDir)
	if err != nil {
		return nil, nil, err
	}
	if rec.Stage == restoreDone {
		c.metrics.setRestored(rec.ID)
	}
	if s.restore == nil || rec.ID == s.restore.ID && rec.Stage == restoreDone {
		return nil, nil, nil
	}
	r := *s.restore
	source := r.Source == s.name
	log := logger(host).With("restore", r.ID, "source", r.Source, "snapshot", r.SnapshotTakenAt)
	if rec.ID != r.ID {
		if source {
			// The snapshot is restored before anything is stopped: a
			// missing or damaged one leaves the member as it was.
			done, err := c.restoreSnapshot(ctx, host, s, dataDir, r.SnapshotTakenAt)
			actions = append(actions, done...)
			if err != nil {
				return nil, actions, fmt.Errorf("restore %s: %w", r.ID, err)
			}
		}
		stopped, err := host.StopUnit(ctx, UnitName)
		actions = append(actions, stopped...)
		if err != nil {
			return nil, actions, err
		}
		rec = restoreRecord{ID: r.ID, Stage: restoreStarted}
		if _, err := os.Stat(filepath.Join(dataDir, "member")); err == nil {
			rec.Aside = setAsideName("before-restore-"+r.ID, c.cfg.Now())
			if id, err := readWALIdentity(dataDir); err == nil {
				rec.OldCluster = id.ClusterID
			}
		}
		if err := writeRestoreRecord(dataDir, rec); err != nil {
			return nil, actions, err
		}
		log.Warn("restoring etcd from a snapshot: this member's state is set aside", "kept", rec.Aside, "oldCluster", fmt.Sprintf("%x", rec.OldCluster))
	}
	// Started: the record names where the old state goes, so a pass that
	// finds it still in place moves it, and one that finds it moved knows
	// that member/ is the new state.
	if rec.Aside != "" {
		_, err := os.Stat(filepath.Join(dataDir, rec.Aside))
		if errors.Is(err, os.ErrNotExist) {
			done, err := c.setAside(ctx, host, s, rec.Aside, "this member before restore "+r.ID)
			actions = append(actions, done...)
			if err != nil {
				return nil, actions, err
			}
		} else if err != nil {
			return nil, actions, fmt.Errorf("restore %s: %w", r.ID, err)
		}
	}
	has, err := hasState(dataDir)
	if err != nil {
		return nil, actions, err
	}
	if source && !has {
		done, err := c.moveRestored(ctx, host, s, dataDir, r.SnapshotTakenAt)
		actions = append(actions, done...)
		if err != nil {
			return nil, actions, fmt.Errorf("restore %s: %w", r.ID, err)
		}
		has = true
	}
	if !has && !r.SourceRestored {
		return nil, actions, fmt.Errorf("restore %s: this member's state is set aside; it joins %s's restored cluster once the controller says %s restored its snapshot",
			r.ID, r.Source, r.Source)
	}
	if !has {
		return &rec, actions, nil
	}
	// The source's restored state, or the state another member joined
	// the restored cluster with before a kill.
	return nil, actions, c.restoreDone(host, dataDir, rec)
}

// restoreDone records that this member's part of rec is done.
func (c *Component) restoreDone(host *reconcile.Host, dataDir string, rec restoreRecord) error {
	rec.Stage = restoreDone
	if err := writeRestoreRecord(dataDir, rec); err != nil {
		return err
	}
	c.metrics.setRestored(rec.ID)
	logger(host).Warn("this member's part of the etcd restore is done", "restore", rec.ID)
	return nil
}

// restoreSnapshot restores the snapshot taken at takenAt into restoreTmp
// as a cluster of this member alone. The cluster token names the restore,
// so that the cluster it makes has an ID of its own, even from the same
// snapshot twice.
func (c *Component) restoreSnapshot(ctx context.Context, host *reconcile.Host, s settings, dataDir string, takenAt time.Time) ([]string, error) {
	var actions []string
	dir := filepath.Join(dataDir, SnapshotDir)
	file, err := findSnapshot(dir, takenAt)
	if errors.Is(err, errNoSnapshot) && s.restore.FromController {
		// The masters lost their own: the controller's copy is fetched
		// first, and restores as the member's own would.
		file, err = c.fetchCopy(ctx, dir, takenAt)
		if err == nil {
			actions = append(actions, "fetched the controller's copy of "+filepath.Base(file))
		}
	}
	if err != nil {
		return actions, err
	}
	tmp := filepath.Join(dataDir, restoreTmp)
	if err := os.RemoveAll(tmp); err != nil {
		return nil, fmt.Errorf("remove an unfinished restore: %w", err)
	}
	self := peerURL(s.ip, c.cfg.PeerPort)
	cmd := exec.CommandContext(ctx, c.cfg.Etcdctl, "snapshot", "restore", file,
		"--name", s.name, "--initial-cluster", s.name+"="+self, "--initial-advertise-peer-urls", self,
		"--initial-cluster-token", s.token+"-restore-"+s.restore.ID, "--data-dir", tmp)
	cmd.Env = []string{"ETCDCTL_API=3"}
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(tmp)
		return actions, fmt.Errorf("etcdctl snapshot restore %s: %w: %s", filepath.Base(file), err, truncate(string(bytes.TrimSpace(out))))
	}
	return append(actions, "restored snapshot "+filepath.Base(file)+" into "+filepath.Join(s.dataDir, restoreTmp)), nil
}

// moveRestored moves the restored state into place as the member's, and
// records how the member starts: from its state, alone.
func (c *Component) moveRestored(ctx context.Context, host *reconcile.Host, s settings, dataDir string, takenAt time.Time) ([]string, error) {
	tmp := filepath.Join(dataDir, restoreTmp)
	if _, err := os.Stat(filepath.Join(tmp, "member")); errors.Is(err, os.ErrNotExist) {
		// Killed before the restore finished: it is done again.
		if _, err := c.restoreSnapshot(ctx, host, s, dataDir, takenAt); err != nil {
			return nil, err
		}
	}
	// A member/ without state (a refused start's) is in the way.
	if err := os.RemoveAll(filepath.Join(dataDir, "member")); err != nil {
		return nil, err
	}
	if err := os.Rename(filepath.Join(tmp, "member"), filepath.Join(dataDir, "member")); err != nil {
		return nil, fmt.Errorf("move the restored state into place: %w", err)
	}
	if err := syncDir(dataDir); err != nil {
		return nil, fmt.Errorf("move the restored state into place: %w", err)
	}
	if err := os.RemoveAll(tmp); err != nil {
		return nil, err
	}
	actions := []string{"moved the restored state into " + filepath.Join(s.dataDir, "member")}
	changed, err := writeBootstrap(host.Path(BootstrapFile), restartBootstrap(s, c.cfg.PeerPort))
	if err != nil {
		return actions, err
	}
	if changed {
		actions = append(actions, "wrote "+BootstrapFile)
	}
	return actions, nil
}

// findSnapshot is the path of the snapshot in dir taken at takenAt.
func findSnapshot(dir string, takenAt time.Time) (string, error) {
	files, _, err := listSnapshots(dir)
	if err != nil {
		return "", err
	}
	for _, f := range files {
		if f.taken.Equal(takenAt) {
			return filepath.Join(dir, f.name), nil
		}
	}
	return "", fmt.Errorf("%w taken at %s in %s (%d there)", errNoSnapshot, takenAt.UTC().Format(time.RFC3339), dir, len(files))
}

// errNoSnapshot: the snapshot a restore names is not on the data disk.
var errNoSnapshot = errors.New("no snapshot")
