package agent

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/agent/reconcile"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// While the role says Leave the node reports Leaving with each step's
// progress, then Left once every step has left, and its etcd member while
// it still is one; the report validates.
func TestReportWhileLeaving(t *testing.T) {
	for _, tc := range []struct {
		phases []string
		want   string
		member string
	}{
		{[]string{reconcile.PhaseLeft, reconcile.PhaseFailed, reconcile.PhaseLeaving}, v1.PhaseLeaving, "2749b63d6f4a0b35"},
		{[]string{reconcile.PhaseLeft, reconcile.PhaseLeft}, v1.PhaseLeft, ""},
	} {
		ns := &nodeStack{leaving: true, members: []etcdMember{stubMember{id: tc.member}}}
		for i, p := range tc.phases {
			ns.statuses = append(ns.statuses, reconcile.Status{Component: []string{"drain", "keepalived", "etcd"}[i], Phase: p, Healthy: p == reconcile.PhaseLeft})
		}
		st := v1.Status{APIVersion: v1.APIVersion, Kind: "Status", Phase: v1.PhaseEnrolled}
		ns.report(&st)
		if st.Phase != tc.want || len(st.Components) != len(tc.phases) || st.Components[0].Phase != reconcile.PhaseLeft ||
			st.EtcdMemberID != tc.member {
			t.Errorf("phases %q: reported %+v", tc.phases, st)
		}
		if err := st.Validate(); err != nil {
			t.Errorf("the report does not validate: %v", err)
		}
	}
}

// A component's long message is clipped between characters: cut inside
// one, it would travel as a longer U+FFFD and the controller would refuse
// the whole report at every interval while the message stands.
func TestStatusReportClipsMessagesTheControllerAccepts(t *testing.T) {
	ns := &nodeStack{statuses: []reconcile.Status{{
		Component: "kubeadm", Phase: reconcile.PhaseFailed,
		Message: strings.Repeat("a", 1023) + "é and more",
	}}}
	st := v1.Status{APIVersion: v1.APIVersion, Kind: "Status", Phase: v1.PhaseEnrolled}
	ns.report(&st)
	body, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v1.DecodeStatus(bytes.NewReader(body)); err != nil {
		t.Errorf("the controller refuses the report: %v", err)
	}
}

type stubMember struct {
	id       string
	snapshot time.Time
	restored string
}

func (m stubMember) MemberID() string { return m.id }
func (m stubMember) Restored() string { return m.restored }
func (m stubMember) Snapshots() []time.Time {
	if m.snapshot.IsZero() {
		return nil
	}
	return []time.Time{m.snapshot.Add(-time.Hour), m.snapshot}
}

// The report names the local etcd member, its newest snapshot and the
// restore it did, and leaves out a snapshot or restore there is none of.
func TestReportNamesTheEtcdMemberAndItsNewestSnapshot(t *testing.T) {
	at := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	for _, m := range []stubMember{{id: "2749b63d6f4a0b35", snapshot: at, restored: "r-1"}, {id: "2749b63d6f4a0b35"}} {
		ns := &nodeStack{members: []etcdMember{m}, statuses: []reconcile.Status{{Component: "etcd", Phase: reconcile.PhaseConverged, Healthy: true}}}
		st := v1.Status{APIVersion: v1.APIVersion, Kind: "Status", Phase: v1.PhaseEnrolled}
		ns.report(&st)
		if st.EtcdMemberID != m.id || (m.snapshot.IsZero() != (st.EtcdSnapshotAt == nil)) ||
			(st.EtcdSnapshotAt != nil && !st.EtcdSnapshotAt.Equal(m.snapshot)) {
			t.Errorf("member %+v: reported member %q, snapshot %v", m, st.EtcdMemberID, st.EtcdSnapshotAt)
		}
		if want := m.Snapshots(); !slices.EqualFunc(st.EtcdSnapshots, want, time.Time.Equal) {
			t.Errorf("member %+v: reported snapshots %v, want %v", m, st.EtcdSnapshots, want)
		}
		if st.EtcdRestored != m.restored {
			t.Errorf("member %+v: reported restore %q", m, st.EtcdRestored)
		}
		if err := st.Validate(); err != nil {
			t.Errorf("the report does not validate: %v", err)
		}
	}
}
