package cluster

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/store"
	"github.com/harmonykaas/harmony/internal/randstr"
)

// An etcd restore brings a cluster's keyspace back from one master's
// snapshot. The agents do the work (agent/components/etcd/restore.go);
// the controller picks the snapshot, orders them and follows them: every
// master's role asks at once, and each stops its control plane and its
// member, so that the old cluster serves no more; the other masters'
// roles say the source restored once it reports its part done, and only
// then do they join its cluster. Each agent starts its control plane
// afresh once its member is back. The restore ends when every master
// reports it.

// restoreRecord is a cluster's newest etcd restore, running or ended.
type restoreRecord struct {
	ID              string    `json:"id"`
	Source          string    `json:"source"`
	SnapshotTakenAt time.Time `json:"snapshotTakenAt"`
	// FromController: the snapshot is the controller's copy, which the
	// source fetches.
	FromController bool      `json:"fromController,omitempty"`
	By             string    `json:"by"`
	StartedAt      time.Time `json:"startedAt"`
	// FinishedAt is zero while it runs.
	FinishedAt time.Time `json:"finishedAt,omitzero"`
}

func (r *restoreRecord) running() bool { return r != nil && r.FinishedAt.IsZero() }

// snapshot names the snapshot restored, for messages.
func (r *restoreRecord) snapshot() string {
	if r.FromController {
		return fmt.Sprintf("the controller's copy of the snapshot of %s, through %s", r.SnapshotTakenAt.Format(time.RFC3339), r.Source)
	}
	return fmt.Sprintf("%s's snapshot of %s", r.Source, r.SnapshotTakenAt.Format(time.RFC3339))
}

// Restore starts an etcd restore of the cluster from a master's snapshot:
// by default the newest any master's agent reports; with FromController,
// from the controller's copy. A restore asked while another runs
// replaces it (one whose source cannot restore would otherwise hold the
// cluster for good).
func (s *Service) Restore(name string, req v1.RestoreRequest, by string) (v1.Operation, error) {
	rec, machines, statuses, err := s.clusterState(name)
	if err != nil {
		return v1.Operation{}, err
	}
	var copies []time.Time
	if req.FromController {
		list, err := s.cfg.copiesOf(rec)
		if err != nil {
			return v1.Operation{}, err
		}
		for _, c := range list {
			copies = append(copies, c.TakenAt)
		}
	}
	source, takenAt, err := pickRestore(rec, machines, statuses, copies, req)
	if err != nil {
		return v1.Operation{}, err
	}
	now := s.cfg.Now().UTC()
	suffix, err := randstr.Lower(4)
	if err != nil {
		return v1.Operation{}, err
	}
	id := "r-" + now.Format("20060102t150405") + "-" + suffix
	return s.change(name, rec.Generation, v1.OperationRestore, func(tx *store.Tx, cur *record, sec *secrets) (string, error) {
		if cur.Upgrade.running() {
			return "", upgradeRuns(cur)
		}
		if err := replacementRuns(tx, name); err != nil {
			return "", err
		}
		replaced := ""
		if cur.Restore.running() {
			replaced = fmt.Sprintf("; it replaces restore %s, which had not finished", cur.Restore.ID)
			if err := endOperations(tx, name, v1.OperationRestore, v1.OperationFailed, "replaced by restore "+id, now); err != nil {
				return "", err
			}
		}
		if cur.EtcdSnapshot.running() {
			if err := endSnapshotRequest(tx, cur, "etcd restore "+id+" began", now); err != nil {
				return "", err
			}
		}
		cur.Restore = &restoreRecord{ID: id, Source: source, SnapshotTakenAt: takenAt, FromController: req.FromController, By: by, StartedAt: now}
		cur.Conditions = setCondition(cur.Conditions, v1.Condition{Type: v1.ConditionRestoring, Status: "True", Reason: "Waiting",
			Message: restoreWaiting(cur.Restore, false, nil)}, now)
		if err := putRoles(tx, cur, sec); err != nil {
			return "", err
		}
		return fmt.Sprintf("etcd restore %s from %s, by %s: what was written since is lost; each master's state before it is kept on its data disk%s",
			id, cur.Restore.snapshot(), by, replaced), nil
	})
}

// endOperations ends the running operations of a kind of a cluster.
func endOperations(tx *store.Tx, cluster string, kind v1.OperationKind, state, msg string, now time.Time) error {
	ops, err := tx.ClusterOperations(cluster)
	if err != nil {
		return err
	}
	for _, o := range ops {
		if o.Kind != kind || o.State != v1.OperationRunning {
			continue
		}
		o.State, o.Message, o.FinishedAt = state, msg, now
		if err := tx.Put(store.Operations, o.ID, o); err != nil {
			return err
		}
	}
	return nil
}

