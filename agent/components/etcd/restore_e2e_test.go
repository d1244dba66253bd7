//go:build linux

package etcd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/agent/pki"
	"github.com/harmonykaas/harmony/agent/reconcile"
	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/etcdsnapshot"
	"github.com/harmonykaas/harmony/internal/testutil"
)

// restoreLab is a cluster of real members, one per network namespace,
// with a key written before a snapshot of the first and a bad write after
// it.
type restoreLab struct {
	hosts   []*labHost
	roles   map[string]*v1.Role
	ca      *pki.CA
	takenAt time.Time
}

func newRestoreLab(t *testing.T, subnet string, names ...string) *restoreLab {
	t.Helper()
	if _, err := os.Stat("/usr/bin/etcdctl"); err != nil {
		t.Fatalf("etcdctl is needed (Debian etcd-client): %v", err)
	}
	ctx := context.Background()
	id := labID(t)
	sw := labSwitch(t, id)
	lab := &restoreLab{roles: map[string]*v1.Role{}}
	masters := map[string]string{}
	for i, name := range names {
		addr := fmt.Sprintf("%s.%d", subnet, 11+i)
		masters[name] = addr
		lab.hosts = append(lab.hosts, newLabHost(t, id, sw, name, addr))
	}
	caPair := newCA(t, "etcd-ca")
	var err error
	if lab.ca, err = pki.LoadCA(caPair); err != nil {
		t.Fatal(err)
	}
	for _, h := range lab.hosts {
		lab.roles[h.name] = testRole(t, h.name, masters, caPair)
	}
	var wg sync.WaitGroup
	for _, h := range lab.hosts {
		wg.Go(func() { h.comp.Reconcile(ctx, h.host, lab.roles[h.name]) })
	}
	wg.Wait()
	first := lab.hosts[0]
	cl := first.client(t, lab.ca)
	eventually(t, 90*time.Second, "all voting members", func() error {
		members, err := cl.MemberList(ctx, first.endpoint())
		if err != nil {
			return err
		}
		return votingMembers(members, names...)
	})
	for _, h := range lab.hosts {
		lab.healthy(t, h)
	}
	if err := kvPut(ctx, cl, first.endpoint(), "written-before-the-snapshot", "kept"); err != nil {
		t.Fatal(err)
	}
	// The first member takes a snapshot (snapshots are on for the pass).
	role := lab.roles[first.name]
	role.Etcd.Snapshots = &v1.EtcdSnapshots{Interval: "1h"}
	if st := first.comp.Reconcile(ctx, first.host, role); !st.Healthy || !strings.HasPrefix(strings.Join(st.Actions, ","), "took snapshot") {
		t.Fatalf("%s snapshot pass: %+v", first.name, st)
	}
	role.Etcd.Snapshots = &v1.EtcdSnapshots{Disabled: true}
	taken := first.comp.Snapshots()
	if len(taken) != 1 {
		t.Fatalf("%s reports snapshots %v, want the one it took", first.name, taken)
	}
	lab.takenAt = taken[0]
	// The bad write a restore undoes.
	if err := kvPut(ctx, cl, first.endpoint(), "written-before-the-snapshot", "overwritten"); err != nil {
		t.Fatal(err)
	}
	if err := kvPut(ctx, cl, first.endpoint(), "written-after-the-snapshot", "lost"); err != nil {
		t.Fatal(err)
	}
	return lab
}

func (lab *restoreLab) healthy(t *testing.T, h *labHost) {
	t.Helper()
	eventually(t, 90*time.Second, h.name+" healthy", func() error {
		if st := h.comp.Reconcile(context.Background(), h.host, lab.roles[h.name]); !st.Healthy {
			return fmt.Errorf("%s: %s", h.name, st.Message)
		}
		return nil
	})
}

// ask puts the restore into every member's role.
func (lab *restoreLab) ask(r v1.EtcdRestore) {
	for _, role := range lab.roles {
		own := r
		role.Etcd.Restore = &own
	}
}

// sourceRestored tells every member the source did its part, as the
// controller does once the source reports it.
func (lab *restoreLab) sourceRestored() {
	for _, role := range lab.roles {
		role.Etcd.Restore.SourceRestored = true
	}
}

// holds checks what h's member holds, read from itself.
func (lab *restoreLab) holds(t *testing.T, h *labHost) {
	t.Helper()
	ctx := context.Background()
	cl := h.client(t, lab.ca)
	if v, err := kvGetLocal(ctx, cl, h.endpoint(), "written-before-the-snapshot"); err != nil || v != "kept" {
		t.Errorf("%s: the key written before the snapshot holds %q (%v), want the snapshot's %q", h.name, v, err, "kept")
	}
	if v, err := kvGetLocal(ctx, cl, h.endpoint(), "written-after-the-snapshot"); err == nil {
		t.Errorf("%s: the key written after the snapshot survived the restore: %q", h.name, v)
	}
}

