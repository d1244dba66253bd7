//go:build linux

package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/agent/pki"
	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/agent/service"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// leaveRole is the role the controller gives a removed master: its last
// role, with Leave set and as peers the remaining masters and itself.
func leaveRole(t *testing.T, node string, masters map[string]string, ca *v1.KeyPair) *v1.Role {
	t.Helper()
	r := testRole(t, node, masters, ca)
	r.Revision = 2
	r.Leave = &v1.LeaveSettings{Deadline: time.Now().Add(10 * time.Minute)}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	return r
}

// Three real members; the leader is told to leave: it hands leadership to
// another member, removes itself and stops, and the members left are
// exactly the other two. Leaving again, also from a new agent, acts on
// nothing. Then a follower leaves the remaining two, without a transfer.
func TestMemberLeavesTheCluster(t *testing.T) {
	ctx := context.Background()
	names := []string{"m1", "m2", "m3"}
	hosts, masters, caPair, ca, lead, leader := threeMembers(t, "198.18.30.%d")
	var rest []string
	for _, n := range names {
		if n != lead.name {
			rest = append(rest, n)
		}
	}
	t.Logf("leader %s (%x) leaves; %v stay", lead.name, leader.MemberID, rest)

	// 1. The leader leaves.
	st := lead.comp.Leave(ctx, lead.host, leaveRole(t, lead.name, masters, caPair))
	t.Logf("%s leave: %v (%s)", lead.name, st.Actions, st.Message)
	if st.Phase != reconcile.PhaseLeft || !st.Healthy {
		t.Fatalf("leader's leave: %+v", st)
	}
	if len(st.Actions) != 3 || !strings.HasPrefix(st.Actions[0], "moved leadership to ") ||
		st.Actions[1] != "removed member "+hexID(leader.MemberID) || st.Actions[2] != "stopped etcd" {
		t.Errorf("leader's leave actions %q", st.Actions)
	}
	other := hosts[rest[0]]
	ocl := other.client(t, ca)
	members, err := ocl.MemberList(ctx, other.endpoint())
	if err != nil {
		t.Fatal(err)
	}
	if err := votingMembers(members, rest...); err != nil {
		t.Fatalf("after the leader left: %v", err)
	}
	eventually(t, 30*time.Second, "a new leader among the others", func() error {
		s, err := ocl.Status(ctx, other.endpoint())
		if err != nil {
			return err
		}
		if s.Leader == 0 || s.Leader == leader.MemberID {
			return fmt.Errorf("leader %x", s.Leader)
		}
		return kvPut(ctx, ocl, other.endpoint(), "after-the-leader-left", "yes")
	})
	if _, err := lead.sup.State(ctx, UnitName); !errors.Is(err, service.ErrUnknownUnit) {
		t.Errorf("the leaver's etcd unit: %v", err)
	}

	// 2. Leaving again acts on nothing and reports Left; so does a new
	// agent on the same host.
	for _, restart := range []bool{false, true} {
		if restart {
			lead.restartAgent(t)
		}
		again := lead.comp.Leave(ctx, lead.host, leaveRole(t, lead.name, masters, caPair))
		if again.Phase != reconcile.PhaseLeft || len(again.Actions) != 0 || again.Message != st.Message {
			t.Errorf("leave again (agent restarted: %v): %+v", restart, again)
		}
	}
	if members, err := ocl.MemberList(ctx, other.endpoint()); err != nil || votingMembers(members, rest...) != nil {
		t.Errorf("members after leaving twice: %+v %v", members, err)
	}

	// 3. A follower leaves the remaining two: no transfer, and the last
	// member carries on alone.
	remaining := map[string]string{rest[0]: masters[rest[0]], rest[1]: masters[rest[1]]}
	var follower, last *labHost
	for _, n := range rest {
		s, err := hosts[n].client(t, ca).Status(ctx, hosts[n].endpoint())
		if err != nil {
			t.Fatal(err)
		}
		if s.MemberID != s.Leader {
			follower = hosts[n]
		} else {
			last = hosts[n]
		}
	}
	if follower == nil || last == nil {
		t.Fatal("no follower and leader among the two left")
	}
	st = follower.comp.Leave(ctx, follower.host, leaveRole(t, follower.name, remaining, caPair))
	if st.Phase != reconcile.PhaseLeft || len(st.Actions) != 2 || !strings.HasPrefix(st.Actions[0], "removed member ") {
		t.Fatalf("follower's leave: %+v", st)
	}
	lcl := last.client(t, ca)
	members, err = lcl.MemberList(ctx, last.endpoint())
	if err != nil {
		t.Fatal(err)
	}
	if err := votingMembers(members, last.name); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "a write on the last member", func() error {
		return kvPut(ctx, lcl, last.endpoint(), "alone", "yes")
	})

	// 4. The last member cannot leave: there is nobody to hand over to.
	st = last.comp.Leave(ctx, last.host, leaveRole(t, last.name, map[string]string{last.name: masters[last.name]}, caPair))
	if st.Phase != reconcile.PhaseFailed || !strings.Contains(st.Message, "last") {
		t.Errorf("the last member's leave: %+v", st)
	}
	if s := last.state(t); !s.Running {
		t.Errorf("the last member stopped: %+v", s)
	}
}

