package etcd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/harmonykaas/harmony/agent/reconcile"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// membership decides how etcd starts: from its own state when the data
// directory has one; otherwise by founding the cluster when no other
// member answers, or by joining the cluster that does as a learner.
// joined says this pass added the member.
//
// rejoin, while this member joins the cluster a restore made, is that
// restore's record: the member then joins only through the restore's
// source, never the cluster its state was set aside from, and never
// founds one.
func (c *Component) membership(ctx context.Context, host *reconcile.Host, s settings, cl *Client, rejoin *restoreRecord) (b Bootstrap, joined bool, actions []string, err error) {
	log := logger(host)
	has, err := hasState(host.Path(s.dataDir))
	if err != nil {
		return Bootstrap{}, false, nil, err
	}
	if has {
		removed, err := c.removedState(ctx, cl, s, host.Path(s.dataDir))
		if err != nil {
			// Not knowing is no reason to leave the state: etcd starts
			// from it as before, and the next pass asks again.
			log.Info("could not tell whether the cluster still has this member", "err", err)
		}
		if removed != nil {
			name := setAsideName(fmt.Sprintf("%x", removed.MemberID), time.Now())
			done, err := c.setAside(ctx, host, s, name, fmt.Sprintf("removed member %x", removed.MemberID))
			actions = append(actions, done...)
			if err != nil {
				return Bootstrap{}, false, actions, err
			}
			log.Warn("the cluster no longer has the member this data directory is of; its state is set aside and the member joins afresh",
				"id", fmt.Sprintf("%x", removed.MemberID), "kept", filepath.Join(s.dataDir, name))
			has = false
		}
	}
	if has {
		b, ok, err := readBootstrap(host.Path(BootstrapFile))
		if err != nil {
			// etcd ignores these flags once it has state; a lost record
			// costs one restart at most.
			log.Warn("ignoring the bootstrap record", "err", err)
		}
		if !ok {
			b = restartBootstrap(s, c.cfg.PeerPort)
		}
		return b, false, nil, nil
	}

	peers := s.others()
	if rejoin != nil {
		peers = slices.DeleteFunc(peers, func(p v1.Peer) bool { return p.Name != s.restore.Source })
	}
	endpoint, clusterID, members, err := c.findCluster(ctx, cl, peers)
	if err != nil {
		return Bootstrap{}, false, nil, err
	}
	if rejoin != nil {
		switch {
		case members == nil:
			return Bootstrap{}, false, nil, fmt.Errorf("restore %s: waiting for %s to restore its snapshot and serve", rejoin.ID, s.restore.Source)
		case clusterID == rejoin.OldCluster:
			return Bootstrap{}, false, nil, fmt.Errorf("restore %s: %s still serves the cluster this member's state was set aside from (%x); waiting for it to restore its snapshot",
				rejoin.ID, s.restore.Source, clusterID)
		}
	}
	if members == nil {
		b = newClusterBootstrap(s, c.cfg.PeerPort)
		changed, err := writeBootstrap(host.Path(BootstrapFile), b)
		if err != nil {
			return Bootstrap{}, false, nil, err
		}
		if changed {
			actions = append(actions, "wrote "+BootstrapFile)
		}
		log.Info("no other member answers; founding the cluster", "initialCluster", b.InitialCluster)
		return b, false, actions, nil
	}

	// The cluster exists and this member has no state: whatever etcd runs
	// here (a crash loop, a process whose directory was wiped) goes, and
	// the member joins afresh.
	stopped, err := host.StopUnit(ctx, UnitName)
	actions = append(actions, stopped...)
	if err != nil {
		return Bootstrap{}, false, actions, err
	}
	// A member founding the cluster from an earlier pass may have written
	// its state since this pass looked (etcd asks its peers before it
	// writes its WAL, which takes seconds on a busy host). That member is
	// in the cluster: removing it would leave a WAL whose member is gone,
	// and etcd would refuse to start for good. Start from that state on
	// the next pass instead.
	if has, err := hasState(host.Path(s.dataDir)); err != nil {
		return Bootstrap{}, false, actions, err
	} else if has {
		log.Info("etcd wrote its state while this pass looked for the cluster; the next pass starts it from that state")
		return Bootstrap{}, false, actions, errStateAppeared
	}
	self := peerURL(s.ip, c.cfg.PeerPort)
	for _, m := range members {
		if m.Name != s.name && !slices.Contains(m.PeerURLs, self) {
			continue
		}
		err := c.retryReconfig(ctx, func() error { return cl.MemberRemove(ctx, endpoint, m.ID) })
		if err != nil && !isMemberNotFound(err) {
			return Bootstrap{}, false, actions, fmt.Errorf("remove stale member %x (%s) through %s: %w", m.ID, m.Name, endpoint, err)
		}
		actions = append(actions, fmt.Sprintf("removed stale member %x", m.ID))
		log.Info("removed stale member", "id", fmt.Sprintf("%x", m.ID), "name", m.Name, "peerURLs", m.PeerURLs)
	}
	var added Member
	err = c.retryReconfig(ctx, func() (err error) {
		added, members, err = cl.MemberAddLearner(ctx, endpoint, self)
		return err
	})
	if err != nil {
		return Bootstrap{}, false, actions, fmt.Errorf("add this member as a learner through %s: %w", endpoint, err)
	}
	actions = append(actions, fmt.Sprintf("added learner %x", added.ID))
	log.Info("added this member as a learner", "id", fmt.Sprintf("%x", added.ID))
	b, err = joinBootstrap(s, added.ID, members)
	if err != nil {
		return Bootstrap{}, false, actions, err
	}
	changed, err := writeBootstrap(host.Path(BootstrapFile), b)
	if err != nil {
		return Bootstrap{}, false, actions, err
	}
	if changed {
		actions = append(actions, "wrote "+BootstrapFile)
	}
	return b, true, actions, nil
}

