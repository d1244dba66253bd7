package cluster

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/etcdcopies"
	"github.com/harmonykaas/harmony/controller/store"
)

// An etcd snapshot asked for by hand (before a risky change, say) uses
// what the schedule and the upgrade gate already use: every master's
// role asks for a snapshot since the request (Etcd.SnapshotSince), each
// agent takes one, and the first master to finish sends its copy to the
// controller, which takes it whatever its copy schedule (Rule.Want). The
// request ends when the controller keeps that copy; the roles go on
// asking, so that a master a pass behind takes its own.

// DefaultSnapshotTimeout bounds how long the masters have to take and
// copy a snapshot asked for by hand: an agent gives its own snapshot ten
// minutes.
const DefaultSnapshotTimeout = 15 * time.Minute

// snapshotRequest is a cluster's newest snapshot asked for by hand.
type snapshotRequest struct {
	v1.EtcdSnapshotRequest
	// After: a snapshot answers if it was taken after this, which is
	// newer than any snapshot the controller knew of when asked (the
	// masters' reports, its copies) and at most EtcdSnapshotSkew before
	// the request (the masters' clocks may be behind the controller's).
	After time.Time `json:"after"`
}

func (r *snapshotRequest) running() bool { return r != nil && r.FinishedAt.IsZero() }

// since is what the masters' roles ask for: a snapshot that
// EtcdSnapshotCovers it is one taken after the request, so that a
// scheduled one of a minute before does not answer it.
func (r *snapshotRequest) since() time.Time { return r.AskedAt.Add(v1.EtcdSnapshotSkew) }

// asks reports whether the masters' roles ask for the request's
// snapshot: unless it failed (Error is set only as it ends), so while it
// runs and after it ends with the first copy, for the masters a pass
// behind, each of which takes its own once (a snapshot that covers since
// satisfies the role). Not after a failure, when the agents would retry a
// failing snapshot every pass.
func (r *snapshotRequest) asks() bool { return r != nil && r.Error == "" }

// answers reports whether a snapshot taken at taken answers the request.
func (r *snapshotRequest) answers(taken time.Time) bool { return taken.After(r.After) }

// SnapshotEtcd asks every master of the cluster for an etcd snapshot now,
// copied to the controller.
func (s *Service) SnapshotEtcd(name, by string) (v1.Operation, error) {
	rec, machines, statuses, err := s.clusterState(name)
	if err != nil {
		return v1.Operation{}, err
	}
	copies, err := s.cfg.copiesOf(rec)
	if err != nil {
		return v1.Operation{}, err
	}
	known, err := checkSnapshotRequest(rec, machines, statuses, copies)
	if err != nil {
		return v1.Operation{}, err
	}
	now := s.cfg.Now().UTC()
	r := &snapshotRequest{EtcdSnapshotRequest: v1.EtcdSnapshotRequest{AskedAt: now, By: by}, After: later(known, now.Add(-v1.EtcdSnapshotSkew))}
	return s.change(name, rec.Generation, v1.OperationEtcdSnapshot, func(tx *store.Tx, cur *record, sec *secrets) (string, error) {
		if err := refuseSnapshotNow(cur); err != nil {
			return "", err
		}
		cur.EtcdSnapshot = r
		if err := putRoles(tx, cur, sec); err != nil {
			return "", err
		}
		return fmt.Sprintf("etcd snapshot asked by %s: every master takes one; the first taken answers, once the controller keeps its copy", by), nil
	})
}

// checkSnapshotRequest refuses a snapshot the cluster cannot take now,
// and says when the newest snapshot the controller knows of was taken.
func checkSnapshotRequest(rec *record, machines []machine, statuses map[string]v1.Status, copies []v1.EtcdSnapshotCopy) (time.Time, error) {
	if err := refuseSnapshotNow(rec); err != nil {
		return time.Time{}, err
	}
	name := rec.Spec.Name
	sched, err := rec.Spec.EtcdSnapshots.Schedule()
	if err != nil {
		return time.Time{}, err
	}
	if !sched.Enabled {
		return time.Time{}, refuse(Conflict, "etcdSnapshots", "cluster %q takes no etcd snapshots (etcdSnapshots.disabled)", name)
	}
	var known time.Time
	takers := 0
	for _, m := range machines {
		if !m.stayingMaster() {
			continue
		}
		st := statuses[m.Name]
		if slices.Contains(st.Capabilities, v1.CapabilityEtcdSnapshots) {
			takers++
		}
		if st.EtcdSnapshotAt != nil {
			known = later(known, *st.EtcdSnapshotAt)
		}
	}
	if takers == 0 {
		return time.Time{}, refuse(Conflict, "", "no master of cluster %q reports %q (they never reported, or their image is older than etcd snapshots)",
			name, v1.CapabilityEtcdSnapshots)
	}
	if len(copies) > 0 {
		known = later(known, copies[len(copies)-1].TakenAt)
	}
	return known, nil
}

