// Package etcd is the reconcile.Component that runs the cluster's etcd
// member on masters and appliances, as its own service unit, with mutual
// TLS for clients and peers from the etcd CA the role carries. The agent
// owns membership: a member whose data directory survived (a node
// reimaged with its data disk moved across) restarts as itself, unless
// the cluster no longer has that member (a replacement joined as a new
// member and was rolled back): then its state is set aside (the newest
// kept) and it joins afresh; a member with an empty data directory founds the cluster with the other members
// of its role when none of them answers, and otherwise removes its stale
// namesake, joins as a learner and is promoted once it has caught up.
// A healthy voting member also removes the members of masters the
// cluster removed without their leaving it (etcd.removeMembers), and
// snapshots the keyspace onto its data disk on the role's schedule
// (snapshot.go).
package etcd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/harmonykaas/harmony/agent/datadisk"
	"github.com/harmonykaas/harmony/agent/reconcile"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// Name names the component; UnitName its service unit.
const (
	Name     = "etcd"
	UnitName = "etcd"
)

// Config is how the agent, or the lab, sets the component up. Zero fields
// take the defaults.
type Config struct {
	// Binary is etcd's path; default /usr/bin/etcd. Etcdctl is etcdctl's,
	// which restores snapshots; default /usr/bin/etcdctl.
	Binary  string
	Etcdctl string
	// ClientPort, PeerPort and MetricsPort default to 2379, 2380 and 2381
	// (metrics on 127.0.0.1 only).
	ClientPort  int
	PeerPort    int
	MetricsPort int
	// DialContext, when set, makes the connections to the members (the
	// lab dials inside a host's network namespace).
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// RequestTimeout bounds one request to a member; default 5s.
	RequestTimeout time.Duration
	// PromoteWait bounds how long one pass waits for a new learner to
	// catch up and be promoted; default 30s. The next pass goes on.
	PromoteWait time.Duration
	// SnapshotTimeout bounds taking one snapshot, and copying one to
	// the controller; default 10m.
	SnapshotTimeout time.Duration
	// Copies is where the newest snapshot is copied to, off the data
	// disk (the controller); nil: nowhere.
	Copies SnapshotCopies
	// Now is the clock snapshots are scheduled by; default time.Now.
	Now func() time.Time
}

// Component converges the etcd member.
type Component struct {
	cfg Config
	// mu serializes passes: two at once would race on membership.
	mu      sync.Mutex
	metrics *metrics
	// snapshotRetry is when a failed snapshot may be tried again: a
	// failure is often slow (a timeout), and the pass waits for it.
	snapshotRetry time.Time
	// snapshotErr is the last snapshot's failure, reported until one
	// succeeds.
	snapshotErr error
	// snapshotServed is the role's snapshotSince that a snapshot of this
	// process answered: a clock far behind the controller's would
	// otherwise never see the request covered and snapshot every pass.
	snapshotServed time.Time
	// copied is the newest snapshot the controller has, or did not want;
	// copyRetry and copyErr are as snapshotRetry and snapshotErr, for
	// copies.
	copied    time.Time
	copyRetry time.Time
	copyErr   error
	// orphansSeen is when each learner that never started, of no master
	// of the role, was first seen so (removeOrphanLearners).
	orphansSeen map[uint64]time.Time
}

var _ reconcile.Component = (*Component)(nil)