// removedState reports the identity of the member whose state the data
// directory holds when the cluster no longer has that member: the other
// members answer with a member list without its ID. It happens when a
// replacement of this node joined as a new member (removing this one),
// and the replacement was rolled back or lost: the old VM comes back with
// the state of a member that no longer exists, and etcd refuses to start
// from it for good. Nil when the member is in the list, when it serves
// (a removed member stops itself), or when nobody can say. Only the
// member's own cluster says: a restore's source holds the state of a new
// cluster while the others may still serve the old one, which never had
// the restored member.
func (c *Component) removedState(ctx context.Context, cl *Client, s settings, dataDir string) (*walIdentity, error) {
	local := c.localClientURL()
	if _, err := cl.Status(ctx, local); err == nil {
		return nil, nil
	}
	id, err := readWALIdentity(dataDir)
	if err != nil {
		return nil, err
	}
	_, clusterID, members, err := c.findCluster(ctx, cl, s.others())
	if err != nil || members == nil {
		return nil, err
	}
	if clusterID != id.ClusterID || slices.ContainsFunc(members, func(m Member) bool { return m.ID == id.MemberID }) {
		return nil, nil
	}
	return &id, nil
}

// setAsidePrefix starts the name of a member's state set aside in the
// data directory: a removed member's, or the state a restore replaced.
const setAsidePrefix = "member.removed-"

// setAsideName names the state of what (a member ID, a restore) set aside
// at now.
func setAsideName(what string, now time.Time) string {
	return setAsidePrefix + what + "-" + now.UTC().Format("20060102t150405")
}

