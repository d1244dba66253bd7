package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/types"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/access"
	"github.com/harmonykaas/harmony/controller/store"
	"github.com/harmonykaas/harmony/controller/vsphere"
)

const maxRetryDelay = 2 * time.Minute

// engine drives every cluster toward its spec: one goroutine per cluster
// with work, each machine's steps recorded in the store as they finish,
// so that a restart resumes where the last run stopped. Steps are
// idempotent: each looks at vCenter before acting.
type engine struct {
	cfg *Config
	// clones bounds the vCenter work in flight across all clusters.
	clones chan struct{}

	mu      sync.Mutex
	ctx     context.Context
	workers map[string]chan struct{}
	wg      sync.WaitGroup
}

func newEngine(cfg *Config) *engine {
	return &engine{cfg: cfg, clones: make(chan struct{}, cfg.CloneParallelism), workers: map[string]chan struct{}{}}
}

// start resumes every cluster and re-checks them periodically.
func (e *engine) start(ctx context.Context) {
	e.mu.Lock()
	e.ctx = ctx
	e.mu.Unlock()
	e.kickAll()
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		t := time.NewTicker(e.cfg.ResyncInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				e.kickAll()
			}
		}
	}()
}

// wait returns when every worker has stopped after ctx ended.
func (e *engine) wait() { e.wg.Wait() }

func (e *engine) kickAll() {
	var names []string
	_ = e.cfg.Store.View(func(tx *store.Tx) error {
		recs, err := store.ListJSON[record](tx, store.Clusters, "")
		for _, r := range recs {
			names = append(names, r.Spec.Name)
		}
		return err
	})
	for _, n := range names {
		e.kick(n)
	}
}

// kick makes the cluster's worker run a pass now, starting it if needed.
func (e *engine) kick(name string) { e.nudge(name, true) }

// kickBusy is kick for a cluster whose worker is at work; a cluster at
// rest stays at rest.
func (e *engine) kickBusy(name string) { e.nudge(name, false) }

func (e *engine) nudge(name string, start bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ctx == nil || e.ctx.Err() != nil {
		return
	}
	if ch, ok := e.workers[name]; ok {
		select {
		case ch <- struct{}{}:
		default:
		}
		return
	}
	if !start {
		return
	}
	ch := make(chan struct{}, 1)
	e.workers[name] = ch
	e.wg.Add(1)
	go e.run(name, ch)
}

// NodeReported is told of each report a node makes, after it is stored
// (prev: the one before, zero if none). A report with news for what a
// hand-over, a leave, a new VM's check, an upgrade or a restore waits for
// (its gist changed, or it is a new VM's first: firstSince) makes the node's machine, if it waits, and its cluster, if
// at work, look again now rather than at their next StatusPoll. A failed
// step's backoff is left alone. A machine at work that does not wait yet
// counts the news: its step may have read the report before, and must
// not then wait for it (recordWait).
func (s *Service) NodeReported(node string, prev, cur v1.Status) error {
	changed := gistOf(prev) != gistOf(cur)
	atWork := func(tx *store.Tx) (*machine, string, error) {
		n, err := tx.Node(node)
		if errors.Is(err, store.ErrNotFound) || err == nil && n.Cluster == "" {
			return nil, "", nil
		}
		if err != nil {
			return nil, "", err
		}
		var m machine
		switch err := tx.Get(store.Machines, machineKey(n.Cluster, node), &m); {
		case errors.Is(err, store.ErrNotFound):
			return nil, n.Cluster, nil
		case err != nil:
			return nil, "", err
		}
		if m.settled() || m.Failed || !changed && !firstSince(m.PoweredOnAt, prev, cur) {
			return nil, n.Cluster, nil
		}
		return &m, n.Cluster, nil
	}
	var m *machine
	var cluster string
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		var err error
		m, cluster, err = atWork(tx)
		return err
	})
	if err == nil && m != nil {
		err = s.cfg.Store.Update(func(tx *store.Tx) error {
			m, _, err := atWork(tx)
			if err != nil || m == nil {
				return err
			}
			m.News++
			if m.Attempts == 0 {
				m.NextTry = time.Time{}
			}
			return putMachine(tx, m)
		})
	}
	if err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	if cluster != "" && (changed || m != nil) {
		s.engine.kickBusy(cluster)
	}
	return nil
}

