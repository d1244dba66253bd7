//go:build linux

package etcd

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/agent/reconcile"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// A master lost for good (its etcd stopped, never to come back) leaves
// its member in the cluster, where it counts against the quorum. The
// remaining members remove it once their role names it in
// etcd.removeMembers, and only then: a role that merely leaves it out of
// the peers removes nothing, and a list naming this member or a peer's
// removes neither, even where etcd would allow it.
func TestLostMastersMemberIsRemoved(t *testing.T) {
	ctx := context.Background()
	hosts, masters, caPair, ca, _, _ := threeMembers(t, "198.18.30.%d")
	ids := map[string]uint64{}
	for name, h := range hosts {
		s, err := h.client(t, ca).Status(ctx, h.endpoint())
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = s.MemberID
	}
	lost, m1, m2 := hosts["m3"], hosts["m1"], hosts["m2"]
	peers := masters
	role := func(h *labHost, remove ...uint64) *v1.Role {
		r := testRole(t, h.name, peers, caPair)
		for _, id := range remove {
			r.Etcd.RemoveMembers = append(r.Etcd.RemoveMembers, hexID(id))
		}
		if err := r.Validate(); err != nil {
			t.Fatal(err)
		}
		return r
	}
	cl := m1.client(t, ca)
	memberNames := func() []string {
		t.Helper()
		members, err := cl.MemberList(ctx, m1.endpoint())
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, m := range members {
			names = append(names, m.Name)
		}
		slices.Sort(names)
		return names
	}
	// quiet: a healthy pass that removed nothing and says nothing of it.
	quiet := func(st reconcile.Status) bool {
		return st.Healthy && !strings.Contains(st.Message, "lost") &&
			!slices.ContainsFunc(st.Actions, func(a string) bool { return strings.HasPrefix(a, "removed member") })
	}

	// 1. While all three run, a list naming every member, this one
	// included, removes none: each is one of the role's peers. etcd would
	// have let one go.
	st := m1.comp.Reconcile(ctx, m1.host, role(m1, ids["m1"], ids["m2"], ids["m3"]))
	if !quiet(st) {
		t.Errorf("m1's pass naming its peers: %+v", st)
	}
	if got := memberNames(); !slices.Equal(got, []string{"m1", "m2", "m3"}) {
		t.Fatalf("members after a list naming the peers: %q", got)
	}

	// 2. m3 is lost. The peers alone say nothing of its member, nor does
	// a list of another member: it stays.
	if err := lost.sup.StopAll(ctx); err != nil {
		t.Fatal(err)
	}
	peers = map[string]string{"m1": masters["m1"], "m2": masters["m2"]}
	for _, h := range []*labHost{m1, m2} {
		if st := h.comp.Reconcile(ctx, h.host, role(h)); !quiet(st) {
			t.Errorf("%s's pass without removeMembers: %+v", h.name, st)
		}
	}
	if st := m1.comp.Reconcile(ctx, m1.host, role(m1, ids["m3"]+1)); !quiet(st) {
		t.Errorf("m1's pass naming a member the cluster does not have: %+v", st)
	}
	if got := memberNames(); !slices.Equal(got, []string{"m1", "m2", "m3"}) {
		t.Fatalf("members after passes that do not name m3: %q", got)
	}

	// 3. Naming the lost member removes it, and only it.
	st = m1.comp.Reconcile(ctx, m1.host, role(m1, ids["m2"], ids["m3"]))
	t.Logf("m1's pass naming m2 and m3: %q (%s)", st.Actions, st.Message)
	want := "removed member " + hexID(ids["m3"]) + " (m3) of a master removed without leaving"
	if !st.Healthy || !slices.Equal(st.Actions, []string{want}) {
		t.Errorf("m1's pass naming m3: %+v, want the action %q", st, want)
	}
	members, err := cl.MemberList(ctx, m1.endpoint())
	if err != nil {
		t.Fatal(err)
	}
	if err := votingMembers(members, "m1", "m2"); err != nil {
		t.Fatalf("after removing the lost member: %v", err)
	}
	if err := kvPut(ctx, cl, m1.endpoint(), "after-the-lost-member-went", "yes"); err != nil {
		t.Errorf("a write after the removal: %v", err)
	}

	// 4. The other member's pass with the same list finds nothing to do.
	if st := m2.comp.Reconcile(ctx, m2.host, role(m2, ids["m3"])); !quiet(st) {
		t.Errorf("m2's pass after the removal: %+v", st)
	}
}