// setAsideOf is the one state set aside in h's data directory.
func setAsideOf(t *testing.T, h *labHost) string {
	t.Helper()
	matches, err := filepath.Glob(h.host.Path(DefaultDataDir + "/" + setAsidePrefix + "before-restore-*"))
	if err != nil || len(matches) != 1 {
		t.Fatalf("%s: set-aside states %q (%v), want one", h.name, matches, err)
	}
	if _, err := os.Stat(filepath.Join(matches[0], "wal")); err != nil {
		t.Fatalf("%s: the set-aside state %s holds no WAL: %v", h.name, matches[0], err)
	}
	return matches[0]
}

// restoreAll runs a restore in order, the source first or not, and waits
// for every member to be a voting member of the restored cluster, holding
// the snapshot's data and reporting the restore; it returns that cluster's
// ID.
func (lab *restoreLab) restoreAll(t *testing.T, id string, order ...*labHost) uint64 {
	t.Helper()
	ctx := context.Background()
	for _, h := range order {
		lab.healthy(t, h)
	}
	m1 := lab.hosts[0]
	cl := m1.client(t, lab.ca)
	var names []string
	for _, h := range lab.hosts {
		names = append(names, h.name)
	}
	eventually(t, 90*time.Second, "voting members of the restored cluster", func() error {
		members, err := cl.MemberList(ctx, m1.endpoint())
		if err != nil {
			return err
		}
		return votingMembers(members, names...)
	})
	restored, err := cl.Status(ctx, m1.endpoint())
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range lab.hosts {
		status, err := cl.Status(ctx, h.endpoint())
		if err != nil || status.ClusterID != restored.ClusterID {
			t.Errorf("%s: cluster %x (%v), want the restored %x", h.name, status.ClusterID, err, restored.ClusterID)
		}
		lab.holds(t, h)
		if h.comp.Restored() != id {
			t.Errorf("%s reports restore %q done, want %s", h.name, h.comp.Restored(), id)
		}
		// One kept: a second restore's set-aside replaces the first's.
		setAsideOf(t, h)
	}
	return restored.ClusterID
}