// refuseSnapshotNow refuses a snapshot while the cluster is deleted,
// upgraded (which takes its own), restored, or taking one asked before.
func refuseSnapshotNow(rec *record) error {
	name := rec.Spec.Name
	switch r := rec.EtcdSnapshot; {
	case rec.Deleting:
		return refuse(Conflict, "", "cluster %q is being deleted", name)
	case rec.Upgrade.running():
		return upgradeRuns(rec)
	case rec.Restore.running():
		return refuse(Conflict, "", "cluster %q is being restored (restore %s); its members take no snapshot until it ends", name, rec.Restore.ID)
	case r.running():
		return refuse(Conflict, "", "cluster %q is taking the etcd snapshot %s asked at %s; harmonyctl cluster get %s shows when it is done",
			name, r.By, r.AskedAt.Format(time.RFC3339), name)
	}
	return nil
}

// endSnapshotRequest ends the cluster's running snapshot request and its
// operation: failed with why, or answered. The caller puts the cluster
// and its roles (which ask for no snapshot after a failure).
func endSnapshotRequest(tx *store.Tx, cur *record, why string, now time.Time) error {
	r := cur.EtcdSnapshot
	r.FinishedAt = now
	state, typ, reason := v1.OperationSucceeded, "Normal", "EtcdSnapshotTaken"
	msg := fmt.Sprintf("etcd snapshot asked by %s at %s: taken by %s at %s", r.By, r.AskedAt.Format(time.RFC3339), r.Master, r.TakenAt.Format(time.RFC3339))
	switch {
	case why != "":
		r.Error = why
		state, typ, reason = v1.OperationFailed, "Warning", "EtcdSnapshotFailed"
		msg = fmt.Sprintf("etcd snapshot asked by %s at %s failed: %s", r.By, r.AskedAt.Format(time.RFC3339), why)
	case r.Copied:
		msg += "; the controller keeps a copy"
	default:
		msg += "; no copy on the controller (the masters' agents send none: their image is older than snapshot copies)"
	}
	if err := endOperations(tx, cur.Spec.Name, v1.OperationEtcdSnapshot, state, msg, now); err != nil {
		return err
	}
	_, err := addEvent(tx, cur.Spec.Name, v1.Event{Time: now, Type: typ, Reason: reason, Message: msg})
	return err
}

// driveSnapshot follows the cluster's running snapshot request: it ends
// once the controller keeps a copy of a snapshot that answers it (or a
// master reports one, when no master's agent sends copies), and fails
// after SnapshotTimeout (a delete or a restore ends it as it starts). It
// returns how soon to look again; zero when nothing runs.
func (e *engine) driveSnapshot(name string) (time.Duration, error) {
	var rec *record
	var machines []machine
	var statuses map[string]v1.Status
	err := e.cfg.Store.View(func(tx *store.Tx) error {
		var err error
		if rec, err = loadCluster(tx, name); err != nil {
			return err
		}
		if machines, err = loadMachines(tx, name); err != nil {
			return err
		}
		statuses = statusesOf(tx, machines)
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil // deleted
	}
	if err != nil || !rec.EtcdSnapshot.running() {
		return 0, err
	}
	r := *rec.EtcdSnapshot
	copies, err := e.cfg.copiesOf(rec)
	if err != nil {
		return e.cfg.StatusPoll, err
	}
	why := ""
	if !answerSnapshotRequest(&r, machines, statuses, copies, e.cfg.Copies != nil) {
		waited := e.cfg.Now().Sub(r.AskedAt)
		if waited < e.cfg.SnapshotTimeout {
			return e.cfg.StatusPoll, nil
		}
		why = snapshotLate(&r, machines, statuses, waited)
	}
	now := e.cfg.Now().UTC()
	err = e.cfg.Store.Update(func(tx *store.Tx) error {
		cur, err := loadCluster(tx, name)
		if err != nil || !cur.EtcdSnapshot.running() || !cur.EtcdSnapshot.AskedAt.Equal(r.AskedAt) {
			return err
		}
		if a := cur.EtcdSnapshot; a.Copied { // SnapshotCopied answered meanwhile
			r.TakenAt, r.Master, r.Copied, why = a.TakenAt, a.Master, true, ""
		}
		cur.EtcdSnapshot = &r
		if err := endSnapshotRequest(tx, cur, why, now); err != nil {
			return err
		}
		if err := tx.Put(store.Clusters, name, cur); err != nil {
			return err
		}
		sec, err := loadSecrets(tx, name)
		if err != nil {
			return err
		}
		return putRoles(tx, cur, sec)
	})
	if err != nil {
		return e.cfg.StatusPoll, err
	}
	e.cfg.Notify(NotifyKey(name))
	e.cfg.Log.Info("etcd snapshot request ended", "cluster", name, "taken_at", r.TakenAt, "master", r.Master, "copied", r.Copied, "error", why)
	return 0, nil
}

// SnapshotCopied hears that the controller now keeps a copy of node's
// snapshot taken at takenAt: the answer to the cluster's snapshot
// request, if it runs and the copy answers it. Only the sender knows
// whose it is: masters asked at once name theirs to the same second.
func (s *Service) SnapshotCopied(c etcdcopies.Cluster, node string, takenAt time.Time) error {
	answered := false
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		rec, err := s.load(tx, c.Name)
		if err != nil || rec.UID != c.UID {
			return err
		}
		r := rec.EtcdSnapshot
		if !r.running() || r.Copied || !r.answers(takenAt) {
			return nil
		}
		r.TakenAt, r.Master, r.Copied = takenAt, node, true
		answered = true
		return tx.Put(store.Clusters, c.Name, rec)
	})
	if answered {
		s.engine.kick(c.Name)
	}
	return err
}

