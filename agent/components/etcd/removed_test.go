//go:build linux

package etcd

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/agent/reconcile"
)

// An upgrade replaced master m2 by a VM that joined etcd as a new member
// (the fresh-disk path removes the old member first), and the upgrade was
// rolled back: the new VM is gone, its member registered and dead, and the
// old VM is back with the state of the member that was removed. Its agent
// sets that state aside (kept), removes the dead namesake and joins
// afresh, with the cluster's data.
func TestRemovedMemberRejoinsAfterARollback(t *testing.T) {
	ctx := context.Background()
	hosts, masters, caPair, ca, lead, _ := threeMembers(t, "198.18.33.%d")
	m2 := hosts["m2"]
	role := testRole(t, "m2", masters, caPair)
	cl := lead.client(t, ca)
	if err := kvPut(ctx, cl, lead.endpoint(), "before-the-upgrade", "kept"); err != nil {
		t.Fatal(err)
	}
	old, err := m2.client(t, ca).Status(ctx, m2.endpoint())
	if err != nil {
		t.Fatal(err)
	}
	dataDir := m2.host.Path(DefaultDataDir)
	oldDisk, newDisk := dataDir+".old-vm", dataDir+".new-vm"

	// The old VM powers off and keeps its disk; the new one starts with an
	// empty disk and joins as a new member.
	if err := m2.sup.Stop(ctx, UnitName); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dataDir, oldDisk); err != nil {
		t.Fatal(err)
	}
	st := m2.comp.Reconcile(ctx, m2.host, role)
	if !st.Healthy || !slices.Contains(st.Actions, "removed stale member "+hexID(old.MemberID)) {
		t.Fatalf("the new VM's pass: %+v", st)
	}
	replacement, err := m2.client(t, ca).Status(ctx, m2.endpoint())
	if err != nil {
		t.Fatal(err)
	}

	// The rollback: the new VM is destroyed, the old one powers on with
	// its disk.
	if err := m2.sup.Stop(ctx, UnitName); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dataDir, newDisk); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(oldDisk, dataDir); err != nil {
		t.Fatal(err)
	}
	// The identity the agent reads from each disk's WAL is the member
	// etcd says it ran as.
	for dir, want := range map[string]uint64{dataDir: old.MemberID, newDisk: replacement.MemberID} {
		id, err := readWALIdentity(dir)
		if err != nil || id.MemberID != want || id.ClusterID != old.ClusterID {
			t.Fatalf("WAL identity of %s: %+v, %v; want member %x of cluster %x", dir, id, err, want, old.ClusterID)
		}
	}

	// A state set aside by an earlier rollback: only the newest is kept.
	const earlier = "member.removed-1-20200101t000000"
	if err := os.MkdirAll(filepath.Join(dataDir, earlier, "wal"), 0o700); err != nil {
		t.Fatal(err)
	}

	st = m2.comp.Reconcile(ctx, m2.host, role)
	t.Logf("the old VM's pass: %v (%s)", st.Actions, st.Message)
	if !st.Healthy || st.Phase != reconcile.PhaseConverged {
		t.Fatalf("the old VM's pass: %+v", st)
	}
	back, err := m2.client(t, ca).Status(ctx, m2.endpoint())
	if err != nil {
		t.Fatal(err)
	}
	if back.MemberID == old.MemberID || back.MemberID == replacement.MemberID || back.ClusterID != old.ClusterID {
		t.Fatalf("the old VM came back as %x of cluster %x (old %x, replacement %x, cluster %x)",
			back.MemberID, back.ClusterID, old.MemberID, replacement.MemberID, old.ClusterID)
	}
	if !strings.HasPrefix(st.Actions[0], "set aside the state of removed member "+hexID(old.MemberID)+" in "+DefaultDataDir+"/member.removed-"+hexID(old.MemberID)+"-") ||
		!slices.Contains(st.Actions, "removed stale member "+hexID(replacement.MemberID)) ||
		!slices.Contains(st.Actions, "added learner "+hexID(back.MemberID)) ||
		!slices.Contains(st.Actions, "removed the older set-aside state "+earlier) {
		t.Errorf("the old VM's actions: %q", st.Actions)
	}
	if _, err := os.Stat(filepath.Join(dataDir, earlier)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the earlier set-aside state is still there: %v", err)
	}
	members, err := cl.MemberList(ctx, lead.endpoint())
	if err != nil {
		t.Fatal(err)
	}
	if err := votingMembers(members, "m1", "m2", "m3"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "m2 holding the cluster's data", func() error {
		_, err := kvGetLocal(ctx, m2.client(t, ca), m2.endpoint(), "before-the-upgrade")
		return err
	})
	// The removed member's state is kept, whole, beside the new one.
	aside, err := filepath.Glob(filepath.Join(dataDir, "member.removed-"+hexID(old.MemberID)+"-*"))
	if err != nil || len(aside) != 1 {
		t.Fatalf("set-aside state: %q, %v", aside, err)
	}
	wals, err := filepath.Glob(filepath.Join(aside[0], "wal", "*.wal"))
	if err != nil || len(wals) == 0 {
		t.Fatalf("the set-aside state has no WAL: %q, %v", wals, err)
	}
	f, err := os.Open(wals[len(wals)-1])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if id, err := decodeWALHead(f); err != nil || id.MemberID != old.MemberID {
		t.Errorf("the set-aside WAL is of %+v, %v; want member %x", id, err, old.MemberID)
	}
	if st := m2.comp.Reconcile(ctx, m2.host, role); len(st.Actions) != 0 || !st.Healthy {
		t.Errorf("the pass after: %+v", st)
	}
}

// Only set-aside states are removed, and never the one to keep: the
// member's own state, other directories and files, even one named like a
// set-aside state, stay.
func TestRemoveOlderSetAsidesRemovesOnlyThem(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"member/wal", "member.removed-a-20200101t000000/wal", "member.removed-b-20210101t000000", "member.removed-c-20220101t000000", "other"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "member.removed-file"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	actions, err := removeOlderSetAsides(dir, "member.removed-c-20220101t000000")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if want := []string{"member", "member.removed-c-20220101t000000", "member.removed-file", "other"}; !slices.Equal(left, want) {
		t.Errorf("left %q, want %q", left, want)
	}
	if want := []string{"removed the older set-aside state member.removed-a-20200101t000000", "removed the older set-aside state member.removed-b-20210101t000000"}; !slices.Equal(actions, want) {
		t.Errorf("actions %q, want %q", actions, want)
	}
}
