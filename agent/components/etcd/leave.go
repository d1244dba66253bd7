package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/harmonykaas/harmony/agent/reconcile"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

var _ reconcile.Leaver = (*Component)(nil)

// Leave takes the local member out of the cluster when the node leaves
// it: a leader first hands leadership to another started voting member
// (so the cluster does not wait out an election), then the member is
// removed through another member (the removed one shuts down, and an
// answer through it could be lost), then its unit stops. The data
// directory stays, as it does for a worker role. Once done, a marker on
// the host makes later passes, and later agents, report Left without
// acting.
func (c *Component) Leave(ctx context.Context, host *reconcile.Host, role *v1.Role) reconcile.Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := reconcile.Status{Component: Name}
	if role == nil || (role.Role != v1.RoleMaster && role.Role != v1.RoleAppliance) {
		st = c.disable(ctx, host, st)
		if st.Phase == reconcile.PhaseDisabled {
			st.Phase, st.Message = reconcile.PhaseLeft, "not a control-plane node: no member to remove"
		}
		return st
	}
	if role.Leave != nil && role.Leave.HandOver {
		return c.handOverMember(ctx, host, role, st)
	}
	marker := host.LeftMarker(Name)
	if note, ok := marker.Left(); ok {
		c.metrics.disable()
		actions, err := host.StopUnit(ctx, UnitName)
		if err != nil {
			return leaveFailed(st, err)
		}
		st.Phase, st.Healthy, st.Message, st.Actions = reconcile.PhaseLeft, true, note, actions
		return st
	}
	if err := c.cfg.check(); err != nil {
		return leaveFailed(st, err)
	}
	s, err := settingsFrom(role)
	if err != nil {
		return leaveFailed(st, fmt.Errorf("role: %w", err))
	}
	// The member's client certificate is what the other members trust;
	// issued again if it went missing.
	actions, err := ensureCerts(host, s)
	st.Actions = append(st.Actions, actions...)
	if err != nil {
		return leaveFailed(st, err)
	}
	tlsConfig, err := clientTLS(host, s)
	if err != nil {
		return leaveFailed(st, err)
	}
	cl := newClient(tlsConfig, c.cfg.DialContext, c.cfg.RequestTimeout)
	defer cl.Close()

	note, actions, err := c.leave(ctx, host, s, cl)
	st.Actions = append(st.Actions, actions...)
	if err != nil {
		return leaveFailed(st, err)
	}
	stopped, err := host.StopUnit(ctx, UnitName)
	st.Actions = append(st.Actions, stopped...)
	if err != nil {
		return leaveFailed(st, err)
	}
	c.metrics.disable()
	if err := marker.Set(note); err != nil {
		return leaveFailed(st, err)
	}
	logger(host).Info("left the etcd cluster", "note", note)
	st.Phase, st.Healthy, st.Message = reconcile.PhaseLeft, true, note
	return st
}

// leave moves leadership away from the local member and removes it. It
// returns what happened, for the status and the marker.
func (c *Component) leave(ctx context.Context, host *reconcile.Host, s settings, cl *Client) (string, []string, error) {
	log := logger(host)
	local := c.localClientURL()
	status, statusErr := cl.Status(ctx, local)
	endpoint, _, members, err := c.findCluster(ctx, cl, s.others())
	if err != nil {
		return "", nil, err
	}
	if members == nil {
		if statusErr == nil {
			return "", nil, fmt.Errorf("no other member of the role answers; member %x cannot leave a cluster it would be the last of", status.MemberID)
		}
		return "", nil, fmt.Errorf("neither this member (%v) nor any other member answers; cannot tell whether it is still in the cluster", statusErr)
	}
	self := peerURL(s.ip, c.cfg.PeerPort)
	i := slices.IndexFunc(members, func(m Member) bool {
		return m.Name == s.name || slices.Contains(m.PeerURLs, self) || (statusErr == nil && m.ID == status.MemberID)
	})
	if i < 0 {
		return fmt.Sprintf("no member of %s is in the cluster (%s lists %d others)", s.name, endpoint, len(members)), nil, nil
	}
	me := members[i]
	var actions []string
	if statusErr == nil && status.MemberID == me.ID && status.Leader == me.ID {
		target, err := c.handOver(ctx, cl, local, me.ID, members)
		if err != nil {
			return "", actions, err
		}
		actions = append(actions, fmt.Sprintf("moved leadership to %x (%s)", target.ID, target.Name))
		log.Info("moved etcd leadership", "from", fmt.Sprintf("%x", me.ID), "to", fmt.Sprintf("%x", target.ID), "name", target.Name)
	}
	err = c.retryReconfig(ctx, func() error { return cl.MemberRemove(ctx, endpoint, me.ID) })
	if err != nil && !isMemberNotFound(err) {
		return "", actions, fmt.Errorf("remove member %x through %s: %w", me.ID, endpoint, err)
	}
	actions = append(actions, fmt.Sprintf("removed member %x", me.ID))
	log.Info("removed this member from the etcd cluster", "id", fmt.Sprintf("%x", me.ID), "through", endpoint)
	return fmt.Sprintf("member %x (%s) removed from the cluster", me.ID, s.name), actions, nil
}