// pickRestore checks that the cluster can be restored and picks the
// source and its snapshot, or, with req.FromController, one of the
// controller's copies (copies: when each was taken, oldest first).
func pickRestore(rec *record, machines []machine, statuses map[string]v1.Status, copies []time.Time, req v1.RestoreRequest) (string, time.Time, error) {
	name := rec.Spec.Name
	switch {
	case rec.Deleting:
		return "", time.Time{}, refuse(Conflict, "", "cluster %q is being deleted", name)
	case rec.Upgrade.running():
		return "", time.Time{}, upgradeRuns(rec)
	}
	var masters []string
	for _, m := range machines {
		if !m.stayingMaster() {
			continue
		}
		if !m.provisioned() {
			return "", time.Time{}, refuse(Conflict, "", "master %s is not provisioned yet (%s); a restore needs every master's agent", m.Name, stepName(m.Step))
		}
		if st := statuses[m.Name]; !slices.Contains(st.Capabilities, v1.CapabilityEtcdRestore) {
			return "", time.Time{}, refuse(Conflict, "", "master %s's agent does not report %q (it never reported, or its image is older than etcd restores); upgrade it first",
				m.Name, v1.CapabilityEtcdRestore)
		}
		masters = append(masters, m.Name)
	}
	if len(masters) == 0 {
		return "", time.Time{}, refuse(Conflict, "", "cluster %q has no master to restore", name)
	}
	if req.FromController {
		return pickCopy(name, masters, statuses, copies, req)
	}
	source := req.Source
	if source == "" {
		var newest time.Time
		for _, m := range masters {
			if at := statuses[m].EtcdSnapshotAt; at != nil && at.After(newest) {
				source, newest = m, *at
			}
		}
		if source == "" {
			return "", time.Time{}, refuse(Conflict, "", "no master of cluster %q reports an etcd snapshot", name)
		}
	} else if !slices.Contains(masters, source) {
		return "", time.Time{}, refuse(Invalid, "source", "%s is not a master of cluster %q (masters: %s)", source, name, strings.Join(masters, ", "))
	}
	if req.SnapshotTakenAt != nil {
		// Checked here: a restore stops every master's control plane, and
		// a source without the snapshot would keep them stopped.
		taken := statuses[source].EtcdSnapshots
		if !slices.ContainsFunc(taken, req.SnapshotTakenAt.Equal) {
			var have []string
			for _, at := range taken {
				have = append(have, at.UTC().Format(time.RFC3339))
			}
			return "", time.Time{}, refuse(Invalid, "snapshotTakenAt", "%s reports no etcd snapshot taken at %s (it has: %s)",
				source, req.SnapshotTakenAt.UTC().Format(time.RFC3339), cmp.Or(strings.Join(have, ", "), "none"))
		}
		return source, req.SnapshotTakenAt.UTC(), nil
	}
	at := statuses[source].EtcdSnapshotAt
	if at == nil {
		return "", time.Time{}, refuse(Conflict, "source", "%s reports no etcd snapshot; name one with snapshotTakenAt", source)
	}
	return source, at.UTC(), nil
}

// pickCopy picks the source master, which fetches the controller's copy,
// and the copy.
func pickCopy(name string, masters []string, statuses map[string]v1.Status, copies []time.Time, req v1.RestoreRequest) (string, time.Time, error) {
	source := cmp.Or(req.Source, masters[0])
	if !slices.Contains(masters, source) {
		return "", time.Time{}, refuse(Invalid, "source", "%s is not a master of cluster %q (masters: %s)", source, name, strings.Join(masters, ", "))
	}
	if !slices.Contains(statuses[source].Capabilities, v1.CapabilityEtcdRestoreFromController) {
		return "", time.Time{}, refuse(Conflict, "source", "%s's agent does not report %q (its image is older than snapshot copies); name another source, or upgrade it first",
			source, v1.CapabilityEtcdRestoreFromController)
	}
	if len(copies) == 0 {
		return "", time.Time{}, refuse(Conflict, "fromController", "the controller keeps no copy of cluster %q's etcd snapshots", name)
	}
	if req.SnapshotTakenAt == nil {
		return source, copies[len(copies)-1], nil
	}
	if !slices.ContainsFunc(copies, req.SnapshotTakenAt.Equal) {
		var have []string
		for _, at := range copies {
			have = append(have, at.UTC().Format(time.RFC3339))
		}
		return "", time.Time{}, refuse(Invalid, "snapshotTakenAt", "the controller keeps no copy of a snapshot taken at %s (it has: %s)",
			req.SnapshotTakenAt.UTC().Format(time.RFC3339), strings.Join(have, ", "))
	}
	return source, req.SnapshotTakenAt.UTC(), nil
}

// cmpStep names a workflow step for a message.
func stepName(step string) string {
	if step == stepPending {
		return "pending"
	}
	return "last step " + step
}

// restoreSettings is what a master's role says of the running restore:
// every master is asked at once (each stops its control plane and its
// member, so the old cluster serves no more), and the others are told to
// join once the source reports its part done; nothing for an agent that
// does not act on it.
func restoreSettings(c *record, node string, agents agentSupport) *v1.EtcdRestore {
	r := c.Restore
	// Only the source fetches the controller's copy, and only an agent
	// that can is told to.
	fetches := r.running() && r.FromController && node == r.Source
	if !r.running() || !agents.etcdRestore[node] || fetches && !agents.etcdRestoreFromController[node] {
		return nil
	}
	return &v1.EtcdRestore{ID: r.ID, Source: r.Source, SnapshotTakenAt: r.SnapshotTakenAt,
		SourceRestored: agents.etcdRestored[r.Source] == r.ID, FromController: fetches}
}