// setAside stops etcd and moves the member's state (member/) out of its
// way, to name within the data directory (on the data disk, beside the
// member's new state): it is the only copy of what that member held, so
// it is kept for an admin to look at or delete. etcd warns about the
// extra directory and starts. Only the newest is kept: each can be as
// large as the member's quota, and a data disk filled by rollbacks would
// stop etcd; an older one holds what the cluster has moved on from twice
// since. what says whose state it is; the actions name what was removed.
func (c *Component) setAside(ctx context.Context, host *reconcile.Host, s settings, name, what string) ([]string, error) {
	stopped, err := host.StopUnit(ctx, UnitName)
	if err != nil {
		return stopped, err
	}
	dataDir := host.Path(s.dataDir)
	if err := os.Rename(filepath.Join(dataDir, "member"), filepath.Join(dataDir, name)); err != nil {
		return stopped, fmt.Errorf("set aside the state of %s: %w", what, err)
	}
	// Durable before the member joins afresh: a crash after the join must
	// not find the old state back in place.
	if err := syncDir(dataDir); err != nil {
		return stopped, fmt.Errorf("set aside the state of %s: %w", what, err)
	}
	actions := append(stopped, fmt.Sprintf("set aside the state of %s in %s", what, filepath.Join(s.dataDir, name)))
	removed, err := removeOlderSetAsides(dataDir, name)
	return append(actions, removed...), err
}

// syncDir makes the renames in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// removeOlderSetAsides removes every set-aside state in dataDir but keep.
// One left half removed by a crash goes the next time.
func removeOlderSetAsides(dataDir, keep string) ([]string, error) {
	entries, err := os.ReadDir(dataDir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dataDir, err)
	}
	var actions []string
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), setAsidePrefix) || e.Name() == keep {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dataDir, e.Name())); err != nil {
			return actions, fmt.Errorf("remove an older set-aside state: %w", err)
		}
		actions = append(actions, "removed the older set-aside state "+e.Name())
	}
	return actions, nil
}

// errStateAppeared ends a pass that found the data directory empty but
// holding state once the unit was stopped.
var errStateAppeared = errors.New("etcd wrote its state during this pass; it starts from it on the next")