// New returns the component, with defaults filled into cfg.
func New(cfg Config) *Component {
	if cfg.Binary == "" {
		cfg.Binary = "/usr/bin/etcd"
	}
	if cfg.Etcdctl == "" {
		cfg.Etcdctl = "/usr/bin/etcdctl"
	}
	if cfg.ClientPort == 0 {
		cfg.ClientPort = 2379
	}
	if cfg.PeerPort == 0 {
		cfg.PeerPort = 2380
	}
	if cfg.MetricsPort == 0 {
		cfg.MetricsPort = 2381
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 5 * time.Second
	}
	if cfg.PromoteWait <= 0 {
		cfg.PromoteWait = 30 * time.Second
	}
	if cfg.SnapshotTimeout <= 0 {
		cfg.SnapshotTimeout = 10 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Component{cfg: cfg, metrics: newMetrics()}
}

// Name implements reconcile.Component.
func (c *Component) Name() string { return Name }

// Reconcile implements reconcile.Component.
func (c *Component) Reconcile(ctx context.Context, host *reconcile.Host, role *v1.Role) reconcile.Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := reconcile.Status{Component: Name}
	if role == nil || (role.Role != v1.RoleMaster && role.Role != v1.RoleAppliance) {
		return c.disable(ctx, host, st)
	}
	st.Units = []string{UnitName}
	if err := c.cfg.check(); err != nil {
		return c.fail(ctx, host, st, err)
	}
	// Everything from the role is checked before the node is touched, so
	// that a bad role leaves the running member as it is.
	s, err := settingsFrom(role)
	if err != nil {
		return c.fail(ctx, host, st, fmt.Errorf("role: %w", err))
	}
	actions, err := ensureCerts(host, s)
	st.Actions = append(st.Actions, actions...)
	if err != nil {
		return c.fail(ctx, host, st, err)
	}
	dataDir := host.Path(s.dataDir)
	if s.dataDisk {
		mounted, err := datadisk.IsMountPoint(dataDir)
		if err == nil && !mounted {
			err = fmt.Errorf("is not the data disk's mount (see harmony-data-disk.service): no member is started on the OS disk, where a reimage would lose it")
		}
		if err != nil {
			return c.fail(ctx, host, st, fmt.Errorf("etcd.dataDir %s: %w", s.dataDir, err))
		}
	}
	if err := ensureDataDir(dataDir); err != nil {
		return c.fail(ctx, host, st, fmt.Errorf("etcd.dataDir %s: %w", s.dataDir, err))
	}
	tlsConfig, err := clientTLS(host, s)
	if err != nil {
		return c.fail(ctx, host, st, err)
	}
	cl := newClient(tlsConfig, c.cfg.DialContext, c.cfg.RequestTimeout)
	defer cl.Close()

	rejoin, actions, err := c.restore(ctx, host, s, dataDir)
	st.Actions = append(st.Actions, actions...)
	if err != nil {
		return c.fail(ctx, host, st, err)
	}
	boot, joined, actions, err := c.membership(ctx, host, s, cl, rejoin)
	st.Actions = append(st.Actions, actions...)
	if err != nil {
		return c.fail(ctx, host, st, err)
	}
	if rejoin != nil && joined {
		if err := c.restoreDone(host, dataDir, *rejoin); err != nil {
			return c.fail(ctx, host, st, err)
		}
	}
	unit := Unit(unitParams{
		Binary: c.cfg.Binary, Name: s.name, IP: s.ip, DataDir: dataDir, PKIDir: host.Path(PKIDir),
		ClientPort: c.cfg.ClientPort, PeerPort: c.cfg.PeerPort, MetricsPort: c.cfg.MetricsPort,
		Token: s.token, Bootstrap: boot,
	})
	// Only a new CA restarts a running member: etcd reads the trusted CA
	// at start, and its own certificates on every handshake. ensureCerts
	// owed that restart before the CA file changed.
	actions, err = host.RunUnit(ctx, unit, false)
	st.Actions = append(st.Actions, actions...)
	if err != nil {
		return c.fail(ctx, host, st, err)
	}
	st.Phase = reconcile.PhaseConverged
	obs, actions := c.observe(ctx, cl, s, joined)
	st.Actions = append(st.Actions, actions...)
	st.Healthy, st.Message = obs.healthy(), obs.message(s.name)
	if obs.healthy() && len(s.lost) > 0 {
		actions, err := c.removeLost(ctx, host, cl, s, obs.status.MemberID)
		st.Actions = append(st.Actions, actions...)
		if err != nil {
			logger(host).Warn("removing the members of lost masters failed", "err", err)
			st.Message += "; removing lost members: " + err.Error()
		}
	}
	if obs.healthy() {
		actions, err := c.removeOrphanLearners(ctx, host, cl, s, obs.status.MemberID)
		st.Actions = append(st.Actions, actions...)
		if err != nil {
			logger(host).Warn("removing learners that never started failed", "err", err)
			st.Message += "; removing learners that never started: " + err.Error()
		}
	}
	// Only a healthy voting member snapshots: a learner may lag.
	if obs.healthy() || !s.snapshots.Enabled {
		actions, snaps, err := c.snapshots(ctx, cl, filepath.Join(dataDir, SnapshotDir), s.snapshots, s.snapshotSince, obs.status.DBSize)
		st.Actions = append(st.Actions, actions...)
		c.metrics.setSnapshots(snaps, err)
		if err != nil {
			logger(host).Warn("etcd snapshot failed", "err", err, "retry_in", snapshotRetryAfter)
		}
		shown := c.snapshotErr
		if shown == nil {
			shown = err // removing an old one failed
		}
		if shown != nil {
			st.Message += "; snapshot: " + shown.Error()
		}
		if s.snapshots.Enabled {
			actions, err := c.copyNewest(ctx, filepath.Join(dataDir, SnapshotDir), snaps)
			st.Actions = append(st.Actions, actions...)
			if err != nil {
				logger(host).Warn("etcd snapshot copy failed", "err", err, "retry_in", snapshotRetryAfter)
				st.Message += "; snapshot copy: " + err.Error()
			}
		}
	}
	c.metrics.set(obs, s.name, s.snapshots)
	return st
}

// disable stops a member this node must not run, asking the manager
// rather than remembering, so that a unit left by an earlier agent stops
// too. The data directory stays.
func (c *Component) disable(ctx context.Context, host *reconcile.Host, st reconcile.Status) reconcile.Status {
	c.metrics.disable()
	st.Phase, st.Healthy, st.Message = reconcile.PhaseDisabled, true, "not a control-plane node"
	actions, err := host.StopUnit(ctx, UnitName)
	if err != nil {
		st.Phase, st.Healthy, st.Message = reconcile.PhaseFailed, false, err.Error()
		return st
	}
	st.Actions = actions
	return st
}

// fail reports err; what ran before keeps running, and the message says
// whether it does.
func (c *Component) fail(ctx context.Context, host *reconcile.Host, st reconcile.Status, err error) reconcile.Status {
	st.Phase, st.Healthy, st.Message = reconcile.PhaseFailed, false, err.Error()
	if state, serr := host.Services.State(ctx, UnitName); serr == nil && state.Running {
		st.Message += fmt.Sprintf(" (etcd keeps running as before, pid %d)", state.PID)
	}
	return st
}

// ensureDataDir makes the data directory, private as etcd wants it.
func ensureDataDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	info, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !info.IsDir() {
		return errors.New("is not a directory")
	}
	if info.Mode().Perm() != 0o700 {
		return os.Chmod(dir, 0o700)
	}
	return nil
}

// hasState reports whether the data directory holds a member's state, by
// etcd's own test: a write-ahead log under member/wal. A data disk's
// lost+found, or the empty member/ a refused start leaves, is no state.
func hasState(dataDir string) (bool, error) {
	entries, err := os.ReadDir(filepath.Join(dataDir, "member", "wal"))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look for etcd state: %w", err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".wal") {
			return true, nil
		}
	}
	return false, nil
}

func logger(host *reconcile.Host) *slog.Logger {
	if host.Log != nil {
		return host.Log.With("component", Name)
	}
	return slog.New(slog.DiscardHandler)
}