// newMasters makes three hosts, m1 to m3, in network namespaces on one
// switch (addresses from addrFormat, first to first+2), and an etcd CA.
func newMasters(t *testing.T, addrFormat string, first int) (hosts []*labHost, masters map[string]string, caPair *v1.KeyPair, ca *pki.CA) {
	t.Helper()
	needLab(t, "runs three etcd members")
	id := labID(t)
	sw := labSwitch(t, id)
	masters = map[string]string{}
	for i, name := range []string{"m1", "m2", "m3"} {
		addr := fmt.Sprintf(addrFormat, first+i)
		masters[name] = addr
		hosts = append(hosts, newLabHost(t, id, sw, name, addr))
	}
	caPair = newCA(t, "etcd-ca")
	ca, err := pki.LoadCA(caPair)
	if err != nil {
		t.Fatal(err)
	}
	return hosts, masters, caPair, ca
}

// threeMembers runs three real members (addresses from addrFormat, 31 to
// 33), waits until all are healthy voting members with a leader, and
// returns them with the leader and its status.
func threeMembers(t *testing.T, addrFormat string) (hosts map[string]*labHost, masters map[string]string, caPair *v1.KeyPair, ca *pki.CA, lead *labHost, leader MemberStatus) {
	t.Helper()
	ctx := context.Background()
	list, masters, caPair, ca := newMasters(t, addrFormat, 31)
	hosts = map[string]*labHost{}
	for _, h := range list {
		hosts[h.name] = h
	}
	var wg sync.WaitGroup
	for _, h := range hosts {
		wg.Go(func() {
			if st := h.comp.Reconcile(ctx, h.host, testRole(t, h.name, masters, caPair)); st.Phase != reconcile.PhaseConverged {
				t.Errorf("%s: %+v", h.name, st)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	cl := hosts["m1"].client(t, ca)
	eventually(t, 90*time.Second, "three voting members with a leader", func() error {
		members, err := cl.MemberList(ctx, hosts["m1"].endpoint())
		if err != nil {
			return err
		}
		if err := votingMembers(members, "m1", "m2", "m3"); err != nil {
			return err
		}
		if leader, err = cl.Status(ctx, hosts["m1"].endpoint()); err != nil || leader.Leader == 0 {
			return fmt.Errorf("no leader yet: %+v %v", leader, err)
		}
		return nil
	})
	// Settle the promotions a first pass may leave to the next.
	for _, h := range hosts {
		eventually(t, 60*time.Second, h.name+" healthy", func() error {
			if st := h.comp.Reconcile(ctx, h.host, testRole(t, h.name, masters, caPair)); !st.Healthy {
				return errors.New(st.Message)
			}
			return nil
		})
	}
	for _, h := range hosts {
		s, err := h.client(t, ca).Status(ctx, h.endpoint())
		if err != nil {
			t.Fatal(err)
		}
		if s.MemberID == s.Leader {
			lead = h
			leader = s
		}
	}
	if lead == nil {
		t.Fatal("no member says it leads")
	}
	return hosts, masters, caPair, ca, lead, leader
}

// The leader of three real members hands over for an upgrade by
// reimage: leadership moves, its etcd stops, and it stays a member. A
// new VM (a fresh OS disk: no certificates, no bootstrap record, a new
// agent) with the same data directory starts it again as the same member,
// which catches up on what was written meanwhile; the member list never
// changes.
func TestMemberHandsOverKeepingItsIdentity(t *testing.T) {
	ctx := context.Background()
	hosts, masters, caPair, ca, lead, leader := threeMembers(t, "198.18.31.%d")
	before, err := lead.client(t, ca).MemberList(ctx, lead.endpoint())
	if err != nil {
		t.Fatal(err)
	}
	role := leaveRole(t, lead.name, masters, caPair)
	role.Leave.HandOver = true
	st := lead.comp.Leave(ctx, lead.host, role)
	t.Logf("%s hand-over: %v (%s)", lead.name, st.Actions, st.Message)
	if st.Phase != reconcile.PhaseLeft || !st.Healthy || !strings.Contains(st.Message, hexID(leader.MemberID)+" stopped") {
		t.Fatalf("hand-over: %+v", st)
	}
	if len(st.Actions) != 2 || !strings.HasPrefix(st.Actions[0], "moved leadership to ") || st.Actions[1] != "stopped etcd" {
		t.Errorf("hand-over actions %q", st.Actions)
	}
	var other *labHost
	for _, h := range hosts {
		if h != lead {
			other = h
		}
	}
	ocl := other.client(t, ca)
	eventually(t, 30*time.Second, "a write while the member is away", func() error {
		return kvPut(ctx, ocl, other.endpoint(), "while-away", "yes")
	})
	if members, err := ocl.MemberList(ctx, other.endpoint()); err != nil || len(members) != 3 || votingMembers(members, "m1", "m2", "m3") != nil {
		t.Fatalf("members after the hand-over: %+v %v", members, err)
	}
	// Handing over again (the agent asked twice) acts on nothing.
	if again := lead.comp.Leave(ctx, lead.host, role); again.Phase != reconcile.PhaseLeft || len(again.Actions) != 0 {
		t.Errorf("hand-over again: %+v", again)
	}

	// The new VM: what was on the OS disk is gone, the data directory is
	// the moved disk.
	lead.newVMOnSameData(t)
	normal := testRole(t, lead.name, masters, caPair)
	normal.Revision = 3
	eventually(t, 60*time.Second, "the member back and caught up", func() error {
		if st := lead.comp.Reconcile(ctx, lead.host, normal); !st.Healthy {
			return errors.New(st.Message)
		}
		s, err := lead.client(t, ca).Status(ctx, lead.endpoint())
		if err != nil {
			return err
		}
		if s.MemberID != leader.MemberID {
			t.Fatalf("the new VM is member %x, the old one was %x", s.MemberID, leader.MemberID)
		}
		v, err := kvGetLocal(ctx, lead.client(t, ca), lead.endpoint(), "while-away")
		if err != nil || v != "yes" {
			return fmt.Errorf("while-away on the returned member: %q %v", v, err)
		}
		return nil
	})
	after, err := ocl.MemberList(ctx, other.endpoint())
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Errorf("members before %+v, after %+v", before, after)
	}
	for _, m := range before {
		if !slices.ContainsFunc(after, func(a Member) bool { return a.ID == m.ID && !a.IsLearner }) {
			t.Errorf("member %x (%s) is gone or a learner after the hand-over: %+v", m.ID, m.Name, after)
		}
	}
}

// The only member of a one-master cluster hands over without a leader to
// move to: it stops, still the cluster's member, and a new VM on its data
// directory starts it again as the same member with the same data.
func TestOnlyMemberHandsOver(t *testing.T) {
	needLab(t, "runs an etcd member")
	ctx := context.Background()
	id := labID(t)
	h := newLabHost(t, id, labSwitch(t, id), "m1", "198.18.32.21")
	masters := map[string]string{"m1": "198.18.32.21"}
	caPair := newCA(t, "etcd-ca")
	ca, err := pki.LoadCA(caPair)
	if err != nil {
		t.Fatal(err)
	}
	normal := testRole(t, h.name, masters, caPair)
	var before MemberStatus
	eventually(t, 60*time.Second, "the only member serving", func() error {
		if st := h.comp.Reconcile(ctx, h.host, normal); !st.Healthy {
			return errors.New(st.Message)
		}
		if before, err = h.client(t, ca).Status(ctx, h.endpoint()); err != nil {
			return err
		}
		return kvPut(ctx, h.client(t, ca), h.endpoint(), "before", "yes")
	})

	role := leaveRole(t, h.name, masters, caPair)
	role.Leave.HandOver = true
	st := h.comp.Leave(ctx, h.host, role)
	t.Logf("hand-over: %v (%s)", st.Actions, st.Message)
	if st.Phase != reconcile.PhaseLeft || !st.Healthy || !strings.Contains(st.Message, hexID(before.MemberID)+", the cluster's only one, stopped") {
		t.Fatalf("hand-over: %+v", st)
	}
	if !slices.Equal(st.Actions, []string{"stopped etcd"}) {
		t.Errorf("hand-over actions %q", st.Actions)
	}

	h.newVMOnSameData(t)
	normal.Revision = 3
	eventually(t, 60*time.Second, "the member back with its data", func() error {
		if st := h.comp.Reconcile(ctx, h.host, normal); !st.Healthy {
			return errors.New(st.Message)
		}
		s, err := h.client(t, ca).Status(ctx, h.endpoint())
		if err != nil {
			return err
		}
		if s.MemberID != before.MemberID {
			t.Fatalf("the new VM is member %x, the old one was %x", s.MemberID, before.MemberID)
		}
		if v, err := kvGetLocal(ctx, h.client(t, ca), h.endpoint(), "before"); err != nil || v != "yes" {
			return fmt.Errorf("the key on the returned member: %q %v", v, err)
		}
		return nil
	})
}