// handOver makes another started voting member the leader and waits,
// up to PromoteWait, until the local member sees it lead. It picks one
// that answers: a member that is down (a master lost, or being removed)
// would fail every transfer, and every pass would pick it again.
func (c *Component) handOver(ctx context.Context, cl *Client, local string, self uint64, members []Member) (Member, error) {
	var candidates []Member
	for _, m := range members {
		if m.ID != self && !m.IsLearner && m.Name != "" {
			candidates = append(candidates, m)
		}
	}
	if len(candidates) == 0 {
		return Member{}, errors.New("this member leads and no other started voting member can take over")
	}
	target := candidates[0]
	for _, m := range candidates {
		if answers(ctx, cl, m) {
			target = m
			break
		}
	}
	deadline := time.Now().Add(c.cfg.PromoteWait)
	for {
		err := cl.MoveLeader(ctx, local, target.ID)
		// Whether or not etcd said so, what counts is that another member
		// leads now (an election may have beaten the transfer).
		if st, serr := cl.Status(ctx, local); serr == nil && st.Leader != self && st.Leader != 0 {
			if j := slices.IndexFunc(members, func(m Member) bool { return m.ID == st.Leader }); j >= 0 {
				target = members[j]
			}
			return target, nil
		}
		if !time.Now().Before(deadline) {
			return Member{}, fmt.Errorf("move leadership to %x: %w", target.ID, errors.Join(err, errors.New("it did not take over")))
		}
		select {
		case <-ctx.Done():
			return Member{}, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// answers reports whether member m answers a status request at one of
// its client URLs, as a voting member.
func answers(ctx context.Context, cl *Client, m Member) bool {
	for _, u := range m.ClientURLs {
		if st, err := cl.Status(ctx, u); err == nil && st.MemberID == m.ID && !st.IsLearner {
			return true
		}
	}
	return false
}

func leaveFailed(st reconcile.Status, err error) reconcile.Status {
	st.Phase, st.Healthy, st.Message = reconcile.PhaseFailed, false, err.Error()
	return st
}

// handOverMember takes the local member out of service for a VM that
// replaces this one and takes its data disk: leadership moves to another
// member first (the replacement costs at most one election, this one),
// then the unit stops, so the data on the disk is left cleanly. The member
// stays in the cluster: the new VM starts it again from the same data. No
// marker is set: if the replacement is rolled back, this VM starts the
// member again itself.
func (c *Component) handOverMember(ctx context.Context, host *reconcile.Host, role *v1.Role, st reconcile.Status) reconcile.Status {
	if err := c.cfg.check(); err != nil {
		return leaveFailed(st, err)
	}
	s, err := settingsFrom(role)
	if err != nil {
		return leaveFailed(st, fmt.Errorf("role: %w", err))
	}
	tlsConfig, err := clientTLS(host, s)
	if err != nil {
		return leaveFailed(st, err)
	}
	cl := newClient(tlsConfig, c.cfg.DialContext, c.cfg.RequestTimeout)
	defer cl.Close()
	local := c.localClientURL()
	note := "the member was not running; its data stays for the new VM"
	if status, err := cl.Status(ctx, local); err == nil {
		note = fmt.Sprintf("member %x stopped for its replacement, still in the cluster; its data stays for the new VM", status.MemberID)
		switch {
		case len(s.others()) == 0:
			// The only member: nobody can lead meanwhile, and the cluster
			// waits for the new VM (a cluster of one master has no HA).
			note = fmt.Sprintf("member %x, the cluster's only one, stopped for its replacement; its data stays for the new VM", status.MemberID)
		case status.Leader == status.MemberID:
			_, _, members, err := c.findCluster(ctx, cl, s.others())
			if err != nil {
				return leaveFailed(st, err)
			}
			target, err := c.handOver(ctx, cl, local, status.MemberID, members)
			if err != nil {
				return leaveFailed(st, err)
			}
			st.Actions = append(st.Actions, fmt.Sprintf("moved leadership to %x (%s)", target.ID, target.Name))
			logger(host).Info("moved etcd leadership for a hand-over", "from", fmt.Sprintf("%x", status.MemberID), "to", fmt.Sprintf("%x", target.ID))
		}
	}
	stopped, err := host.StopUnit(ctx, UnitName)
	st.Actions = append(st.Actions, stopped...)
	if err != nil {
		return leaveFailed(st, err)
	}
	c.metrics.disable()
	st.Phase, st.Healthy, st.Message = reconcile.PhaseLeft, true, note
	return st
}