// Three real members: a restore from the first one's snapshot brings the
// keyspace back to it on all three, as a new cluster. A member that is not
// the source sets its state aside at once and joins only once told the
// source restored; the source, once restored, stays in its cluster though
// another still serves the old one; a member refuses the old cluster
// while the source still serves it, whatever its role says; nothing is
// done twice, also by a new agent; every member keeps its old state, set
// aside.
func TestRestoreAClusterFromASnapshot(t *testing.T) {
	needLab(t, "runs three etcd members")
	ctx := context.Background()
	lab := newRestoreLab(t, "198.18.35", "m1", "m2", "m3")
	m1, m2, m3 := lab.hosts[0], lab.hosts[1], lab.hosts[2]
	before, err := m1.client(t, lab.ca).Status(ctx, m1.endpoint())
	if err != nil {
		t.Fatal(err)
	}

	// A snapshot the source does not have: the pass fails saying so, and
	// the member runs on untouched, with no record.
	pid := m1.state(t).PID
	lab.roles["m1"].Etcd.Restore = &v1.EtcdRestore{ID: "r0", Source: "m1", SnapshotTakenAt: lab.takenAt.Add(time.Second)}
	st := m1.comp.Reconcile(ctx, m1.host, lab.roles["m1"])
	if st.Phase != reconcile.PhaseFailed || !strings.Contains(st.Message, "restore r0: no snapshot taken at") {
		t.Fatalf("restore of a missing snapshot: %+v", st)
	}
	if m1.state(t).PID != pid {
		t.Fatal("a restore of a missing snapshot stopped the member")
	}
	if _, err := os.Stat(m1.host.Path(DefaultDataDir + "/" + restoreFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a restore that did not start left a record: %v", err)
	}

	// r1: the source goes first, while m2 and m3 keep the old cluster's
	// quorum.
	lab.ask(v1.EtcdRestore{ID: "r1", Source: "m1", SnapshotTakenAt: lab.takenAt})
	st = m1.comp.Reconcile(ctx, m1.host, lab.roles["m1"])
	acts := strings.Join(st.Actions, "\n")
	if st.Phase != reconcile.PhaseConverged || !strings.Contains(acts, "restored snapshot snapshot-") ||
		!strings.Contains(acts, "set aside the state of this member before restore r1") || !strings.Contains(acts, "moved the restored state into") {
		t.Fatalf("the source's restore pass: %+v", st)
	}
	lab.healthy(t, m1)
	lab.holds(t, m1)
	// Its etcd down, the source asks the others whether its member was
	// removed: the old cluster, which never had it, does not count.
	if _, err := m1.host.StopUnit(ctx, UnitName); err != nil {
		t.Fatal(err)
	}
	if st := m1.comp.Reconcile(ctx, m1.host, lab.roles["m1"]); strings.Contains(strings.Join(st.Actions, "\n"), "set aside") {
		t.Fatalf("the restored source set its state aside for the old cluster: %+v", st)
	}
	// A member that is not the source sets its state aside at once and
	// waits, without looking for a cluster, until the role says the
	// source restored.
	for range 2 {
		st = m2.comp.Reconcile(ctx, m2.host, lab.roles["m2"])
		if st.Phase != reconcile.PhaseFailed || !strings.Contains(st.Message, "it joins m1's restored cluster once the controller says m1 restored its snapshot") {
			t.Fatalf("m2 before the source restored: %+v", st)
		}
	}
	setAsideOf(t, m2)
	lab.sourceRestored()
	r1 := lab.restoreAll(t, "r1", m1, m3, m2)
	if r1 == before.ClusterID {
		t.Fatalf("the restored cluster has the old cluster's ID %x", r1)
	}

	// r2, from the same snapshot, with a role that says the source
	// restored too early: a member that goes first sets its state aside
	// and will not join the source while that still serves r1's cluster
	// (with m3).
	if err := kvPut(ctx, m1.client(t, lab.ca), m1.endpoint(), "written-after-the-snapshot", "lost again"); err != nil {
		t.Fatal(err)
	}
	lab.ask(v1.EtcdRestore{ID: "r2", Source: "m1", SnapshotTakenAt: lab.takenAt, SourceRestored: true})
	st = m2.comp.Reconcile(ctx, m2.host, lab.roles["m2"])
	if st.Phase != reconcile.PhaseFailed || !strings.Contains(st.Message, "m1 still serves the cluster this member's state was set aside from") {
		t.Fatalf("m2 before the source restored: %+v", st)
	}
	if m2.comp.Restored() != "r1" {
		t.Errorf("m2 reports restore %q done before it joined r2's cluster", m2.comp.Restored())
	}
	if r2 := lab.restoreAll(t, "r2", m1, m3, m2); r2 == r1 || r2 == before.ClusterID {
		t.Fatalf("r2's cluster %x is not new (before %x, r1 %x)", r2, before.ClusterID, r1)
	}
	cl := m1.client(t, lab.ca)
	if err := kvPut(ctx, cl, m1.endpoint(), "written-after-the-restore", "stays"); err != nil {
		t.Fatal(err)
	}

	// The role still asks for r2: nothing is done again, by this agent or
	// a new one (the record is on the data disk).
	for _, h := range lab.hosts {
		h.restartAgent(t)
		for range 2 {
			st := h.comp.Reconcile(ctx, h.host, lab.roles[h.name])
			if !st.Healthy || len(st.Actions) != 0 {
				t.Fatalf("%s after the restore: %+v, want healthy and no action", h.name, st)
			}
		}
		if h.comp.Restored() != "r2" {
			t.Errorf("%s (a new agent) reports restore %q done, want r2", h.name, h.comp.Restored())
		}
	}
	if v, err := kvGetLocal(ctx, cl, m1.endpoint(), "written-after-the-restore"); err != nil || v != "stays" {
		t.Errorf("a write after the restore: %q, %v", v, err)
	}
}

// A restore killed at each step resumes and loses nothing: killed after
// the old state was set aside and before the restored one moved in, the
// next pass restores again; killed after it moved in and before the
// record said done, the next pass leaves the restored state (and what was
// written to it) as it is.
func TestARestoreResumesAfterAKill(t *testing.T) {
	needLab(t, "runs an etcd member")
	ctx := context.Background()
	lab := newRestoreLab(t, "198.18.35", "m1")
	m1 := lab.hosts[0]
	dataDir := m1.host.Path(DefaultDataDir)
	lab.ask(v1.EtcdRestore{ID: "r1", Source: "m1", SnapshotTakenAt: lab.takenAt})

	// Killed after the set-aside: the record says started, member/ is
	// gone, the restore's working copy was never made.
	if _, err := m1.host.StopUnit(ctx, UnitName); err != nil {
		t.Fatal(err)
	}
	aside := setAsideName("before-restore-r1", time.Now())
	if err := writeRestoreRecord(dataDir, restoreRecord{ID: "r1", Stage: restoreStarted, Aside: aside}); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dataDir, "member"), filepath.Join(dataDir, aside)); err != nil {
		t.Fatal(err)
	}
	m1.restartAgent(t)
	st := m1.comp.Reconcile(ctx, m1.host, lab.roles["m1"])
	if acts := strings.Join(st.Actions, "\n"); st.Phase != reconcile.PhaseConverged || strings.Contains(acts, "set aside") ||
		!strings.Contains(acts, "moved the restored state into") {
		t.Fatalf("the pass after a kill after the set-aside: %+v", st)
	}
	lab.healthy(t, m1)
	lab.holds(t, m1)
	if got := setAsideOf(t, m1); filepath.Base(got) != aside {
		t.Errorf("set aside %s, want %s", got, aside)
	}

	// Killed after the restored state moved in: the record still says
	// started. A write since then must survive the next pass.
	cl := m1.client(t, lab.ca)
	if err := kvPut(ctx, cl, m1.endpoint(), "written-after-the-restore", "stays"); err != nil {
		t.Fatal(err)
	}
	if err := writeRestoreRecord(dataDir, restoreRecord{ID: "r1", Stage: restoreStarted, Aside: aside}); err != nil {
		t.Fatal(err)
	}
	m1.restartAgent(t)
	st = m1.comp.Reconcile(ctx, m1.host, lab.roles["m1"])
	if !st.Healthy || len(st.Actions) != 0 {
		t.Fatalf("the pass after a kill after the move: %+v, want healthy and no action", st)
	}
	if v, err := kvGetLocal(ctx, cl, m1.endpoint(), "written-after-the-restore"); err != nil || v != "stays" {
		t.Errorf("a write after the restore: %q, %v", v, err)
	}
	if rec, err := readRestoreRecord(dataDir); err != nil || rec.Stage != restoreDone {
		t.Errorf("record %+v, %v; want done", rec, err)
	}
	if m1.comp.Restored() != "r1" {
		t.Errorf("reports restore %q done, want r1", m1.comp.Restored())
	}
}