// A leader that leaves while another member is down hands leadership to
// one that answers: the one down would fail every transfer, and every
// pass would pick it again until the leave deadline.
func TestHandOverSkipsAMemberThatIsDown(t *testing.T) {
	ctx := context.Background()
	hosts, _, _, ca, lead, leader := threeMembers(t, "198.18.30.%d")
	cl := lead.client(t, ca)
	members, err := cl.MemberList(ctx, lead.endpoint())
	if err != nil {
		t.Fatal(err)
	}
	// The first other member in the list, the one a plain pick would
	// take, is down.
	var down, up *labHost
	for _, m := range members {
		switch {
		case m.ID == leader.MemberID:
		case down == nil:
			down = hosts[m.Name]
		default:
			up = hosts[m.Name]
		}
	}
	if down == nil || up == nil {
		t.Fatalf("members %+v", members)
	}
	if err := down.sup.StopAll(ctx); err != nil {
		t.Fatal(err)
	}
	target, err := lead.comp.handOver(ctx, cl, lead.comp.localClientURL(), leader.MemberID, members)
	if err != nil || target.Name != up.name {
		t.Fatalf("hand-over with %s down: to %q, %v; want %s", down.name, target.Name, err, up.name)
	}
	st, err := up.client(t, ca).Status(ctx, up.endpoint())
	if err != nil || st.Leader != st.MemberID {
		t.Errorf("%s after the hand-over: %+v, %v; want it to lead", up.name, st, err)
	}
}

// A master that added itself as a learner and was gone before it started
// etcd (and before its agent reported the member, so the controller cannot
// name it lost) leaves a learner that would refuse every later join: etcd
// takes one learner at a time. A healthy member removes it once it has
// seen it, with no name and no master of the role at its peer URL, for
// orphanLearnerAfter; never while the role has a master there.
func TestALearnerThatNeverStartedIsRemoved(t *testing.T) {
	ctx := context.Background()
	hosts, masters, caPair, ca, _, _ := threeMembers(t, "198.18.30.%d")
	m1 := hosts["m1"]
	now := time.Now()
	m1.comp.cfg.Now = func() time.Time { return now }
	cl := m1.client(t, ca)
	const gone = "198.18.30.99"
	var orphan Member
	// etcd refuses a member change until its members have been
	// connected for a few seconds.
	eventually(t, 60*time.Second, "the learner added", func() (err error) {
		orphan, _, err = cl.MemberAddLearner(ctx, m1.endpoint(), peerURL(netip.MustParseAddr(gone), 2380))
		return err
	})
	removed := "removed learner " + hexID(orphan.ID) + " (https://" + gone + ":2380): never started, and no master of the role"
	pass := func(peers map[string]string) reconcile.Status {
		t.Helper()
		st := m1.comp.Reconcile(ctx, m1.host, testRole(t, "m1", peers, caPair))
		if !st.Healthy {
			t.Fatalf("m1's pass: %+v", st)
		}
		return st
	}
	hasLearner := func() bool {
		t.Helper()
		members, err := cl.MemberList(ctx, m1.endpoint())
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(members, func(m Member) bool { return m.ID == orphan.ID })
	}

	// 1. While the role has a master at its address (one still on its
	// way), it stays, however long.
	withM4 := maps.Clone(masters)
	withM4["m4"] = gone
	for _, after := range []time.Duration{0, time.Hour} {
		now = now.Add(after)
		if st := pass(withM4); len(st.Actions) != 0 {
			t.Errorf("pass with m4 in the role, %s on: %q", after, st.Actions)
		}
	}
	// 2. The role no longer has it: it stays until it has been seen so
	// for orphanLearnerAfter, then goes, and only it.
	for _, after := range []time.Duration{0, orphanLearnerAfter - time.Second} {
		now = now.Add(after)
		if st := pass(masters); len(st.Actions) != 0 || !hasLearner() {
			t.Fatalf("pass without m4, %s after it was first seen: %q", after, st.Actions)
		}
	}
	now = now.Add(time.Second)
	if st := pass(masters); !slices.Equal(st.Actions, []string{removed}) {
		t.Errorf("pass %s after it was first seen: %q, want %q", orphanLearnerAfter, st.Actions, removed)
	}
	if hasLearner() {
		t.Error("the learner is still a member")
	}
	members, err := cl.MemberList(ctx, m1.endpoint())
	if err != nil {
		t.Fatal(err)
	}
	if err := votingMembers(members, "m1", "m2", "m3"); err != nil {
		t.Error(err)
	}
	// A new learner can join now: etcd takes one at a time.
	eventually(t, 60*time.Second, "a learner after the orphan went", func() error {
		_, _, err := cl.MemberAddLearner(ctx, m1.endpoint(), peerURL(netip.MustParseAddr("198.18.30.98"), 2380))
		return err
	})
}