// reportGist is what of a report the engine's waits read, apart from
// when it was made: a report whose gist differs from the one before has
// news for them.
type reportGist struct {
	phase, member, kubeReady, refused, restored string
	snapshotAt                                  time.Time
}

func gistOf(st v1.Status) reportGist {
	g := reportGist{phase: st.Phase, member: st.EtcdMemberID, refused: refusedComponents(st.Components), restored: st.EtcdRestored}
	if st.KubernetesNode != nil {
		g.kubeReady = st.KubernetesNode.Ready
	}
	if st.EtcdSnapshotAt != nil {
		g.snapshotAt = st.EtcdSnapshotAt.UTC()
	}
	return g
}

// firstSince reports whether cur is the node's first report since
// poweredOn (a new VM's, whatever it says: its waits count only reports
// made after its power-on).
func firstSince(poweredOn time.Time, prev, cur v1.Status) bool {
	return !poweredOn.IsZero() && !prev.ReportedAt.After(poweredOn) && cur.ReportedAt.After(poweredOn)
}

func (e *engine) run(name string, kicked chan struct{}) {
	defer e.wg.Done()
	for {
		wait, done, err := e.reconcile(e.ctx, name)
		if err != nil && e.ctx.Err() == nil {
			e.cfg.Log.Warn("cluster pass failed", "cluster", name, "err", err, "retry_in", wait)
		}
		// Apart from the pass: a snapshot needs the agents, not vCenter.
		snap, err := e.driveSnapshot(name)
		if err != nil && e.ctx.Err() == nil {
			e.cfg.Log.Warn("etcd snapshot request", "cluster", name, "err", err)
		}
		if snap > 0 && (done || snap < wait) {
			wait, done = snap, false
		}
		if done {
			e.mu.Lock()
			select {
			case <-kicked:
				e.mu.Unlock()
				continue
			default:
				delete(e.workers, name)
				e.mu.Unlock()
				return
			}
		}
		select {
		case <-e.ctx.Done():
			return
		case <-kicked:
		case <-time.After(wait):
		}
	}
}

// pass is what one reconcile works with.
type pass struct {
	rec    *record
	sec    *secrets
	vc     *vsphere.Session
	folder *object.Folder
}