// retryReconfig retries a membership change that etcd refuses as unsafe
// for now (its strict reconfiguration check wants the leader connected to
// every voting member for a few seconds, so a cluster that has just formed,
// or just lost a member, refuses) or as one learner too many (another
// master joining at the same time, until it is promoted), for up to
// PromoteWait.
func (c *Component) retryReconfig(ctx context.Context, change func() error) error {
	deadline := time.Now().Add(c.cfg.PromoteWait)
	for {
		err := change()
		if err == nil || !(isUnhealthyCluster(err) || isTooManyLearners(err)) || !time.Now().Before(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// findCluster asks others, members of the role. A member serves clients
// only once its cluster has had a quorum, so an answer means the cluster
// exists; members founding a cluster together answer nobody until they
// have formed it. It returns a voting member with a leader, its cluster's
// ID and its member list, or nil when nobody answers.
func (c *Component) findCluster(ctx context.Context, cl *Client, others []v1.Peer) (string, uint64, []Member, error) {
	type probe struct {
		endpoint string
		status   MemberStatus
		err      error
	}
	probes := make([]probe, len(others))
	var wg sync.WaitGroup
	for i, p := range others {
		probes[i].endpoint = clientURL(netip.MustParseAddr(p.Address), c.cfg.ClientPort)
		wg.Go(func() { probes[i].status, probes[i].err = cl.Status(ctx, probes[i].endpoint) })
	}
	wg.Wait()
	var why []string
	for _, p := range probes {
		switch {
		case p.err != nil:
			continue
		case p.status.IsLearner:
			why = append(why, p.endpoint+" is a learner")
			continue
		case p.status.Leader == 0:
			why = append(why, p.endpoint+" has no leader")
			continue
		}
		members, err := cl.MemberList(ctx, p.endpoint)
		if err != nil {
			why = append(why, err.Error())
			continue
		}
		return p.endpoint, p.status.ClusterID, members, nil
	}
	if len(why) > 0 {
		return "", 0, nil, fmt.Errorf("the cluster exists but cannot take this member now: %s", strings.Join(why, "; "))
	}
	return "", 0, nil, nil
}

// observation is what a pass saw of the local member.
type observation struct {
	status    MemberStatus
	statusErr error
	health    bool
	healthErr error
	// promoteErr is the last refusal of a learner's promotion.
	promoteErr error
}

func (o observation) healthy() bool {
	return o.statusErr == nil && o.healthErr == nil && o.health && !o.status.IsLearner
}

func (o observation) message(name string) string {
	if o.statusErr != nil {
		return "etcd is not answering: " + o.statusErr.Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "member %x (%s): ", o.status.MemberID, name)
	switch {
	case o.status.IsLearner:
		b.WriteString("learner catching up")
		if o.promoteErr != nil && !isLearnerNotReady(o.promoteErr) {
			b.WriteString(" (promote: " + o.promoteErr.Error() + ")")
		}
	case o.status.Leader == 0:
		b.WriteString("voting member, no leader")
	case o.status.Leader == o.status.MemberID:
		b.WriteString("voting member, leader")
	default:
		fmt.Fprintf(&b, "voting member, leader %x", o.status.Leader)
	}
	switch {
	case o.healthErr != nil:
		b.WriteString("; /health: " + o.healthErr.Error())
	case o.health:
		b.WriteString("; healthy")
	default:
		b.WriteString("; unhealthy")
	}
	return b.String()
}

// observe asks the local member how it is. A learner is promoted, waiting
// up to PromoteWait for it to catch up (and, when it joined in this pass,
// to start).
func (c *Component) observe(ctx context.Context, cl *Client, s settings, joined bool) (observation, []string) {
	local := c.localClientURL()
	var o observation
	var actions []string
	deadline := time.Now().Add(c.cfg.PromoteWait)
	promoted := false
	for {
		o.status, o.statusErr = cl.Status(ctx, local)
		learner := o.statusErr == nil && o.status.IsLearner
		justPromoted := false
		if learner {
			o.promoteErr = c.promote(ctx, cl, s, o.status.MemberID)
			if o.promoteErr == nil && !promoted {
				promoted, justPromoted = true, true
				actions = append(actions, fmt.Sprintf("promoted member %x", o.status.MemberID))
			}
		}
		// Wait for a learner to be promoted, or for a member that has just
		// joined to start; then read its status again (once more, past the
		// deadline, after a promotion).
		waiting := learner || (o.statusErr != nil && joined)
		if !waiting || (!time.Now().Before(deadline) && !justPromoted) {
			break
		}
		select {
		case <-ctx.Done():
			o.statusErr = errors.Join(o.statusErr, ctx.Err())
			return o, actions
		case <-time.After(time.Second):
		}
	}
	if o.statusErr == nil {
		o.health, o.healthErr = cl.Health(ctx, local)
	}
	return o, actions
}

// removeLost removes the members the role names as lost: those of masters
// the cluster removed without their leaving it (a VM gone, powered off,
// or silent past its deadline). Each counts against the quorum until it
// goes: a lost master and its replacement make four members of which
// three must answer. Never this member, and never one that is a peer's by
// name or peer URL: the list comes from the controller, and a wrong one
// must not take a live member. Called by a healthy voting member, so the
// cluster has its quorum.
func (c *Component) removeLost(ctx context.Context, host *reconcile.Host, cl *Client, s settings, self uint64) ([]string, error) {
	local := c.localClientURL()
	members, err := cl.MemberList(ctx, local)
	if err != nil {
		return nil, fmt.Errorf("list members: %w", err)
	}
	var actions []string
	var errs []error
	for _, m := range members {
		if m.ID == self || !slices.Contains(s.lost, m.ID) {
			continue
		}
		if peer := s.peerOf(m, c.cfg.PeerPort); peer != "" {
			logger(host).Warn("the role names a member as lost that is a peer's; it stays", "id", fmt.Sprintf("%x", m.ID), "peer", peer)
			continue
		}
		err := c.retryReconfig(ctx, func() error { return cl.MemberRemove(ctx, local, m.ID) })
		if err != nil && !isMemberNotFound(err) {
			errs = append(errs, fmt.Errorf("remove member %x: %w", m.ID, err))
			continue
		}
		name := cmp.Or(m.Name, "never started")
		actions = append(actions, fmt.Sprintf("removed member %x (%s) of a master removed without leaving", m.ID, name))
		logger(host).Info("removed the etcd member of a lost master", "id", fmt.Sprintf("%x", m.ID), "name", name, "peerURLs", m.PeerURLs)
	}
	return actions, errors.Join(errs...)
}

// orphanLearnerAfter is how long a learner that never started, and is no
// master of the role, must have been seen so before it is removed: far
// longer than a role lags behind the scale-out that added its master.
const orphanLearnerAfter = 2 * time.Minute

// removeOrphanLearners removes the learners left by masters that added
// themselves and were gone before they started etcd, and before their
// agent reported the member (so the controller cannot name it lost): a
// learner with no name, whose peer URL is no master's of the role, seen so
// on passes orphanLearnerAfter apart. etcd takes one learner at a time, so
// such a member would refuse every later master's join. Called by a
// healthy voting member.
func (c *Component) removeOrphanLearners(ctx context.Context, host *reconcile.Host, cl *Client, s settings, self uint64) ([]string, error) {
	members, err := cl.MemberList(ctx, c.localClientURL())
	if err != nil {
		return nil, fmt.Errorf("list members: %w", err)
	}
	now := c.cfg.Now()
	seen := map[uint64]time.Time{}
	var actions []string
	var errs []error
	for _, m := range members {
		if !m.IsLearner || m.Name != "" || m.ID == self || s.peerOf(m, c.cfg.PeerPort) != "" {
			continue
		}
		first, ok := c.orphansSeen[m.ID]
		if !ok {
			first = now
		}
		if now.Sub(first) < orphanLearnerAfter {
			seen[m.ID] = first
			continue
		}
		err := c.retryReconfig(ctx, func() error { return cl.MemberRemove(ctx, c.localClientURL(), m.ID) })
		if err != nil && !isMemberNotFound(err) {
			seen[m.ID] = first
			errs = append(errs, fmt.Errorf("remove learner %x: %w", m.ID, err))
			continue
		}
		actions = append(actions, fmt.Sprintf("removed learner %x (%s): never started, and no master of the role", m.ID, strings.Join(m.PeerURLs, ",")))
		logger(host).Warn("removed a learner that never started, of no master of the role", "id", fmt.Sprintf("%x", m.ID), "peerURLs", m.PeerURLs, "seen_since", first)
	}
	c.orphansSeen = seen
	return actions, errors.Join(errs...)
}

// promote asks the voting members to promote learner id. The leader
// decides, and refuses while the learner lags (isLearnerNotReady); any
// member forwards the request to it.
func (c *Component) promote(ctx context.Context, cl *Client, s settings, id uint64) error {
	var errs []error
	for _, p := range s.others() {
		endpoint := clientURL(netip.MustParseAddr(p.Address), c.cfg.ClientPort)
		err := cl.MemberPromote(ctx, endpoint, id)
		switch {
		case err == nil:
			return nil
		case isLearnerNotReady(err):
			return err
		case isNotLearner(err):
			// Promoted already; the next status read shows it.
			return nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return errors.New("no other member to promote this learner")
	}
	return errors.Join(errs...)
}

// isNotLearner reports etcd's refusal to promote a member that is not a
// learner.
func isNotLearner(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == codeFailedPrecondition &&
		strings.Contains(ae.Message, "can only promote a learner member") && !strings.Contains(ae.Message, "in sync")
}
