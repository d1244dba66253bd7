package cluster

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/store"
)

// An upgrade by reimage moves every node to a new image without patching
// any: masters are replaced one at a time, each by a new VM that takes its
// data disk (swap.go), and workers are surged: a new worker joins first,
// then the old one leaves and goes. The cluster record holds the upgrade;
// the engine drives it from each pass (driveUpgrade), so that a restarted
// controller resumes it from the store.

// upgradeRecord is a cluster's newest upgrade.
type upgradeRecord struct {
	Image             string `json:"image"`
	KubernetesVersion string `json:"kubernetesVersion"`
	Template          string `json:"template"`
	Snapshot          string `json:"snapshot,omitempty"`
	TemplateBytes     int64  `json:"templateBytes"`
	FromImage         string `json:"fromImage"`
	FromVersion       string `json:"fromVersion"`
	MaxSurge          int    `json:"maxSurge"`
	// FreshDisk names the masters whose replacements take the fresh-disk
	// path.
	FreshDisk []string `json:"freshDisk,omitempty"`
	By        string   `json:"by"`
	// Abort asks the engine to stop: the replacement under way rolls
	// back.
	Abort bool `json:"abort,omitempty"`
	// RollBack says why the engine stops the upgrade on its own: a surge
	// worker that refused its role or was not Ready in time. As on an
	// abort, the surge workers not yet serving go first.
	RollBack   string    `json:"rollBack,omitempty"`
	State      string    `json:"state"`
	Message    string    `json:"message,omitempty"`
	StartedAt  time.Time `json:"startedAt"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
}

func (u *upgradeRecord) running() bool { return u != nil && u.State == v1.UpgradeRunning }

// stopping reports whether the running upgrade takes back its surge
// workers and stops once none is in flight.
func (u *upgradeRecord) stopping() bool { return u.Abort || u.RollBack != "" }

// upgraded reports whether the machine runs what the cluster's newest
// upgrade moves to, its replacement done.
func (m *machine) upgraded(rec *record) bool {
	image, _, _ := m.source(rec)
	return rec.Upgrade != nil && image == rec.Upgrade.Image && m.kubernetesVersion(rec) == rec.Upgrade.KubernetesVersion && !m.swapping()
}

// DefaultUpgradeNodeTimeout bounds how long a new VM has to report Ready
// before its replacement is rolled back.
const DefaultUpgradeNodeTimeout = 15 * time.Minute

// Upgrade starts moving the cluster to another node image, or, with
// req.Abort, stops the running upgrade.
func (s *Service) Upgrade(ctx context.Context, name string, req v1.UpgradeRequest, by string) (v1.Operation, error) {
	if req.Abort {
		return s.abortUpgrade(name, by)
	}
	if req.Image == "" && len(req.FreshDisk) > 0 {
		return s.amendUpgrade(name, req.FreshDisk, by)
	}
	rec, machines, statuses, err := s.clusterState(name)
	if err != nil {
		return v1.Operation{}, err
	}
	if err := checkUpgradable(rec, machines, statuses); err != nil {
		return v1.Operation{}, err
	}
	if _, err := checkFreshDisk(rec, machines, req.FreshDisk); err != nil {
		return v1.Operation{}, err
	}
	img, err := s.nodeImage(rec.Spec.Provider, req.Image)
	if err != nil {
		return v1.Operation{}, err
	}
	version := cmp.Or(req.KubernetesVersion, rec.Spec.KubernetesVersion)
	if !slices.Contains(img.KubernetesVersions, version) {
		return v1.Operation{}, refuse(Invalid, "kubernetesVersion", "image %s carries %v, not %s; give --kubernetes-version", img.Name, img.KubernetesVersions, version)
	}
	if err := checkVersionSkew(rec, machines, version); err != nil {
		return v1.Operation{}, err
	}
	if img.Name == rec.Spec.Image && version == rec.Spec.KubernetesVersion {
		return v1.Operation{}, refuse(Conflict, "image", "cluster %q already runs image %s with Kubernetes %s", name, img.Name, version)
	}

	ctx, cancel := context.WithTimeout(ctx, precheckTimeout)
	defer cancel()
	vc, err := s.sessionFor(ctx, rec.Spec.Provider)
	if err != nil {
		return v1.Operation{}, err
	}
	tmpl, err := findTemplate(ctx, vc, img)
	if err != nil {
		return v1.Operation{}, err
	}
	// The surge workers need room: a worker's OS disk each, on the new
	// template's size.
	target := *rec
	target.TemplateBytes = tmpl.CapacityBytes
	var surge []machine
	for i := 0; i < min(req.MaxSurge, rec.Spec.Workers); i++ {
		surge = append(surge, machine{Name: fmt.Sprintf("surge-%d", i), Role: v1.RoleWorker})
	}
	if len(surge) > 0 {
		if err := precheck(ctx, vc, &target, surge); err != nil {
			return v1.Operation{}, err
		}
	}

	now := s.cfg.Now().UTC()
	return s.change(name, rec.Generation, v1.OperationUpgrade, func(tx *store.Tx, cur *record, sec *secrets) (string, error) {
		if cur.Upgrade.running() {
			return "", refuse(Conflict, "", "cluster %q is already upgrading to %s", name, cur.Upgrade.Image)
		}
		if cur.Restore.running() {
			return "", restoreRuns(cur)
		}
		cur.Upgrade = &upgradeRecord{Image: img.Name, KubernetesVersion: version, Template: tmpl.Path, Snapshot: tmpl.Snapshot,
			TemplateBytes: tmpl.CapacityBytes, FromImage: rec.Spec.Image, FromVersion: rec.Spec.KubernetesVersion,
			MaxSurge: req.MaxSurge, FreshDisk: req.FreshDisk, By: by, State: v1.UpgradeRunning, StartedAt: now}
		// The masters' roles ask for an etcd snapshot since now, which the
		// first replacement waits for (checkSnapshots).
		if err := putRoles(tx, cur, sec); err != nil {
			return "", err
		}
		return fmt.Sprintf("upgrade from %s (Kubernetes %s) to %s (Kubernetes %s), by %s: masters one at a time with their data disks moved, then workers %d at a time",
			rec.Spec.Image, rec.Spec.KubernetesVersion, img.Name, version, by, req.MaxSurge), nil
	})
}

// abortUpgrade asks the running upgrade to stop: the master being
// replaced rolls back at once (also one whose workflow failed), and the
// engine takes back surge workers not yet serving. It answers with the
// upgrade's operation, which ends when the upgrade has stopped.
func (s *Service) abortUpgrade(name, by string) (v1.Operation, error) {
	return s.changeUpgrade(name, "abort", by, func(tx *store.Tx, rec *record, machines []machine, now time.Time) error {
		rec.Upgrade.Abort = true
		for _, m := range machines {
			if !m.swapping() || m.Swap.Rollback {
				continue
			}
			m.Swap.Rollback, m.Swap.Why = true, "the upgrade was aborted by "+by
			m.Failed, m.Attempts, m.NextTry, m.LastError = false, 0, time.Time{}, ""
			if err := putMachine(tx, &m); err != nil {
				return err
			}
		}
		sec, err := loadSecrets(tx, name)
		if err != nil {
			return err
		}
		if err := putRoles(tx, rec, sec); err != nil {
			return err
		}
		_, err = addEvent(tx, name, v1.Event{Time: now, Type: "Warning", Reason: "UpgradeAbort",
			Message: fmt.Sprintf("abort the upgrade to %s, by %s: the node being replaced rolls back", rec.Upgrade.Image, by)})
		return err
	})
}

// changeUpgrade changes the running upgrade (an abort or an amendment)
// in one transaction, and answers with its operation.
func (s *Service) changeUpgrade(name, what, by string, change func(tx *store.Tx, rec *record, machines []machine, now time.Time) error) (v1.Operation, error) {
	now := s.cfg.Now().UTC()
	var op v1.Operation
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		rec, err := s.load(tx, name)
		if err != nil {
			return err
		}
		if !rec.Upgrade.running() {
			return refuse(Conflict, "", "cluster %q runs no upgrade to %s", name, what)
		}
		machines, err := loadMachines(tx, name)
		if err != nil {
			return err
		}
		if err := change(tx, rec, machines, now); err != nil {
			return err
		}
		if err := tx.Put(store.Clusters, name, rec); err != nil {
			return err
		}
		op, err = upgradeOperation(tx, rec, now)
		return err
	})
	if err != nil {
		return v1.Operation{}, err
	}
	s.log.Info("upgrade changed", "cluster", name, "change", what, "by", by, "operation", op.ID)
	s.engine.kick(name)
	return op, nil
}

// upgradeOperation is the running upgrade's operation; when it ended
// (a node failed), a change to the upgrade gets one of its own, which
// ends with the upgrade.
func upgradeOperation(tx *store.Tx, rec *record, now time.Time) (v1.Operation, error) {
	ops, err := tx.ClusterOperations(rec.Spec.Name)
	if err != nil {
		return v1.Operation{}, err
	}
	for _, o := range ops {
		if o.Kind == v1.OperationUpgrade && o.State == v1.OperationRunning {
			return o, nil
		}
	}
	op := v1.Operation{Kind: v1.OperationUpgrade, Cluster: rec.Spec.Name, Generation: rec.Generation, CreatedAt: now}
	return op, tx.AddOperation(&op)
}

// checkFreshDisk refuses fresh disks for nodes that are not masters of
// the cluster, or for a cluster whose etcd has no quorum without the
// member being replaced: its data would be lost. It returns the index of
// each node's machine.
func checkFreshDisk(rec *record, machines []machine, nodes []string) ([]int, error) {
	var found []int
	for i, n := range nodes {
		field := fmt.Sprintf("freshDisk[%d]", i)
		i := slices.IndexFunc(machines, func(m machine) bool { return m.Name == n && !m.Remove })
		switch {
		case i < 0:
			return nil, refuse(Invalid, field, "cluster %q has no node %s", rec.Spec.Name, n)
		case machines[i].Role != v1.RoleMaster:
			return nil, refuse(Invalid, field, "%s is a %s: only masters have a data disk", n, machines[i].Role)
		}
		if err := freshDiskQuorum(rec, machines, n, field); err != nil {
			return nil, err
		}
		found = append(found, i)
	}
	return found, nil
}

// freshDiskQuorum refuses a fresh disk for master node (asked for in
// field) when etcd keeps no quorum without its member.
func freshDiskQuorum(rec *record, machines []machine, node, field string) error {
	masters := 0
	for _, m := range machines {
		if m.stayingMaster() {
			masters++
		}
	}
	if masters < 3 {
		return refuse(Invalid, field, "cluster %q has %d master(s): etcd keeps no quorum without %s's member, and its data would be lost", rec.Spec.Name, masters, node)
	}
	return nil
}

// amendUpgrade puts masters on the fresh-disk path in the running
// upgrade: one whose replacement stopped on a missing disk is retried,
// with a new, empty disk.
func (s *Service) amendUpgrade(name string, nodes []string, by string) (v1.Operation, error) {
	return s.changeUpgrade(name, "amend", by, func(tx *store.Tx, rec *record, machines []machine, now time.Time) error {
		switch {
		case rec.Upgrade.Abort:
			return refuse(Conflict, "", "cluster %q's upgrade is being aborted", name)
		case rec.Upgrade.RollBack != "":
			return refuse(Conflict, "", "cluster %q's upgrade is being rolled back: %s", name, rec.Upgrade.RollBack)
		}
		found, err := checkFreshDisk(rec, machines, nodes)
		if err != nil {
			return err
		}
		for i, n := range nodes {
			m := machines[found[i]]
			if m.swapping() {
				if !m.takeFreshDisk(now) {
					return refuse(Conflict, fmt.Sprintf("freshDisk[%d]", i), "%s's replacement is past its data disk (%s)", n, m.Swap.Step)
				}
				if err := putMachine(tx, &m); err != nil {
					return err
				}
			}
			if !slices.Contains(rec.Upgrade.FreshDisk, n) {
				rec.Upgrade.FreshDisk = append(rec.Upgrade.FreshDisk, n)
			}
			if _, err := addEvent(tx, name, v1.Event{Time: now, Type: "Warning", Node: n, Reason: "UpgradeFreshDisk",
				Message: fmt.Sprintf("%s: fresh-disk path, chosen by %s: its new VM gets an empty data disk and joins etcd as a new member in place of the old; the old disk's file is kept",
					n, by)}); err != nil {
				return err
			}
		}
		return nil
	})
}

// checkUpgradable refuses an upgrade of a cluster that is busy or not
// healthy: every node must report Ready (and its Kubernetes Node Ready),
// and every master must be a started etcd member.
func checkUpgradable(rec *record, machines []machine, statuses map[string]v1.Status) error {
	name := rec.Spec.Name
	switch {
	case rec.Deleting:
		return refuse(Conflict, "", "cluster %q is being deleted", name)
	case rec.Upgrade.running():
		return refuse(Conflict, "", "cluster %q is already upgrading to %s; wait, or stop it with --abort", name, rec.Upgrade.Image)
	case rec.ObservedGeneration != rec.Generation:
		return refuse(Conflict, "", "cluster %q has an operation running (generation %d of %d done); wait for it first", name, rec.ObservedGeneration, rec.Generation)
	}
	var masters []machine
	for _, m := range machines {
		switch {
		case m.Remove && m.settled():
			continue // a VM kept powered off for troubleshooting
		case m.Remove:
			return refuse(Conflict, "", "node %s of cluster %q is being removed; wait for it first", m.Name, name)
		case !m.settled() || m.Failed:
			return refuse(Conflict, "", "node %s of cluster %q is not provisioned (step %q); retry or wait first", m.Name, name, m.Step)
		}
		st, ok := statuses[m.Name]
		switch {
		case !ok || st.Phase != v1.PhaseReady:
			return refuse(PrecheckFailed, "nodes", "node %s is not Ready (%s); every node must be before an upgrade", m.Name, agentReport(st, ok))
		case st.KubernetesNode != nil && st.KubernetesNode.Ready != "True":
			return refuse(PrecheckFailed, "nodes", "the Kubernetes Node %s is %s; every Node must be Ready before an upgrade", m.Name, kubernetesReady(st.KubernetesNode.Ready))
		}
		// The old VM's agent is told to hand over or to keep its pods:
		// one that predates these would refuse its role, and the node
		// would neither serve nor step aside.
		need := v1.CapabilityKeepPods
		if m.Role == v1.RoleMaster {
			need = v1.CapabilityHandOver
		}
		if !slices.Contains(st.Capabilities, need) {
			return refuse(PrecheckFailed, "nodes", "the agent of node %s (version %s) does not report the capability %s: it predates upgrades by reimage, and would refuse the role that asks its VM to step aside",
				m.Name, cmp.Or(st.AgentVersion, "unknown"), need)
		}
		if m.Role == v1.RoleMaster {
			masters = append(masters, m)
		}
	}
	if err := checkMasters(masters, statuses); err != nil {
		return refuse(PrecheckFailed, "nodes", "%v; every master must be a started, healthy etcd member before an upgrade", err)
	}
	return nil
}

// checkVersionSkew holds an upgrade to version against the cluster's and
// each node's: an upgrade that stopped part-way left those it had
// replaced on its newer version, which no upgrade may take back down.
func checkVersionSkew(rec *record, machines []machine, version string) error {
	if err := checkSkew(rec.Spec.KubernetesVersion, version, "the cluster's"); err != nil {
		return err
	}
	for _, m := range machines {
		if m.Remove || m.KubernetesVersion == "" {
			continue
		}
		if err := checkSkew(m.KubernetesVersion, version, fmt.Sprintf("node %s's", m.Name)); err != nil {
			return err
		}
	}
	return nil
}

// checkSkew applies Kubernetes' version skew policy to an upgrade from
// whose version from: the same minor or the next one, never down.
func checkSkew(from, to, whose string) error {
	fm, fn, ok1 := minorOf(from)
	tm, tn, ok2 := minorOf(to)
	switch {
	case !ok1 || !ok2:
		return refuse(Invalid, "kubernetesVersion", "cannot compare %q with %q", from, to)
	case tm != fm || tn < fn:
		return refuse(Invalid, "kubernetesVersion", "%s is older than %s %s: Kubernetes never goes down", to, whose, from)
	case tn > fn+1:
		return refuse(Invalid, "kubernetesVersion", "%s skips a minor from %s %s: upgrade one minor at a time", to, whose, from)
	case tn == fn && patchOf(to) < patchOf(from):
		return refuse(Invalid, "kubernetesVersion", "%s is older than %s %s: Kubernetes never goes down", to, whose, from)
	}
	return nil
}

func minorOf(v string) (major, minor int, ok bool) {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	a, err1 := strconv.Atoi(parts[0])
	b, err2 := strconv.Atoi(parts[1])
	return a, b, err1 == nil && err2 == nil
}

func patchOf(v string) int {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 3 {
		return 0
	}
	end := strings.IndexAny(parts[2], "-+")
	if end < 0 {
		end = len(parts[2])
	}
	n, _ := strconv.Atoi(parts[2][:end])
	return n
}

// driveUpgrade moves a running upgrade on by one decision per pass: it
// stops it when a replacement rolled back or an abort has nothing left in
// flight, finishes it when every node runs the new image, and otherwise
// starts the next replacement: a master (one at a time, the first master
// last, so that the cluster-wide parts move once every apiserver is new),
// then workers MaxSurge at a time. It returns when to look again.
func (e *engine) driveUpgrade(ctx context.Context, p *pass, machines []machine) (time.Duration, error) {
	rec := p.rec
	u := rec.Upgrade
	var swapping, rolledBack *machine
	var masters, oldWorkers []machine
	first := ""
	inflight, upgraded, total := 0, 0, 0
	for i := range machines {
		m := &machines[i]
		if m.ReplacedBy != "" {
			inflight++ // a worker whose replacement is not done
		}
		if m.Remove {
			continue
		}
		total++
		image, _, _ := m.source(rec)
		onTarget := image == u.Image && m.kubernetesVersion(rec) == u.KubernetesVersion
		if onTarget && !m.swapping() {
			upgraded++
		}
		switch {
		case m.Swap != nil && m.Swap.Step == swapRolledBack:
			rolledBack = m
		case m.Swap != nil:
			swapping = m
		}
		if m.Role == v1.RoleMaster && (first == "" || m.Name < first) {
			first = m.Name
		}
		switch {
		case onTarget:
		case m.Role == v1.RoleMaster:
			masters = append(masters, *m)
		case m.ReplacedBy == "":
			oldWorkers = append(oldWorkers, *m)
		}
	}

	switch {
	case rolledBack != nil:
		state := v1.UpgradeRolledBack
		if u.Abort {
			state = v1.UpgradeAborted
		}
		return 0, e.stopUpgrade(p, rolledBack, state,
			fmt.Sprintf("%s was rolled back to its old VM: %s", rolledBack.Name, rolledBack.Swap.Why))
	case swapping != nil:
		return e.cfg.StatusPoll, nil // its machine's own steps move it
	case u.stopping():
		if err := e.abortSurge(p, machines); err != nil {
			return 0, err
		}
		if inflight > 0 {
			return e.cfg.StatusPoll, nil
		}
		if u.Abort {
			return 0, e.stopUpgrade(p, nil, v1.UpgradeAborted, fmt.Sprintf("aborted by an admin; %d of %d nodes run %s", upgraded, total, u.Image))
		}
		return 0, e.stopUpgrade(p, nil, v1.UpgradeRolledBack, fmt.Sprintf("%s; its surge workers went, and %d of %d nodes run %s", u.RollBack, upgraded, total, u.Image))
	}
	if len(masters) > 0 {
		return e.startSwap(p, pickMaster(masters, first).Name)
	}
	done, moved, err := e.advanceSurge(ctx, p, machines, oldWorkers, inflight)
	switch {
	case err != nil:
		return e.cfg.StatusPoll, err
	case moved:
		return 0, nil // the next pass takes up the new and the leaving workers now
	case !done:
		return e.cfg.StatusPoll, nil
	}
	return 0, e.stopUpgrade(p, nil, v1.UpgradeSucceeded, fmt.Sprintf("every node runs %s with Kubernetes %s", u.Image, u.KubernetesVersion))
}

// pickMaster chooses the next master to replace: the first master (rank
// 0: the lowest name, as roles rank them) last.
func pickMaster(masters []machine, first string) machine {
	slices.SortFunc(masters, func(a, b machine) int { return strings.Compare(a.Name, b.Name) })
	for _, m := range masters {
		if m.Name != first {
			return m
		}
	}
	return masters[0]
}

// startSwap begins a master's replacement once every master reports
// Ready with its etcd member: its role says Leave with HandOver from
// here.
func (e *engine) startSwap(p *pass, node string) (time.Duration, error) {
	name := p.rec.Spec.Name
	var machines []machine
	var statuses map[string]v1.Status
	err := e.cfg.Store.View(func(tx *store.Tx) error {
		var err error
		if machines, err = loadMachines(tx, name); err != nil {
			return err
		}
		statuses = statusesOf(tx, machines)
		return nil
	})
	if err != nil {
		return 0, err
	}
	var masters []machine
	for _, mm := range machines {
		if mm.stayingMaster() {
			masters = append(masters, mm)
		}
	}
	err = checkMasters(masters, statuses)
	if err == nil {
		err = checkSnapshots(p.rec, masters, statuses)
	}
	if err != nil {
		// Not now: the next master waits for the cluster to be whole, and
		// for its etcd to be saved.
		e.condition(name, v1.Condition{Type: v1.ConditionUpgrading, Status: "True", Reason: "Waiting", Message: err.Error()})
		return e.cfg.StatusPoll, nil
	}
	e.condition(name, v1.Condition{Type: v1.ConditionUpgrading, Status: "True", Reason: "Replacing",
		Message: fmt.Sprintf("to %s (Kubernetes %s)", p.rec.Upgrade.Image, p.rec.Upgrade.KubernetesVersion)})
	now := e.cfg.Now().UTC()
	err = e.cfg.Store.Update(func(tx *store.Tx) error {
		cur, err := runningUpgrade(tx, name)
		if err != nil || cur == nil {
			return err
		}
		var m machine
		if err := tx.Get(store.Machines, machineKey(name, node), &m); err != nil {
			return err
		}
		if m.Remove || m.Swap != nil {
			return nil // changed since the pass read it: the next pass decides again
		}
		m.Swap = newSwap(cur, &m, now, now.Add(e.cfg.LeaveTimeout), statuses[m.Name].EtcdMemberID)
		m.Swap.FreshDisk = slices.Contains(cur.Upgrade.FreshDisk, m.Name)
		ev := v1.Event{Time: now, Type: "Normal", Node: m.Name, Reason: "Upgrade", Message: fmt.Sprintf(
			"%s: replacing its VM %s by a clone of %s that takes its data disk (etcd member %s); first it hands over",
			m.Name, m.VM, cur.Upgrade.Image, m.Swap.MemberID)}
		if m.Swap.FreshDisk {
			ev = v1.Event{Time: now, Type: "Warning", Node: m.Name, Reason: "UpgradeFreshDisk", Message: fmt.Sprintf(
				"%s: replacing its VM %s by a clone of %s on the fresh-disk path (chosen by %s): the new VM gets an empty data disk and joins etcd as a new member in place of %s, which it removes; the old disk %s is kept; first it hands over",
				m.Name, m.VM, cur.Upgrade.Image, cur.Upgrade.By, m.Swap.MemberID, dataDisk(cur, &m).Path())}
		}
		if err := putMachine(tx, &m); err != nil {
			return err
		}
		if err := putRoles(tx, cur, p.sec); err != nil {
			return err
		}
		_, err = addEvent(tx, name, ev)
		return err
	})
	if err == nil {
		e.cfg.Notify(NotifyKey(name))
	}
	return 0, err
}

// runningUpgrade re-reads a cluster whose upgrade a pass acts on; nil if
// the upgrade no longer runs unstopped. The pass decided on a record it
// read before its vCenter calls, and an abort, a rollback or a delete may
// have been committed since: none of its steps may undo them.
func runningUpgrade(tx *store.Tx, name string) (*record, error) {
	cur, err := loadCluster(tx, name)
	if err != nil {
		return nil, err
	}
	if cur.Deleting || !cur.Upgrade.running() || cur.Upgrade.stopping() {
		return nil, nil
	}
	return cur, nil
}

// checkMasters says why a master may not be replaced now: every master
// must report Ready, healthy, as a distinct etcd member.
func checkMasters(masters []machine, statuses map[string]v1.Status) error {
	members := map[string]string{}
	for _, m := range masters {
		st, ok := statuses[m.Name]
		switch {
		case !m.settled() || m.Failed:
			return fmt.Errorf("master %s is not provisioned (step %q)", m.Name, m.Step)
		case !ok || st.Phase != v1.PhaseReady:
			return fmt.Errorf("master %s is not Ready (%s)", m.Name, agentReport(st, ok))
		case st.KubernetesNode != nil && st.KubernetesNode.Ready != "True":
			return fmt.Errorf("the Kubernetes Node %s is %s", m.Name, kubernetesReady(st.KubernetesNode.Ready))
		case st.EtcdMemberID == "":
			return fmt.Errorf("master %s reports no etcd member", m.Name)
		case members[st.EtcdMemberID] != "":
			return fmt.Errorf("masters %s and %s report the same etcd member %s", members[st.EtcdMemberID], m.Name, st.EtcdMemberID)
		}
		if bad := unhealthyComponents(st); len(bad) > 0 {
			return fmt.Errorf("master %s reports %s unhealthy", m.Name, strings.Join(bad, ", "))
		}
		members[st.EtcdMemberID] = m.Name
	}
	return nil
}

// checkSnapshots holds a master's replacement until every master whose
// agent takes etcd snapshots reports one since the upgrade started (the
// roles ask for it), so that a replacement gone wrong can be undone from
// one. Masters whose snapshots the spec turns off, and agents too old to
// take them, are not waited for.
func checkSnapshots(rec *record, masters []machine, statuses map[string]v1.Status) error {
	sched, err := rec.Spec.EtcdSnapshots.Schedule()
	if err != nil || !sched.Enabled || !rec.Upgrade.running() {
		return err
	}
	since := rec.Upgrade.StartedAt
	for _, m := range masters {
		st := statuses[m.Name]
		if !slices.Contains(st.Capabilities, v1.CapabilityEtcdSnapshots) {
			continue
		}
		if st.EtcdSnapshotAt == nil || !v1.EtcdSnapshotCovers(*st.EtcdSnapshotAt, since) {
			return fmt.Errorf("master %s has no etcd snapshot since the upgrade started at %s (a failed one is in its etcd component's message)",
				m.Name, since.Format(time.RFC3339))
		}
	}
	return nil
}

// advanceSurge moves the worker replacements on: an old worker whose
// surge worker reports Ready leaves and goes (the removal's own steps:
// drain, power off, destroy), and free surge slots get new workers for
// the next old ones. It reports whether every worker is done, and
// whether it moved any on (their machines' steps are owed a pass).
func (e *engine) advanceSurge(ctx context.Context, p *pass, machines []machine, oldWorkers []machine, inflight int) (done, moved bool, _ error) {
	rec, u := p.rec, p.rec.Upgrade
	byName := map[string]machine{}
	for _, m := range machines {
		byName[m.Name] = m
	}
	now := e.cfg.Now().UTC()
	// A surge worker that will never be Ready stops the upgrade, once
	// the Ready ones have taken over from their old workers.
	var fault, faulty string
	for _, old := range machines {
		if old.Remove || old.ReplacedBy == "" {
			continue
		}
		surge, ok := byName[old.ReplacedBy]
		if !ok || !surge.settled() {
			continue
		}
		st, reported := e.status(surge.Name)
		if !reported || st.Phase != v1.PhaseReady || st.KubernetesNode != nil && st.KubernetesNode.Ready != "True" {
			if why := e.surgeFault(surge, st, reported); why != "" && fault == "" {
				fault, faulty = why, surge.Name
			}
			continue
		}
		err := e.cfg.Store.Update(func(tx *store.Tx) error {
			cur, err := runningUpgrade(tx, rec.Spec.Name)
			if err != nil || cur == nil {
				return err
			}
			if err := markRemoved(tx, rec.Spec.Name, old.Name, false, now.Add(e.cfg.LeaveTimeout)); err != nil {
				return err
			}
			if err := putRoles(tx, cur, p.sec); err != nil {
				return err
			}
			_, err = addEvent(tx, rec.Spec.Name, v1.Event{Time: now, Type: "Normal", Node: old.Name, Reason: "Upgrade",
				Message: fmt.Sprintf("%s: its replacement %s (image %s) is Ready; %s drains and goes", old.Name, surge.Name, u.Image, old.Name)})
			return err
		})
		if err != nil {
			return false, moved, err
		}
		moved = true
		e.cfg.Notify(NotifyKey(rec.Spec.Name))
	}
	if fault != "" {
		return false, moved, e.rollBackUpgrade(p, faulty, fault)
	}
	slots := u.MaxSurge - inflight
	if slots <= 0 || len(oldWorkers) == 0 {
		return len(oldWorkers) == 0 && inflight == 0, moved, nil
	}
	slices.SortFunc(oldWorkers, cmpCreated)
	olds := oldWorkers[:min(slots, len(oldWorkers))]
	target := *rec
	target.Template, target.Snapshot, target.TemplateBytes = u.Template, u.Snapshot, u.TemplateBytes
	target.Spec.Image, target.Spec.KubernetesVersion = u.Image, u.KubernetesVersion
	var add []machine
	for range olds {
		add = append(add, target.newMachine(v1.RoleWorker, now))
	}
	if err := precheck(ctx, p.vc, &target, add); err != nil {
		e.condition(rec.Spec.Name, v1.Condition{Type: v1.ConditionUpgrading, Status: "True", Reason: "NoRoom", Message: err.Error()})
		return false, moved, nil
	}
	added := false
	err := e.cfg.Store.Update(func(tx *store.Tx) error {
		added = false // a retried transaction starts again
		cur, err := runningUpgrade(tx, rec.Spec.Name)
		if err != nil || cur == nil {
			return err
		}
		// Each old worker as it is now, not as the pass read it: one
		// removed or given a surge worker since gets none here.
		var replaced []machine
		var adding []machine
		for i, o := range olds {
			var old machine
			if err := tx.Get(store.Machines, machineKey(cur.Spec.Name, o.Name), &old); err != nil {
				return err
			}
			if old.Remove || old.ReplacedBy != "" {
				continue
			}
			add[i].ReplaceOf = old.Name
			old.ReplacedBy = add[i].Name
			replaced, adding = append(replaced, old), append(adding, add[i])
		}
		if len(adding) == 0 {
			return nil
		}
		added = true
		cur.WorkerSeq = target.WorkerSeq
		if err := tx.Put(store.Clusters, cur.Spec.Name, cur); err != nil {
			return err
		}
		var provider v1.Provider
		if err := tx.Get(store.Providers, cur.Spec.Provider, &provider); err != nil {
			return err
		}
		for i := range replaced {
			if err := putMachine(tx, &replaced[i]); err != nil {
				return err
			}
		}
		if err := allocateIPs(tx, &provider, adding); err != nil {
			return err
		}
		if err := addMachines(tx, cur, p.sec, adding, now); err != nil {
			return err
		}
		for i, old := range replaced {
			if _, err := addEvent(tx, cur.Spec.Name, v1.Event{Time: now, Type: "Normal", Node: adding[i].Name, Reason: "Upgrade",
				Message: fmt.Sprintf("%s: a new worker of image %s, to replace %s", adding[i].Name, u.Image, old.Name)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return false, moved, err
	}
	if added {
		e.cfg.Notify(NotifyKey(rec.Spec.Name))
	}
	return false, moved || added, nil
}

// surgeFault says why a surge worker that is not Ready never will be
// (newVMFault), its node timeout counted from its power-on.
func (e *engine) surgeFault(m machine, st v1.Status, reported bool) string {
	since := m.PoweredOnAt
	if since.IsZero() {
		since = m.CreatedAt // made by a controller that did not record its power-on
	}
	// Its name is new, so every report is its own.
	if why := e.newVMFault(since, st, reported); why != "" {
		return "the new worker " + m.Name + " " + why
	}
	return ""
}

// rollBackUpgrade makes the running upgrade stop on its own, for why:
// the next passes take back its surge workers, as an abort does.
func (e *engine) rollBackUpgrade(p *pass, node, why string) error {
	name := p.rec.Spec.Name
	err := e.cfg.Store.Update(func(tx *store.Tx) error {
		cur, err := loadCluster(tx, name)
		if err != nil {
			return err
		}
		if !cur.Upgrade.running() || cur.Upgrade.stopping() {
			return nil
		}
		cur.Upgrade.RollBack = why
		if err := tx.Put(store.Clusters, name, cur); err != nil {
			return err
		}
		_, err = addEvent(tx, name, v1.Event{Time: e.cfg.Now().UTC(), Type: "Warning", Node: node, Reason: "UpgradeRollback",
			Message: why + "; the upgrade stops: the surge workers not yet serving go, and the workers they were to replace stay"})
		return err
	})
	if err == nil {
		e.cfg.Notify(NotifyKey(name))
	}
	return err
}

// abortSurge takes back the surge workers whose old worker still serves:
// they leave and go, and the old one stays.
func (e *engine) abortSurge(p *pass, machines []machine) error {
	reason, why := "UpgradeAborted", "the upgrade was aborted"
	if !p.rec.Upgrade.Abort {
		reason, why = "UpgradeRollback", "the upgrade is rolled back"
	}
	now := e.cfg.Now().UTC()
	for _, old := range machines {
		if old.Remove || old.ReplacedBy == "" {
			continue
		}
		err := e.cfg.Store.Update(func(tx *store.Tx) error {
			cur, err := loadCluster(tx, p.rec.Spec.Name)
			if err != nil || cur.Deleting {
				return err // a delete takes every machine away already
			}
			// As it is now: a copy the pass read could undo a change
			// committed since.
			if err := tx.Get(store.Machines, machineKey(cur.Spec.Name, old.Name), &old); err != nil {
				return err
			}
			if old.Remove || old.ReplacedBy == "" {
				return nil
			}
			surge := old.ReplacedBy
			old.ReplacedBy = ""
			if err := putMachine(tx, &old); err != nil {
				return err
			}
			if err := markRemoved(tx, p.rec.Spec.Name, surge, false, now.Add(e.cfg.LeaveTimeout)); err != nil {
				return err
			}
			if err := putRoles(tx, cur, p.sec); err != nil {
				return err
			}
			_, err = addEvent(tx, p.rec.Spec.Name, v1.Event{Time: now, Type: "Warning", Node: surge, Reason: reason,
				Message: fmt.Sprintf("%s: %s; this surge worker goes and %s stays", surge, why, old.Name)})
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// stopUpgrade ends the running upgrade in state, with msg; a success makes
// the new image and version the cluster's, and a rolled-back machine's
// finished swap is cleared.
func (e *engine) stopUpgrade(p *pass, rolledBack *machine, state, msg string) error {
	name := p.rec.Spec.Name
	now := e.cfg.Now().UTC()
	var gen int64
	err := e.cfg.Store.Update(func(tx *store.Tx) error {
		cur, err := loadCluster(tx, name)
		if err != nil {
			return err
		}
		u := cur.Upgrade
		if !u.running() {
			return nil
		}
		u.State, u.Message, u.FinishedAt = state, msg, now
		if state == v1.UpgradeSucceeded {
			cur.Spec.Image, cur.Spec.KubernetesVersion = u.Image, u.KubernetesVersion
			cur.Template, cur.Snapshot, cur.TemplateBytes = u.Template, u.Snapshot, u.TemplateBytes
		}
		gen = cur.Generation
		if state == v1.UpgradeSucceeded {
			cur.Conditions = removeCondition(cur.Conditions, v1.ConditionUpgrading)
		} else {
			cur.Conditions = setCondition(cur.Conditions, v1.Condition{Type: v1.ConditionUpgrading, Status: "False", Reason: state, Message: msg}, now)
		}
		if err := tx.Put(store.Clusters, name, cur); err != nil {
			return err
		}
		if rolledBack != nil {
			var m machine
			if err := tx.Get(store.Machines, machineKey(name, rolledBack.Name), &m); err != nil {
				return err
			}
			m.Swap = nil
			if err := putMachine(tx, &m); err != nil {
				return err
			}
		}
		if err := putRoles(tx, cur, p.sec); err != nil {
			return err
		}
		typ := "Warning"
		if state == v1.UpgradeSucceeded {
			typ = "Normal"
		}
		_, err = addEvent(tx, name, v1.Event{Time: now, Type: typ, Reason: "Upgrade" + state, Message: "upgrade " + strings.ToLower(state) + ": " + msg})
		return err
	})
	if err != nil {
		return err
	}
	opState := v1.OperationFailed
	if state == v1.UpgradeSucceeded {
		opState = v1.OperationSucceeded
	}
	e.finishOperations(name, gen, opState, "upgrade "+strings.ToLower(state)+": "+msg)
	e.cfg.Log.Info("upgrade finished", "cluster", name, "state", state, "message", msg)
	return nil
}