// reconcile runs one pass over a cluster: every machine that has work
// takes its next steps, then cluster-wide state (anti-affinity, orphans,
// operations, deletion) follows. It returns when to run again, or done
// when nothing is left until the next change.
func (e *engine) reconcile(ctx context.Context, name string) (time.Duration, bool, error) {
	var p pass
	var machines []machine
	err := e.cfg.Store.View(func(tx *store.Tx) error {
		var err error
		if p.rec, err = loadCluster(tx, name); err != nil {
			return err
		}
		if p.sec, err = loadSecrets(tx, name); err != nil {
			return err
		}
		machines, err = loadMachines(tx, name)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return 0, true, nil
	}
	if err != nil {
		return time.Minute, false, err
	}
	provider, err := e.cfg.Catalog.Provider(p.rec.Spec.Provider)
	if err != nil {
		return time.Minute, false, err
	}
	vctx, cancel := context.WithTimeout(ctx, precheckTimeout)
	p.vc, err = e.cfg.Catalog.Session(vctx, provider)
	if err == nil {
		p.folder, err = p.vc.ClusterFolder(vctx, name)
	}
	cancel()
	if err != nil {
		e.condition(name, v1.Condition{Type: "VCenterReachable", Status: "False", Reason: "ConnectFailed", Message: err.Error()})
		return 30 * time.Second, false, err
	}
	e.condition(name, v1.Condition{Type: "VCenterReachable", Status: "True", Reason: "Connected"})

	now := time.Now()
	var todo []machine
	var wake time.Time
	for _, m := range machines {
		switch {
		case m.settled() || m.Failed:
		case m.NextTry.After(now):
			if wake.IsZero() || m.NextTry.Before(wake) {
				wake = m.NextTry
			}
		default:
			todo = append(todo, m)
		}
	}
	var wg sync.WaitGroup
	for _, m := range todo {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.advance(ctx, &p, m)
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return 0, true, ctx.Err()
	}
	return e.finishPass(ctx, &p, wake)
}

// finishPass does the cluster-wide work after the machines' steps.
func (e *engine) finishPass(ctx context.Context, p *pass, wake time.Time) (time.Duration, bool, error) {
	name := p.rec.Spec.Name
	var machines []machine
	var rec *record
	err := e.cfg.Store.View(func(tx *store.Tx) error {
		var err error
		if rec, err = loadCluster(tx, name); err != nil {
			return err
		}
		machines, err = loadMachines(tx, name)
		return err
	})
	if err != nil {
		return time.Minute, false, err
	}
	if reset, err := e.sweepVMs(ctx, p, machines); err != nil {
		return 10 * time.Second, false, err
	} else if reset {
		return 0, false, nil
	}
	if msg, err := e.endRepairs(machines); err != nil {
		return 10 * time.Second, false, err
	} else if msg != "" {
		e.finishOperations(name, rec.Generation, v1.OperationFailed, msg)
		return 0, false, nil
	}
	var masters []types.ManagedObjectReference
	settled, failed := true, []string{}
	now := time.Now()
	for _, m := range machines {
		// A machine that waits (a node leaving) or backs off from this
		// pass is looked at again when it is due, not at once.
		if !m.settled() && !m.Failed && m.NextTry.After(now) && (wake.IsZero() || m.NextTry.Before(wake)) {
			wake = m.NextTry
		}
		if m.stayingMaster() && m.VM != "" && m.Step != stepPending {
			masters = append(masters, vmRef(m.VM))
		}
		if m.Failed {
			failed = append(failed, m.Name+": "+m.LastError)
		} else if !m.settled() {
			settled = false
		}
	}
	// Removed masters leave the rule; a deleted cluster's rule goes.
	if _, err := p.vc.EnsureAntiAffinity(ctx, "harmony-"+name+"-masters", masters); err != nil {
		return 10 * time.Second, false, err
	}
	switch {
	case rec.Upgrade.running() && !rec.Deleting && (len(failed) == 0 || rec.Upgrade.stopping()):
		p.rec = rec
		wait, err := e.driveUpgrade(ctx, p, machines)
		if err != nil {
			return 10 * time.Second, false, err
		}
		if !wake.IsZero() && time.Until(wake) < wait {
			wait = max(time.Until(wake), 0)
		}
		return wait, false, nil
	case rec.Restore.running() && !rec.Deleting:
		p.rec = rec
		wait, err := e.driveRestore(p, machines)
		if err != nil {
			return 10 * time.Second, false, err
		}
		if !wake.IsZero() && time.Until(wake) < wait {
			wait = max(time.Until(wake), 0)
		}
		return wait, false, nil
	case len(failed) > 0 && settled || len(failed) > 0 && wake.IsZero() && !anyRunnable(machines):
		msg := fmt.Sprintf("%d node(s) failed: %s", len(failed), failed[0])
		e.condition(name, v1.Condition{Type: v1.ConditionFailed, Status: "True", Reason: "StepFailed", Message: msg})
		e.finishOperations(name, rec.Generation, v1.OperationFailed, msg)
		return 0, true, nil
	case rec.Deleting && len(machines) == 0:
		return 0, true, e.finishDelete(ctx, p)
	case settled && len(failed) == 0:
		e.condition(name, v1.Condition{Type: v1.ConditionProvisioned, Status: "True", Reason: "AllNodesProvisioned",
			Message: fmt.Sprintf("every VM of generation %d is cloned, configured and powered on", rec.Generation)})
		if rec.ObservedGeneration != rec.Generation {
			_ = e.cfg.Store.Update(func(tx *store.Tx) error {
				cur, err := loadCluster(tx, name)
				if err != nil || cur.Generation != rec.Generation {
					return err
				}
				cur.ObservedGeneration = cur.Generation
				return tx.Put(store.Clusters, name, cur)
			})
		}
		e.finishOperations(name, rec.Generation, v1.OperationSucceeded, "")
		return 0, true, nil
	}
	if wake.IsZero() {
		return 0, false, nil
	}
	return time.Until(wake), false, nil
}

func anyRunnable(machines []machine) bool {
	for _, m := range machines {
		if !m.settled() && !m.Failed {
			return true
		}
	}
	return false
}

// sweepVMs compares the cluster folder with the machines: a VM tagged
// with this cluster that belongs to no machine (a clone whose record was
// lost) is destroyed; a machine whose VM has vanished (destroyed behind
// the controller's back) starts again from the clone, and its data disk,
// which outlived the VM, is attached to the new one; so does a master's
// replacement whose old VM vanished before the clone (oldVMGone); one
// whose new VM vanished while it was verified is rolled back. A VM
// merely moved out of the folder is left alone. Then running VMs whose
// agents' certificates expired get new bootstraps (rebootstrapExpired).
// It reports whether it sent a machine back.
func (e *engine) sweepVMs(ctx context.Context, p *pass, machines []machine) (bool, error) {
	vms, err := p.vc.VMs(ctx, p.folder)
	if err != nil {
		return false, err
	}
	known, kept := map[string]bool{}, map[string]bool{}
	for _, m := range machines {
		known[m.Name] = true
		if m.Swap != nil {
			kept[m.Swap.OldVM] = true // the VM an upgrade replaces, kept for a rollback
		}
	}
	present := map[string]bool{}
	for _, vm := range vms {
		present[vm.Ref.Value] = true
		if vm.Tags[vsphere.TagCluster] != p.rec.UID || known[vm.Name] || kept[vm.Ref.Value] {
			continue
		}
		if err := p.vc.Destroy(ctx, vm.Ref); err != nil {
			return false, fmt.Errorf("orphan %s: %w", vm.Name, err)
		}
		e.event(p.rec.Spec.Name, v1.Event{Type: "Warning", Node: vm.Name, Reason: "OrphanRemoved",
			Message: fmt.Sprintf("VM %s (%s) belonged to no node of the cluster; destroyed", vm.Name, vm.Ref.Value)})
	}
	reset := false
	for _, m := range machines {
		// The VM the machine still stands on: a replacement's old VM
		// until its clone, the new VM while it is verified, else the
		// machine's own.
		var vm string
		verifying := m.Swap != nil && m.Swap.Step == swapVerifying && !m.Swap.Rollback
		switch {
		case m.Remove:
		case m.Swap != nil && m.Swap.beforeClone():
			vm = m.Swap.OldVM
		case verifying, m.Swap == nil && m.Step != stepPending:
			vm = m.VM
		}
		if vm == "" || present[vm] {
			continue
		}
		if gone, err := p.vc.Gone(ctx, vmRef(vm)); err != nil {
			return reset, err
		} else if !gone {
			continue // moved out of the folder, and still the machine's
		}
		var r stepResult
		switch {
		case verifying:
			// Nothing will report from it: no need to wait out the
			// node timeout.
			r = e.startRollback(&m, fmt.Sprintf("the new VM %s is gone from vCenter", m.VM))
		case m.Swap != nil:
			r = e.oldVMGone(p.rec, &m)
		default:
			r = stepResult{typ: "Warning", msg: fmt.Sprintf("%s: WARNING: its VM %s is gone from vCenter; cloning it again (the data disk stays)", m.Name, m.VM)}
			m.VM, m.Step = "", stepPending
		}
		if err := e.recordStep(p, &m, r); err != nil {
			return reset, err
		}
		reset = true
	}
	if !reset && !p.rec.Deleting {
		e.rebootstrapExpired(ctx, p, machines, vms)
	}
	return reset, nil
}

// rebootstrapExpired writes a new one-time bootstrap into the guestinfo
// of each running VM whose agent's certificate has expired: a VM that
// was off, or a controller that was down, for longer than a node
// certificate lives (a day by default) leaves agents that can no longer
// renew, and that run on from their cached roles but hear nothing. The
// agent polls its guestinfo while its certificate is expired and enrolls
// again with the token, as at its first boot. Once per expiry, and again
// only after the token itself has expired unused. A failure is logged
// and tried again on the next pass; it stops nothing else.
func (e *engine) rebootstrapExpired(ctx context.Context, p *pass, machines []machine, vms []vsphere.VMInfo) {
	on := map[string]bool{}
	for _, vm := range vms {
		on[vm.Ref.Value] = vm.Power == string(types.VirtualMachinePowerStatePoweredOn)
	}
	for _, m := range machines {
		if !m.settled() || m.Remove || !on[m.VM] {
			continue
		}
		if err := e.rebootstrap(ctx, p, m); err != nil {
			e.cfg.Log.Warn("a new bootstrap for a node whose certificate expired", "cluster", p.rec.Spec.Name, "node", m.Name, "err", err)
		}
	}
}

// rebootstrap writes machine m's new bootstrap, if its node's
// certificate has expired and it has none yet.
func (e *engine) rebootstrap(ctx context.Context, p *pass, m machine) error {
	n, err := e.cfg.Store.Node(m.Name)
	if errors.Is(err, store.ErrNotFound) {
		return nil // not enrolled yet, or its record is going
	}
	if err != nil {
		return err
	}
	now := e.cfg.Now()
	expired := !n.CertNotAfter.IsZero() && !now.Before(n.CertNotAfter)
	written := m.Rebootstrapped.After(n.CertNotAfter) && now.Before(m.Rebootstrapped.Add(bootstrapTTL))
	if !expired || written {
		return nil
	}
	extra, err := e.guestinfo(p, &m)
	if err != nil {
		return err
	}
	if err := p.vc.SetGuestinfo(ctx, vmRef(m.VM), extra); err != nil {
		return err
	}
	m.Rebootstrapped = now.UTC()
	return e.recordStep(p, &m, stepResult{typ: "Warning", reason: "Rebootstrap", msg: fmt.Sprintf(
		"%s: its agent's certificate expired at %s (its VM, or the controller, was off for longer than a certificate lives); a new one-time bootstrap is in its guestinfo, valid for %s, for the agent to enroll again",
		m.Name, n.CertNotAfter.UTC().Format(time.RFC3339), bootstrapTTL)})
}

// finishDelete removes what is left of a deleted cluster: with purge its
// data disk folders and the controller's copies of its etcd snapshots,
// then its VM folder and records.
func (e *engine) finishDelete(ctx context.Context, p *pass) error {
	name := p.rec.Spec.Name
	if p.rec.Purge {
		var data leftovers
		err := e.cfg.Store.View(func(tx *store.Tx) error {
			var err error
			data, err = leftoversOf(tx, name, p.vc.Provider.DataDatastores(), e.cfg.Now())
			return err
		})
		if err != nil {
			return err
		}
		if err := data.remove(ctx, p.vc, e.cfg.Copies); err != nil {
			return err
		}
	}
	if err := p.vc.DeleteFolderIfEmpty(ctx, p.folder); err != nil {
		return err
	}
	err := e.cfg.Store.Update(func(tx *store.Tx) error {
		if !p.rec.Purge {
			// Recorded in the transaction that deletes the cluster's
			// record, so that no crash between the two loses its disks.
			left, err := leftoversOf(tx, name, p.vc.Provider.DataDatastores(), e.cfg.Now())
			if err != nil {
				return err
			}
			if err := tx.Put(store.Leftovers, left.id(), left); err != nil {
				return err
			}
		}
		for _, b := range []store.Bucket{store.Events, store.Machines} {
			if err := tx.DeletePrefix(b, name+"/"); err != nil {
				return err
			}
		}
		var doomed []string
		err := tx.List(store.Addresses, p.rec.Spec.Provider+"/", func(k string, data []byte) error {
			var a addressOwner
			if err := json.Unmarshal(data, &a); err != nil {
				return fmt.Errorf("decode address %s: %w", k, err)
			}
			if a.Cluster == name {
				doomed = append(doomed, k)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range doomed {
			if err := tx.Delete(store.Addresses, k); err != nil {
				return err
			}
		}
		if err := tx.Delete(store.Secrets, secretKey(name)); err != nil {
			return err
		}
		if err := access.DeleteClusterGrants(tx, name); err != nil {
			return err
		}
		if err := tx.Delete(store.Clusters, name); err != nil {
			return err
		}
		// In the same transaction: a crash after it must not leave the
		// delete's operation running for good.
		return forgetOperations(tx, name, e.cfg.Now().UTC())
	})
	if err != nil {
		return err
	}
	e.cfg.Notify(NotifyKey(name))
	e.cfg.Log.Info("cluster deleted", "cluster", name, "purge", p.rec.Purge)
	return nil
}

// KeepDeletedClusterOperations is how long the operations that ended
// while a cluster was deleted (the delete's own among them) stay readable
// after it, for whoever polls them.
const KeepDeletedClusterOperations = 7 * 24 * time.Hour

// forgetOperations runs once cluster's record is deleted: it ends the
// cluster's running operations, deletes the ones that had ended before
// its deletion began, as its events are, and deletes the operations of
// clusters deleted before that have been kept for
// KeepDeletedClusterOperations. Without it, every deleted cluster's
// operations would stay in the store for good.
func forgetOperations(tx *store.Tx, cluster string, now time.Time) error {
	for _, c := range tx.OperationClusters() {
		if c == "" || tx.Has(store.Clusters, c) {
			continue
		}
		ops, err := tx.ClusterOperations(c)
		if err != nil {
			return err
		}
		deleting := now // when the first delete of cluster was asked for
		for _, op := range ops {
			if c == cluster && op.Kind == v1.OperationDelete && op.State == v1.OperationRunning && op.CreatedAt.Before(deleting) {
				deleting = op.CreatedAt
			}
		}
		for _, op := range ops {
			switch {
			case c == cluster && op.State == v1.OperationRunning:
				op.State, op.Message, op.FinishedAt = v1.OperationSucceeded, "cluster deleted", now
				err = tx.Put(store.Operations, op.ID, op)
			case c == cluster && op.FinishedAt.Before(deleting), now.Sub(op.FinishedAt) > KeepDeletedClusterOperations:
				err = tx.DeleteOperation(op)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// finishOperations ends the cluster's running operations up to gen.
func (e *engine) finishOperations(cluster string, gen int64, state, msg string) {
	now := e.cfg.Now().UTC()
	err := e.cfg.Store.Update(func(tx *store.Tx) error {
		ops, err := tx.ClusterOperations(cluster)
		if err != nil {
			return err
		}
		for _, op := range ops {
			// A snapshot asked for by hand ends on its own (driveSnapshot).
			if op.State != v1.OperationRunning || op.Generation > gen || op.Kind == v1.OperationEtcdSnapshot {
				continue
			}
			op.State, op.Message, op.FinishedAt = state, msg, now
			if err := tx.Put(store.Operations, op.ID, op); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		e.cfg.Log.Error("finish operations", "cluster", cluster, "err", err)
	}
	e.cfg.Notify(NotifyKey(cluster))
}

// condition sets a cluster condition, with an event when it changes.
func (e *engine) condition(name string, c v1.Condition) {
	now := e.cfg.Now().UTC()
	changed := false
	err := e.cfg.Store.Update(func(tx *store.Tx) error {
		rec, err := loadCluster(tx, name)
		if err != nil {
			return err
		}
		before := len(rec.Conditions)
		var old v1.Condition
		for _, have := range rec.Conditions {
			if have.Type == c.Type {
				old = have
			}
		}
		if old.Status == c.Status && old.Message == c.Message {
			return nil
		}
		// A first "all is well" needs no event.
		changed = before > 0 && old.Type != "" || c.Status == "True" && c.Type == v1.ConditionFailed || c.Status == "False"
		rec.Conditions = setCondition(rec.Conditions, c, now)
		if c.Type == v1.ConditionProvisioned {
			rec.Conditions = removeCondition(rec.Conditions, v1.ConditionFailed)
		}
		if err := tx.Put(store.Clusters, name, rec); err != nil {
			return err
		}
		if !changed {
			return nil
		}
		typ := "Normal"
		if c.Status == "False" || c.Type == v1.ConditionFailed {
			typ = "Warning"
		}
		_, err = addEvent(tx, name, v1.Event{Time: now, Type: typ, Reason: c.Type + c.Status, Message: c.Message})
		return err
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		e.cfg.Log.Error("set condition", "cluster", name, "err", err)
	}
	if changed {
		e.cfg.Notify(NotifyKey(name))
	}
}

func (e *engine) event(cluster string, ev v1.Event) {
	ev.Time = e.cfg.Now().UTC()
	err := e.cfg.Store.Update(func(tx *store.Tx) error {
		_, err := addEvent(tx, cluster, ev)
		return err
	})
	if err != nil {
		e.cfg.Log.Error("record event", "cluster", cluster, "err", err)
	}
	e.cfg.Notify(NotifyKey(cluster))
}
