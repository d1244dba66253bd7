package controller

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/types"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/store"
	"github.com/harmonykaas/harmony/controller/vsphere"
)

// Workflow defaults.
const (
	DefaultCloneParallelism = 8
	DefaultRetryBase        = 2 * time.Second
	DefaultMaxAttempts      = 6
	maxRetryDelay           = 2 * time.Minute
	// resyncInterval re-checks settled clusters against vCenter.
	resyncInterval = 5 * time.Minute
	// clusterTokenTTL: a cloned VM must enroll within this long.
	clusterTokenTTL = 24 * time.Hour
	// NetworkGuestinfoKey carries the VM's static address.
	NetworkGuestinfoKey = "guestinfo.harmony.network"
	dataDiskRoot        = "harmony-data"
)

// engine drives every cluster toward its spec: one goroutine per cluster
// with work, each machine's steps recorded in the store as they finish,
// so that a restart resumes where the last run stopped. Steps are
// idempotent: each looks at vCenter before acting.
type engine struct {
	c   *Controller
	log *slog.Logger
	// clones bounds the vCenter work in flight across all clusters.
	clones chan struct{}

	mu      sync.Mutex
	ctx     context.Context
	workers map[string]chan struct{}
	wg      sync.WaitGroup
}

func newEngine(c *Controller) *engine {
	return &engine{c: c, log: c.log, clones: make(chan struct{}, c.cfg.CloneParallelism), workers: map[string]chan struct{}{}}
}

// start resumes every cluster and unfinished import, and re-checks
// clusters periodically.
func (e *engine) start(ctx context.Context) error {
	e.mu.Lock()
	e.ctx = ctx
	e.mu.Unlock()
	imports, err := e.c.pendingImports()
	if err != nil {
		return err
	}
	for _, key := range imports {
		e.startImport(key)
	}
	e.kickAll()
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		t := time.NewTicker(resyncInterval)
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
	return nil
}

// wait returns when every worker has stopped after ctx ended.
func (e *engine) wait() { e.wg.Wait() }

func (e *engine) kickAll() {
	var names []string
	_ = e.c.store.View(func(tx *store.Tx) error {
		recs, err := store.ListJSON[clusterRecord](tx, store.Clusters, "")
		for _, r := range recs {
			names = append(names, r.Spec.Name)
		}
		return err
	})
	for _, n := range names {
		e.kick(n)
	}
}

func (e *engine) startImport(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ctx == nil {
		return // start() resumes it
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		e.c.runImport(e.ctx, key)
	}()
}

// kick makes the cluster's worker run a pass now, starting it if needed.
func (e *engine) kick(name string) {
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
	ch := make(chan struct{}, 1)
	e.workers[name] = ch
	e.wg.Add(1)
	go e.run(name, ch)
}