// answerSnapshotRequest fills in r's answer and reports whether it has
// one: the oldest copy on the controller that answers it, or, when no
// master's agent sends copies, the oldest snapshot a master reports that
// does.
func answerSnapshotRequest(r *snapshotRequest, machines []machine, statuses map[string]v1.Status, copies []v1.EtcdSnapshotCopy, keepsCopies bool) bool {
	if r.Copied { // SnapshotCopied said whose
		return true
	}
	copying := false
	var first time.Time
	var firstBy string
	for _, m := range machines {
		if !m.stayingMaster() {
			continue
		}
		st := statuses[m.Name]
		copying = copying || keepsCopies && slices.Contains(st.Capabilities, v1.CapabilityEtcdRestoreFromController)
		if at := st.EtcdSnapshotAt; at != nil && r.answers(*at) && (first.IsZero() || at.Before(first)) {
			first, firstBy = *at, m.Name
		}
	}
	for _, c := range copies {
		if !r.answers(c.TakenAt) {
			continue
		}
		// A copy SnapshotCopied did not hear of (the controller stopped
		// in between): whose it is, if only one master has that time.
		r.TakenAt, r.Copied, r.Master = c.TakenAt, true, ""
		for _, m := range machines {
			if !slices.ContainsFunc(statuses[m.Name].EtcdSnapshots, c.TakenAt.Equal) {
				continue
			}
			if r.Master != "" {
				r.Master = ""
				break
			}
			r.Master = m.Name
		}
		r.Master = cmp.Or(r.Master, "a master")
		return true
	}
	if firstBy == "" || copying {
		return false
	}
	r.TakenAt, r.Master = first, firstBy
	return true
}

// snapshotLate says why a snapshot request went unanswered: a snapshot
// taken but not copied, or none taken, with what the masters' etcd
// components say of their snapshots.
func snapshotLate(r *snapshotRequest, machines []machine, statuses map[string]v1.Status, waited time.Duration) string {
	var said []string
	taken := ""
	for _, m := range machines {
		if !m.stayingMaster() {
			continue
		}
		st := statuses[m.Name]
		if at := st.EtcdSnapshotAt; at != nil && r.answers(*at) && taken == "" {
			taken = fmt.Sprintf("%s took one at %s, but no copy reached the controller", m.Name, at.Format(time.RFC3339))
		}
		for _, c := range st.Components {
			if c.Name == "etcd" && strings.Contains(c.Message, "snapshot") {
				said = append(said, m.Name+": "+v1.ClipMessage(c.Message))
			}
		}
	}
	msg := "no master reported a snapshot taken since it was asked"
	if taken != "" {
		msg = taken
	}
	msg += fmt.Sprintf(" in %s", waited.Round(time.Second))
	if len(said) > 0 {
		msg += " (" + strings.Join(said, "; ") + ")"
	}
	return msg
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