// restoreRolesStale reports whether a master's role says another thing
// of the running restore than the agents' reports now make it say.
func restoreRolesStale(tx *store.Tx, rec *record, machines []machine) bool {
	if !rec.Restore.running() {
		return false
	}
	agents := agentSupportOf(tx, machines)
	for _, m := range machines {
		if !m.stayingMaster() {
			continue
		}
		role, ok := tx.Role(m.Name)
		if !ok {
			continue
		}
		var has *v1.EtcdRestore
		if role.Etcd != nil {
			has = role.Etcd.Restore
		}
		want := restoreSettings(rec, m.Name, agents)
		if (has == nil) != (want == nil) || has != nil && (has.ID != want.ID || has.Source != want.Source ||
			!has.SnapshotTakenAt.Equal(want.SnapshotTakenAt) || has.SourceRestored != want.SourceRestored || has.FromController != want.FromController) {
			return true
		}
	}
	return false
}

// restoreWaiting says what a running restore waits for: the source, with
// its etcd component's message, or the masters yet to join it.
func restoreWaiting(r *restoreRecord, sourceDone bool, waiting []string) string {
	switch {
	case !sourceDone && r.FromController:
		return fmt.Sprintf("waiting for %s to fetch and restore the controller's copy of the snapshot of %s", r.Source, r.SnapshotTakenAt.Format(time.RFC3339))
	case !sourceDone:
		return fmt.Sprintf("waiting for %s to restore its etcd snapshot of %s", r.Source, r.SnapshotTakenAt.Format(time.RFC3339))
	}
	return "waiting for " + strings.Join(waiting, ", ") + " to join the restored etcd cluster"
}

// driveRestore follows a running restore: it gives the roles again when
// the reports changed them (a missed report, a restarted controller), says
// what it waits for, and ends it once every master reports its part done.
func (e *engine) driveRestore(p *pass, machines []machine) (time.Duration, error) {
	name, r := p.rec.Spec.Name, p.rec.Restore
	var waiting []string
	sourceDone, sourceSays := false, ""
	err := e.cfg.Store.Update(func(tx *store.Tx) error {
		for _, m := range machines {
			if !m.stayingMaster() {
				continue
			}
			st, _ := tx.Status(m.Name)
			done := st.EtcdRestored == r.ID
			if m.Name == r.Source {
				sourceDone = done
				for _, c := range st.Components {
					if c.Name == "etcd" && !c.Healthy {
						sourceSays = c.Message
					}
				}
			}
			if !done {
				waiting = append(waiting, m.Name)
			}
		}
		if len(waiting) == 0 || !restoreRolesStale(tx, p.rec, machines) {
			return nil
		}
		return putRoles(tx, p.rec, p.sec)
	})
	if err != nil {
		return 0, err
	}
	if len(waiting) == 0 {
		return 0, e.finishRestore(p)
	}
	msg := restoreWaiting(r, sourceDone, waiting)
	if sourceSays != "" {
		msg += " (its etcd: " + v1.ClipMessage(sourceSays) + ")"
	}
	e.condition(name, v1.Condition{Type: v1.ConditionRestoring, Status: "True", Reason: "Waiting", Message: msg})
	return e.cfg.StatusPoll, nil
}

// finishRestore ends the running restore: the roles no longer ask for it
// (each agent keeps its record of it on its data disk).
func (e *engine) finishRestore(p *pass) error {
	name := p.rec.Spec.Name
	now := e.cfg.Now().UTC()
	var gen int64
	var msg string
	err := e.cfg.Store.Update(func(tx *store.Tx) error {
		cur, err := loadCluster(tx, name)
		if err != nil {
			return err
		}
		r := cur.Restore
		if !r.running() || r.ID != p.rec.Restore.ID {
			return nil
		}
		r.FinishedAt = now
		gen = cur.Generation
		cur.Conditions = removeCondition(cur.Conditions, v1.ConditionRestoring)
		if err := tx.Put(store.Clusters, name, cur); err != nil {
			return err
		}
		if err := putRoles(tx, cur, p.sec); err != nil {
			return err
		}
		msg = fmt.Sprintf("etcd restore %s done: every master serves the keyspace of %s, and restarted its control plane",
			r.ID, r.snapshot())
		_, err = addEvent(tx, name, v1.Event{Time: now, Type: "Normal", Reason: "Restored", Message: msg})
		return err
	})
	if err != nil || msg == "" {
		return err
	}
	e.finishOperations(name, gen, v1.OperationSucceeded, msg)
	e.cfg.Log.Info("etcd restore finished", "cluster", name, "restore", p.rec.Restore.ID)
	return nil
}