func (e *engine) run(name string, kicked chan struct{}) {
	defer e.wg.Done()
	for {
		wait, done, err := e.reconcile(e.ctx, name)
		if err != nil && e.ctx.Err() == nil {
			e.log.Warn("cluster pass failed", "cluster", name, "err", err, "retry_in", wait)
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
	rec    *clusterRecord
	sec    clusterSecrets
	s      *vsphere.Session
	folder *object.Folder
}

// reconcile runs one pass over a cluster: every machine that has work
// takes its next steps, then cluster-wide state (anti-affinity, orphans,
// operations, deletion) follows. It returns when to run again, or done
// when nothing is left until the next change.
func (e *engine) reconcile(ctx context.Context, name string) (time.Duration, bool, error) {
	var p pass
	var machines []machineRecord
	err := e.c.store.View(func(tx *store.Tx) error {
		var err error
		if p.rec, err = loadCluster(tx, name); err != nil {
			return err
		}
		if err := tx.Get(store.Secrets, secretKeyCluster(name), &p.sec); err != nil {
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
	provider, err := e.c.provider(p.rec.Spec.Provider)
	if err != nil {
		return time.Minute, false, err
	}
	vctx, cancel := context.WithTimeout(ctx, precheckTimeout)
	p.s, err = e.c.sessions.get(vctx, provider)
	if err == nil {
		p.folder, err = p.s.ClusterFolder(vctx, name)
	}
	cancel()
	if err != nil {
		e.condition(name, v1.Condition{Type: "VCenterReachable", Status: "False", Reason: "ConnectFailed", Message: err.Error()})
		return 30 * time.Second, false, err
	}
	e.condition(name, v1.Condition{Type: "VCenterReachable", Status: "True", Reason: "Connected"})

	now := time.Now()
	var todo []machineRecord
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

// advance takes one machine through its steps until it is done, fails,
// or has to wait for a retry. The clone bound is held for the whole
// machine, so that at most CloneParallelism VMs are in flight.
func (e *engine) advance(ctx context.Context, p *pass, m machineRecord) {
	select {
	case e.clones <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-e.clones }()
	for !m.settled() && ctx.Err() == nil {
		var r stepResult
		var err error
		if m.Remove {
			r, err = e.teardownStep(ctx, p, &m)
		} else {
			r, err = e.createStep(ctx, p, &m)
		}
		if ctx.Err() != nil {
			return // shutting down: the step is redone on the next start
		}
		if err != nil {
			if !m.Remove && m.Step != stepPending && vsphere.IsNotFound(err) {
				// The VM vanished under us: start it again from the clone.
				r = done("", fmt.Sprintf("VM %s of %s is gone from vCenter; cloning it again", m.VM, m.Name))
				m.VM, m.Step = "", stepPending
			} else {
				e.recordFailure(p, &m, err)
				return
			}
		}
		if r.next == "" && r.msg == "" {
			return
		}
		if err := e.recordStep(p, &m, r); err != nil {
			e.log.Error("record step", "cluster", m.Cluster, "node", m.Name, "err", err)
			return
		}
		if r.next == stepGone {
			return
		}
	}
}

const stepGone = "Gone"

// createStep does the machine's next create step and names the step it
// reached.
func (e *engine) createStep(ctx context.Context, p *pass, m *machineRecord) (stepResult, error) {
	rec, s := p.rec, p.s
	ref := types.ManagedObjectReference{Type: "VirtualMachine", Value: m.VM}
	size := *rec.Spec.WorkerSize
	if m.Role == v1.RoleMaster {
		size = *rec.Spec.MasterSize
	}
	switch m.Step {
	case stepPending:
		got, err := s.Clone(ctx, vsphere.CloneSpec{
			Template: rec.Template, Snapshot: rec.Snapshot, Name: m.Name, Folder: p.folder, Datastore: m.OSDatastore,
			Tags: map[string]string{vsphere.TagCluster: rec.UID, vsphere.TagNode: m.Name},
		})
		if err != nil {
			return stepResult{}, err
		}
		m.VM = got.Value
		kind := "full clone"
		if rec.Snapshot != "" {
			kind = "linked clone"
		}
		return done(stepCloned, fmt.Sprintf("%s: %s of %s on %s", m.Name, kind, rec.Template, m.OSDatastore)), nil
	case stepCloned:
		err := s.Configure(ctx, ref, vsphere.Hardware{CPUs: size.CPUs, MemoryMiB: size.MemoryMiB})
		return done(stepConfigured, fmt.Sprintf("%s: %d vCPUs, %d MiB, NIC on %s", m.Name, size.CPUs, size.MemoryMiB, s.Provider.Network)), err
	case stepConfigured:
		if m.Role != v1.RoleMaster {
			return done(stepDataDisk, ""), nil
		}
		d := dataDisk(rec, m)
		err := s.EnsureDataDisk(ctx, ref, d)
		return done(stepDataDisk, fmt.Sprintf("%s: data disk %s (%d GiB) attached", m.Name, d.Path(), d.SizeGiB)), err
	case stepDataDisk:
		extra, err := e.guestinfo(p, m)
		if err != nil {
			return stepResult{}, err
		}
		err = s.Configure(ctx, ref, vsphere.Hardware{CPUs: size.CPUs, MemoryMiB: size.MemoryMiB, ExtraConfig: extra})
		return done(stepBootstrapped, fmt.Sprintf("%s: bootstrap and network (%s) written to guestinfo", m.Name, m.IP)), err
	case stepBootstrapped:
		err := s.PowerOn(ctx, ref)
		return done(stepPoweredOn, fmt.Sprintf("%s: powered on", m.Name)), err
	}
	return stepResult{}, nil
}

// guestinfo issues the node a new one-time token (revoking any unused
// one, so that a redone step leaves one valid token) and encodes its
// bootstrap and network documents.
func (e *engine) guestinfo(p *pass, m *machineRecord) (map[string]string, error) {
	var node store.Node
	var pool v1.IPPool
	err := e.c.store.View(func(tx *store.Tx) error {
		var err error
		if node, err = tx.Node(m.Name); err != nil {
			return err
		}
		var provider v1.Provider
		if err := tx.Get(store.Providers, p.rec.Spec.Provider, &provider); err != nil {
			return err
		}
		if provider.IPPool == nil {
			return fmt.Errorf("provider %s lost its ipPool", provider.Name)
		}
		pool = *provider.IPPool
		return nil
	})
	if err != nil {
		return nil, err
	}
	token, tok, err := newToken(node, clusterTokenTTL, e.c.now().UTC())
	if err != nil {
		return nil, err
	}
	if err := e.c.store.ReplaceToken(tok); err != nil {
		return nil, fmt.Errorf("token for %s: %w", m.Name, err)
	}
	boot := e.c.bootstrapFor(m.Name, token, false)
	bootEnc, err := boot.EncodeGuestinfo()
	if err != nil {
		return nil, err
	}
	prefix := netip.MustParsePrefix(pool.Network)
	netcfg := v1.NetworkConfig{APIVersion: v1.APIVersion, Kind: "NetworkConfig",
		Address: m.IP + "/" + strconv.Itoa(prefix.Bits()), Gateway: pool.Gateway, DNS: pool.DNS, Hostname: m.Name}
	if err := netcfg.Validate(); err != nil {
		return nil, fmt.Errorf("network config of %s: %w", m.Name, err)
	}
	netJSON, err := json.Marshal(netcfg)
	if err != nil {
		return nil, err
	}
	return map[string]string{
		v1.GuestinfoKey:     bootEnc,
		NetworkGuestinfoKey: base64.StdEncoding.EncodeToString(netJSON),
	}, nil
}

// teardownStep does the next step of a machine's removal.
func (e *engine) teardownStep(ctx context.Context, p *pass, m *machineRecord) (stepResult, error) {
	s := p.s
	if m.VM == "" {
		vm, err := s.FindVM(ctx, p.folder, m.Name)
		if err != nil {
			return stepResult{}, err
		}
		if vm != nil {
			m.VM = vm.Reference().Value
		}
	}
	ref := types.ManagedObjectReference{Type: "VirtualMachine", Value: m.VM}
	switch {
	case m.Step != stepLeft && m.Step != stepPoweredOff && m.Step != stepKept:
		return e.leave(m), nil
	case m.VM == "":
		return done(stepGone, fmt.Sprintf("%s: removed (it had no VM)", m.Name)), nil
	case m.Step == stepLeft:
		err := s.PowerOff(ctx, ref)
		if vsphere.IsNotFound(err) {
			m.VM, err = "", nil
		}
		return done(stepPoweredOff, fmt.Sprintf("%s: powered off", m.Name)), err
	case m.KeepVM:
		return done(stepKept, fmt.Sprintf("%s: VM %s kept, powered off, for troubleshooting", m.Name, m.VM)), nil
	default:
		if err := s.Destroy(ctx, ref); err != nil {
			return stepResult{}, err
		}
		msg := fmt.Sprintf("%s: VM destroyed", m.Name)
		if m.Role == v1.RoleMaster {
			d := dataDisk(p.rec, m)
			if p.rec.Purge {
				if err := s.DeleteDataDisk(ctx, d); err != nil {
					return stepResult{}, err
				}
				msg += "; data disk " + d.Path() + " deleted (purge)"
			} else {
				msg += "; data disk " + d.Path() + " kept"
			}
		}
		return done(stepGone, msg), nil
	}
}

// leave is where the node would be cordoned, drained through the agent on
// a master, reset and, for a master, removed from etcd. The agent has no
// drain or reset command yet, so an enrolled node is powered off without
// them, and the event says so.
func (e *engine) leave(m *machineRecord) stepResult {
	node, err := e.c.store.Node(m.Name)
	if err != nil || node.EnrolledAt.IsZero() {
		return done(stepLeft, fmt.Sprintf("%s: never enrolled; nothing to drain", m.Name))
	}
	return stepResult{next: stepLeft, typ: "Warning",
		msg: fmt.Sprintf("%s: WARNING: the agent cannot drain or reset yet; it leaves without draining", m.Name)}
}

// stepResult is a step done: the step reached (empty: the step stays as
// set) and the event that tells of it (none without a message).
type stepResult struct{ next, typ, msg string }

func done(next, msg string) stepResult { return stepResult{next: next, typ: "Normal", msg: msg} }

func dataDisk(rec *clusterRecord, m *machineRecord) vsphere.DataDisk {
	return vsphere.DataDisk{Datastore: m.DataDatastore, Dir: dataDiskRoot + "/" + rec.Spec.Name, Name: m.Name, SizeGiB: rec.Spec.MasterDataDiskGiB}
}

// recordStep stores a finished step and its event in one transaction; the
// last step of a removal deletes the machine, its node record and its
// address.
func (e *engine) recordStep(p *pass, m *machineRecord, r stepResult) error {
	now := e.c.now().UTC()
	if r.next != "" {
		m.Step = r.next
	}
	m.Attempts, m.NextTry, m.LastError = 0, time.Time{}, ""
	err := e.c.store.Update(func(tx *store.Tx) error {
		if err := mergeProgress(tx, m); err != nil {
			return err
		}
		switch r.next {
		case stepGone:
			if err := tx.Delete(store.Machines, machineKey(m.Cluster, m.Name)); err != nil {
				return err
			}
			if err := tx.Delete(store.Addresses, addressKey(p.rec.Spec.Provider, m.IP)); err != nil {
				return err
			}
			if err := tx.DeleteNode(m.Name); err != nil {
				return err
			}
		case stepKept:
			if err := tx.DeleteNode(m.Name); err != nil {
				return err
			}
			fallthrough
		default:
			if err := putMachine(tx, m); err != nil {
				return err
			}
		}
		if r.msg == "" {
			return nil
		}
		_, err := addEvent(tx, m.Cluster, v1.Event{Time: now, Type: r.typ, Node: m.Name, Reason: reasonOfStep(r.next), Message: r.msg})
		return err
	})
	if err == nil {
		e.c.hub.notify("cluster:" + m.Cluster)
	}
	return err
}

// mergeProgress takes what an admin changed on the stored machine while
// the workflow worked on it (removal, keep-VM) into m, so that writing m
// back keeps both.
func mergeProgress(tx *store.Tx, m *machineRecord) error {
	var cur machineRecord
	if err := tx.Get(store.Machines, machineKey(m.Cluster, m.Name), &cur); err != nil {
		return fmt.Errorf("machine %s: %w", m.Name, err)
	}
	if cur.Remove && !m.Remove {
		// Removal was asked for meanwhile: it starts from a clean slate.
		m.Failed, m.Attempts, m.NextTry, m.LastError = false, 0, time.Time{}, ""
	}
	m.Remove, m.KeepVM = cur.Remove, cur.KeepVM
	return nil
}

func reasonOfStep(step string) string {
	switch step {
	case stepCloned:
		return "Cloned"
	case stepConfigured:
		return "Configured"
	case stepDataDisk:
		return "DataDisk"
	case stepBootstrapped:
		return "Bootstrap"
	case stepPoweredOn:
		return "PoweredOn"
	case stepLeft:
		return "Leave"
	case stepPoweredOff:
		return "PoweredOff"
	case stepKept:
		return "Kept"
	case stepGone:
		return "Removed"
	case stepPending:
		return "Recreate"
	}
	return step
}

// recordFailure counts a failed attempt and schedules the retry with
// exponential backoff and jitter; a permanent fault or too many attempts
// mark the machine failed, which stops its workflow until an admin
// retries.
func (e *engine) recordFailure(p *pass, m *machineRecord, stepErr error) {
	now := e.c.now().UTC()
	m.Attempts++
	m.LastError = stepErr.Error()
	delay := min(e.c.cfg.RetryBase<<(m.Attempts-1), maxRetryDelay)
	delay += time.Duration(rand.Int64N(int64(delay)/4 + 1))
	m.NextTry = time.Now().Add(delay)
	permanent := vsphere.Permanent(stepErr)
	if permanent || m.Attempts >= e.c.cfg.MaxAttempts {
		m.Failed = true
	}
	ev := v1.Event{Time: now, Type: "Warning", Node: m.Name, Reason: "StepFailed",
		Message: fmt.Sprintf("%s: attempt %d after %q failed: %v; retry in %s", m.Name, m.Attempts, stepOrStart(m.Step), stepErr, delay.Round(time.Millisecond))}
	if m.Failed {
		why := fmt.Sprintf("gave up after %d attempts", m.Attempts)
		if permanent {
			why = "the fault is permanent"
		}
		ev.Reason = "Failed"
		ev.Message = fmt.Sprintf("%s: %v; %s: fix the cause, then `harmonyctl cluster retry %s`", m.Name, stepErr, why, m.Cluster)
	}
	e.log.Warn("cluster step failed", "cluster", m.Cluster, "node", m.Name, "step_done", m.Step, "attempt", m.Attempts, "failed", m.Failed, "err", stepErr)
	err := e.c.store.Update(func(tx *store.Tx) error {
		if err := mergeProgress(tx, m); errors.Is(err, store.ErrNotFound) {
			return nil
		} else if err != nil {
			return err
		}
		if err := putMachine(tx, m); err != nil {
			return err
		}
		_, err := addEvent(tx, m.Cluster, ev)
		return err
	})
	if err != nil {
		e.log.Error("record failure", "cluster", m.Cluster, "node", m.Name, "err", err)
	}
	e.c.hub.notify("cluster:" + m.Cluster)
}

func stepOrStart(step string) string {
	if step == "" {
		return "start"
	}
	return step
}

// finishPass does the cluster-wide work after the machines' steps.
func (e *engine) finishPass(ctx context.Context, p *pass, wake time.Time) (time.Duration, bool, error) {
	name := p.rec.Spec.Name
	var machines []machineRecord
	var rec *clusterRecord
	err := e.c.store.View(func(tx *store.Tx) error {
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
	var masters []types.ManagedObjectReference
	settled, failed := true, []string{}
	for _, m := range machines {
		if m.Role == v1.RoleMaster && !m.Remove && m.VM != "" && m.Step != stepPending {
			masters = append(masters, types.ManagedObjectReference{Type: "VirtualMachine", Value: m.VM})
		}
		if m.Failed {
			failed = append(failed, m.Name+": "+m.LastError)
		} else if !m.settled() {
			settled = false
		}
	}
	// Removed masters leave the rule; a deleted cluster's rule goes.
	if _, err := p.s.EnsureAntiAffinity(ctx, "harmony-"+name+"-masters", masters); err != nil {
		return 10 * time.Second, false, err
	}
	switch {
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
			_ = e.c.store.Update(func(tx *store.Tx) error {
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

func anyRunnable(machines []machineRecord) bool {
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
// which outlived the VM, is attached to the new one. It reports whether
// it sent a machine back.
func (e *engine) sweepVMs(ctx context.Context, p *pass, machines []machineRecord) (bool, error) {
	vms, err := p.s.VMs(ctx, p.folder)
	if err != nil {
		return false, err
	}
	known := map[string]bool{}
	for _, m := range machines {
		known[m.Name] = true
	}
	present := map[string]bool{}
	for _, vm := range vms {
		present[vm.Ref.Value] = true
		if vm.Tags[vsphere.TagCluster] != p.rec.UID || known[vm.Name] {
			continue
		}
		if err := p.s.Destroy(ctx, vm.Ref); err != nil {
			return false, fmt.Errorf("orphan %s: %w", vm.Name, err)
		}
		e.event(p.rec.Spec.Name, v1.Event{Type: "Warning", Node: vm.Name, Reason: "OrphanRemoved",
			Message: fmt.Sprintf("VM %s (%s) belonged to no node of the cluster; destroyed", vm.Name, vm.Ref.Value)})
	}
	reset := false
	for _, m := range machines {
		if m.Remove || m.VM == "" || m.Step == stepPending || present[m.VM] {
			continue
		}
		gone := m.VM
		m.VM, m.Step = "", stepPending
		err := e.recordStep(p, &m, stepResult{typ: "Warning",
			msg: fmt.Sprintf("%s: WARNING: its VM %s is gone from vCenter; cloning it again (the data disk stays)", m.Name, gone)})
		if err != nil {
			return reset, err
		}
		reset = true
	}
	return reset, nil
}

// finishDelete removes what is left of a deleted cluster: with purge its
// data disk folders, then its VM folder and records.
func (e *engine) finishDelete(ctx context.Context, p *pass) error {
	name := p.rec.Spec.Name
	if p.rec.Purge {
		for _, ds := range p.s.Provider.DataDatastores() {
			if err := p.s.DeleteDatastoreDir(ctx, ds, dataDiskRoot+"/"+name); err != nil {
				return err
			}
		}
	}
	if err := p.s.DeleteFolderIfEmpty(ctx, p.folder); err != nil {
		return err
	}
	err := e.c.store.Update(func(tx *store.Tx) error {
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
		if err := tx.Delete(store.Secrets, secretKeyCluster(name)); err != nil {
			return err
		}
		return tx.Delete(store.Clusters, name)
	})
	if err != nil {
		return err
	}
	e.finishOperations(name, 0, v1.OperationSucceeded, "cluster deleted")
	e.log.Info("cluster deleted", "cluster", name, "purge", p.rec.Purge)
	return nil
}

// finishOperations ends the cluster's running operations up to gen (all,
// when gen is 0).
func (e *engine) finishOperations(cluster string, gen int64, state, msg string) {
	now := e.c.now().UTC()
	err := e.c.store.Update(func(tx *store.Tx) error {
		ops, err := store.ListJSON[v1.Operation](tx, store.Operations, "")
		if err != nil {
			return err
		}
		for _, op := range ops {
			if op.Cluster != cluster || op.State != v1.OperationRunning || gen != 0 && op.Generation > gen {
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
		e.log.Error("finish operations", "cluster", cluster, "err", err)
	}
	e.c.hub.notify("cluster:" + cluster)
}

// condition sets a cluster condition, with an event when it changes.
func (e *engine) condition(name string, c v1.Condition) {
	now := e.c.now().UTC()
	changed := false
	err := e.c.store.Update(func(tx *store.Tx) error {
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
		e.log.Error("set condition", "cluster", name, "err", err)
	}
	if changed {
		e.c.hub.notify("cluster:" + name)
	}
}

func removeCondition(conds []v1.Condition, typ string) []v1.Condition {
	out := conds[:0]
	for _, c := range conds {
		if c.Type != typ {
			out = append(out, c)
		}
	}
	return out
}

func (e *engine) event(cluster string, ev v1.Event) {
	ev.Time = e.c.now().UTC()
	err := e.c.store.Update(func(tx *store.Tx) error {
		_, err := addEvent(tx, cluster, ev)
		return err
	})
	if err != nil {
		e.log.Error("record event", "cluster", cluster, "err", err)
	}
	e.c.hub.notify("cluster:" + cluster)
}