// The masters lost their snapshots: a restore from the controller's copy
// fetches it onto the source's data disk, checked as it streams, and
// restores it as the member's own. A damaged copy fails the pass and
// touches nothing: the member serves on, no file is left, nothing is
// recorded.
func TestARestoreFromTheControllersCopy(t *testing.T) {
	needLab(t, "runs an etcd member")
	ctx := context.Background()
	lab := newRestoreLab(t, "198.18.35", "m1")
	m1 := lab.hosts[0]
	dir := m1.host.Path(DefaultDataDir + "/" + SnapshotDir)
	file := filepath.Join(dir, etcdsnapshot.Name(lab.takenAt))
	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	damaged := slices.Clone(good)
	damaged[len(damaged)/2] ^= 1
	copies := &controllerCopies{copies: map[time.Time][]byte{lab.takenAt: damaged}}
	m1.comp = New(Config{DialContext: testutil.NetnsDialer(m1.ns), Copies: copies})
	lab.ask(v1.EtcdRestore{ID: "r1", Source: "m1", SnapshotTakenAt: lab.takenAt, FromController: true})

	st := m1.comp.Reconcile(ctx, m1.host, lab.roles["m1"])
	if st.Phase != reconcile.PhaseFailed || !strings.Contains(st.Message, "fetch the controller's copy of "+etcdsnapshot.Name(lab.takenAt)) ||
		!strings.Contains(st.Message, "SHA-256") {
		t.Fatalf("a pass with a damaged copy: %+v, want it failed on the copy's SHA-256", st)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("the snapshot directory after a damaged copy: %v, %v; want it empty", entries, err)
	}
	if rec, err := readRestoreRecord(m1.host.Path(DefaultDataDir)); err != nil || rec.ID != "" {
		t.Errorf("restore record after a damaged copy: %+v, %v; want none", rec, err)
	}
	if v, err := kvGetLocal(ctx, m1.client(t, lab.ca), m1.endpoint(), "written-after-the-snapshot"); err != nil || v != "lost" {
		t.Errorf("the member after a damaged copy: %q, %v; want it serving as before", v, err)
	}

	copies.copies[lab.takenAt] = good
	st = m1.comp.Reconcile(ctx, m1.host, lab.roles["m1"])
	acts := strings.Join(st.Actions, "\n")
	if !strings.Contains(acts, "fetched the controller's copy of "+etcdsnapshot.Name(lab.takenAt)) || !strings.Contains(acts, "restored snapshot") {
		t.Fatalf("the pass with the copy: %+v, want it fetched and restored", st)
	}
	lab.healthy(t, m1)
	lab.holds(t, m1)
	if info, err := os.Stat(file); err != nil || info.Mode().Perm() != 0o600 || info.Size() != int64(len(good)) {
		t.Errorf("the fetched copy on the data disk: %v, %v; want %d bytes, 0600", info, err, len(good))
	}
	if m1.comp.Restored() != "r1" {
		t.Errorf("reports restore %q done, want r1", m1.comp.Restored())
	}
}
