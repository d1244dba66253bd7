package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vmware/govmomi/vim25/types"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/store"
	"github.com/harmonykaas/harmony/controller/vsphere"
)

const (
	// bootstrapTTL: a cloned VM must enroll within this long.
	bootstrapTTL = 24 * time.Hour
	// dataDiskRoot is the datastore folder of the masters' data disks,
	// apart from the VMs' folders so that no VM's removal takes them.
	dataDiskRoot = "harmony-data"
)

// stepTimeout bounds one step: longer than a clone of the largest disk.
const stepTimeout = 30 * time.Minute

// advance takes one machine through its steps until it is done, fails,
// or has to wait for a retry. The clone bound is held for the whole
// machine, so that at most CloneParallelism VMs are in flight.
func (e *engine) advance(ctx context.Context, p *pass, m machine) {
	select {
	case e.clones <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-e.clones }()
	for !m.settled() && ctx.Err() == nil {
		var r stepResult
		var err error
		// A vCenter call that never answers (a task wait on a session
		// gone bad) fails the step and is retried, instead of holding
		// the machine, and the clone bound, forever.
		sctx, cancel := context.WithTimeout(ctx, stepTimeout)
		switch {
		case m.Remove:
			r, err = e.teardownStep(sctx, p, &m)
		case m.Swap != nil:
			r, err = e.swapStep(sctx, p, &m)
		default:
			r, err = e.createStep(sctx, p, &m)
		}
		cancel()
		if ctx.Err() != nil {
			return // shutting down: the step is redone on the next start
		}
		if err != nil {
			switch {
			case m.Remove || !vsphere.IsNotFound(err):
				e.recordFailure(p, &m, err)
				return
			case m.Swap == nil && m.Step != stepPending:
				// The VM vanished under us: start it again from the clone.
				r = done("", fmt.Sprintf("VM %s of %s is gone from vCenter; cloning it again", m.VM, m.Name))
				m.VM, m.Step = "", stepPending
			case m.Swap != nil && m.Swap.beforeClone() && e.vmGone(ctx, p, m.Swap.OldVM):
				r = e.oldVMGone(p.rec, &m)
			default:
				// The rest of a replacement's steps say themselves what a
				// missing VM means.
				e.recordFailure(p, &m, err)
				return
			}
		}
		if r.wait > 0 {
			// Waiting is not failing: no attempt is counted, and the
			// machine is looked at again after r.wait.
			e.recordWait(&m, r.wait)
			return
		}
		if r.next == "" && r.msg == "" {
			return
		}
		if err := e.recordStep(p, &m, r); err != nil {
			e.cfg.Log.Error("record step", "cluster", m.Cluster, "node", m.Name, "err", err)
			return
		}
		if r.next == stepGone {
			return
		}
	}
}

// vmGone reports whether vCenter no longer has the VM; false when it
// cannot tell.
func (e *engine) vmGone(ctx context.Context, p *pass, vm string) bool {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	gone, err := p.vc.Gone(ctx, vmRef(vm))
	return err == nil && gone
}

// createStep does the machine's next create step and names the step it
// reached.
func (e *engine) createStep(ctx context.Context, p *pass, m *machine) (stepResult, error) {
	rec, vc := p.rec, p.vc
	ref := vmRef(m.VM)
	size := *rec.Spec.WorkerSize
	if m.Role == v1.RoleMaster {
		size = *rec.Spec.MasterSize
	}
	switch m.Step {
	case stepPending:
		image, template, snapshot := m.source(rec)
		got, err := vc.Clone(ctx, vsphere.CloneSpec{
			Template: template, Snapshot: snapshot, Name: m.Name, Folder: p.folder, Datastore: m.OSDatastore,
			Tags: map[string]string{vsphere.TagCluster: rec.UID, vsphere.TagNode: m.Name, vsphere.TagImage: image},
			// A machine made again (its VM vanished, or replaced by an
			// upgrade) keeps its BIOS UUID, which its role's providerID
			// names.
			UUID: m.UUID,
		})
		if err != nil {
			return stepResult{}, err
		}
		if m.Swap != nil && got.Value == m.Swap.OldVM {
			// Clone found the old VM by the name it should have given up.
			return stepResult{}, fmt.Errorf("the old VM %s still has the name %s", got.Value, m.Name)
		}
		m.VM = got.Value
		kind := "full clone"
		if snapshot != "" {
			kind = "linked clone"
		}
		return done(stepCloned, fmt.Sprintf("%s: %s of %s on %s", m.Name, kind, template, m.OSDatastore)), nil
	case stepCloned:
		if m.UUID == "" {
			uuid, err := vc.BIOSUUID(ctx, ref)
			if err != nil {
				return stepResult{}, err
			}
			m.UUID = uuid
		}
		err := vc.Configure(ctx, ref, vsphere.Hardware{CPUs: size.CPUs, MemoryMiB: size.MemoryMiB})
		return done(stepConfigured, fmt.Sprintf("%s: %d vCPUs, %d MiB, NIC on %s", m.Name, size.CPUs, size.MemoryMiB, vc.Provider.Network)), err
	case stepConfigured:
		if m.Role != v1.RoleMaster {
			return done(stepDataDisk, ""), nil
		}
		d := dataDisk(rec, m)
		if m.Swap != nil && !m.Swap.FreshDisk {
			// A replacement takes the old VM's disk, which must exist and
			// be on no other VM: it never gets a new one silently.
			err := vc.AttachDataDisk(ctx, p.folder, ref, d)
			if errors.Is(err, vsphere.ErrDiskMissing) {
				fresh := fmt.Sprintf("harmonyctl cluster upgrade %s --fresh-disk %s", rec.Spec.Name, m.Name)
				if m.Swap.Repair {
					fresh = fmt.Sprintf("harmonyctl cluster replace-node %s %s --fresh-disk", rec.Spec.Name, m.Name)
				}
				err = adminNeeded{fmt.Errorf("%w: the disk cannot move to the new VM; restore it and `harmonyctl cluster retry %s`, or give the new VM an empty disk, as a new etcd member in place of the old: `%s`",
					err, rec.Spec.Name, fresh)}
			}
			return done(stepDataDisk, fmt.Sprintf("%s: the old VM's data disk %s attached", m.Name, d.Path())), err
		}
		err := vc.EnsureDataDisk(ctx, ref, d)
		return done(stepDataDisk, fmt.Sprintf("%s: data disk %s (%d GiB) attached", m.Name, d.Path(), d.SizeGiB)), err
	case stepDataDisk:
		extra, err := e.guestinfo(p, m)
		if err != nil {
			return stepResult{}, err
		}
		err = vc.Configure(ctx, ref, vsphere.Hardware{CPUs: size.CPUs, MemoryMiB: size.MemoryMiB, ExtraConfig: extra})
		return done(stepBootstrapped, fmt.Sprintf("%s: bootstrap and network (%s) written to guestinfo", m.Name, m.IP)), err
	case stepBootstrapped:
		// Taken before the power-on: an agent quick to boot may report
		// before the task returns, and its reports are the new VM's.
		m.PoweredOnAt = e.cfg.Now().UTC()
		err := vc.PowerOn(ctx, ref)
		if m.Swap != nil {
			// The replacement's health is judged from reports after this.
			m.Swap.PoweredOnAt = m.PoweredOnAt
		}
		return done(stepPoweredOn, fmt.Sprintf("%s: powered on", m.Name)), err
	}
	return stepResult{}, nil
}

// guestinfo issues the node a new one-time bootstrap (revoking any unused
// token, so that a redone step leaves one valid token) and encodes it
// with the node's network document.
func (e *engine) guestinfo(p *pass, m *machine) (map[string]string, error) {
	// The provider as this pass read it, to connect its session.
	pool := p.vc.Provider.IPPool
	if pool == nil {
		return nil, fmt.Errorf("provider %s lost its ipPool", p.vc.Provider.Name)
	}
	boot, err := e.cfg.Bootstrap.Bootstrap(m.Name, bootstrapTTL)
	if err != nil {
		return nil, fmt.Errorf("bootstrap for %s: %w", m.Name, err)
	}
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
	netEnc, err := netcfg.EncodeGuestinfo()
	if err != nil {
		return nil, err
	}
	return map[string]string{v1.GuestinfoKey: bootEnc, v1.NetworkGuestinfoKey: netEnc}, nil
}

// teardownStep does the next step of a machine's removal.
func (e *engine) teardownStep(ctx context.Context, p *pass, m *machine) (stepResult, error) {
	vc := p.vc
	if m.VM == "" {
		vm, err := vc.FindVM(ctx, p.folder, m.Name)
		if err != nil {
			return stepResult{}, err
		}
		if vm != nil {
			m.VM = vm.Reference().Value
		}
	}
	ref := vmRef(m.VM)
	switch {
	case m.Step != stepLeft && m.Step != stepPoweredOff && m.Step != stepKept:
		return e.leave(ctx, p, m, ref)
	case m.VM == "":
		return done(stepGone, fmt.Sprintf("%s: removed (it had no VM)", m.Name)), nil
	case m.Step == stepLeft:
		err := vc.PowerOff(ctx, ref)
		if vsphere.IsNotFound(err) {
			m.VM, err = "", nil
		}
		return done(stepPoweredOff, fmt.Sprintf("%s: powered off", m.Name)), err
	case m.KeepVM:
		return done(stepKept, fmt.Sprintf("%s: VM %s kept, powered off, for troubleshooting", m.Name, m.VM)), nil
	default:
		if err := vc.Destroy(ctx, ref); err != nil {
			return stepResult{}, err
		}
		msg := fmt.Sprintf("%s: VM destroyed", m.Name)
		if m.Swap != nil && m.Swap.OldVM != "" && m.Swap.OldVM != m.VM {
			// Removed while an upgrade replaced it: the old VM goes too
			// (Destroy detaches the data disk first).
			if err := vc.Destroy(ctx, vmRef(m.Swap.OldVM)); err != nil {
				return stepResult{}, err
			}
			msg += fmt.Sprintf(", and the old VM %s it was replacing", m.Swap.OldVM)
		}
		if m.Role == v1.RoleMaster {
			d := dataDisk(p.rec, m)
			if p.rec.Purge {
				if err := vc.DeleteDataDisk(ctx, d); err != nil {
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

// leave waits for the node to leave its cluster before its VM is powered
// off. The node's role says Leave (roles gives it one while the machine is
// leaving); its agent drains, gives up the VIP, resets kubeadm and, on a
// master, removes its etcd member, then reports PhaseLeft. The machine
// waits (no step, a re-check after a while) until then, or until the
// deadline the role carries passes. A node that never enrolled, or whose
// VM is off or gone, cannot leave, and goes on at once; so does every node
// of a deleted cluster, which has nothing left to leave.
func (e *engine) leave(ctx context.Context, p *pass, m *machine, ref types.ManagedObjectReference) (stepResult, error) {
	var node store.Node
	var nodeErr error
	var st v1.Status
	var reported bool
	_ = e.cfg.Store.View(func(tx *store.Tx) error {
		node, nodeErr = tx.Node(m.Name)
		st, reported = tx.Status(m.Name)
		return nil
	})
	switch {
	case p.rec.Deleting || m.LeaveBy.IsZero():
		return done(stepLeft, fmt.Sprintf("%s: the cluster is deleted; nothing to leave", m.Name)), nil
	case nodeErr != nil || node.EnrolledAt.IsZero():
		return done(stepLeft, fmt.Sprintf("%s: never enrolled; nothing to leave", m.Name)), nil
	case reported && st.Phase == v1.PhaseLeft:
		if bad := unhealthyComponents(st); len(bad) > 0 {
			// A drain that ran out of time, say: the node left, but its
			// pods were not all moved first.
			return stepResult{next: stepLeft, typ: "Warning", msg: fmt.Sprintf("%s: left the cluster, but %s did not finish cleanly (%s)",
				m.Name, strings.Join(bad, ", "), agentReport(st, reported))}, nil
		}
		return done(stepLeft, fmt.Sprintf("%s: left the cluster (%s)", m.Name, agentReport(st, reported))), nil
	}
	// A master that did not leave may still be an etcd member (its agent
	// reports it until its member is removed), counted against the quorum
	// until the remaining masters remove it.
	lost, lostSays := "", ""
	if _, err := v1.ParseEtcdMemberID(st.EtcdMemberID); err == nil && reported && m.Role == v1.RoleMaster {
		lost = st.EtcdMemberID
		lostSays = fmt.Sprintf("; the remaining masters remove its etcd member %s", lost)
	}
	warn := func(why string) stepResult {
		return stepResult{next: stepLeft, typ: "Warning", lostMember: lost, msg: fmt.Sprintf(
			"%s: WARNING: powered off without leaving the cluster: %s; the agent last reported: %s%s", m.Name, why, agentReport(st, reported), lostSays)}
	}
	if m.VM == "" {
		return warn("its VM is gone, so it cannot leave"), nil
	}
	power, err := p.vc.VM(ref).PowerState(ctx)
	switch {
	case vsphere.IsNotFound(err):
		return warn("its VM is gone, so it cannot leave"), nil
	case err != nil:
		return stepResult{}, fmt.Errorf("power state of %s: %w", m.VM, err)
	case power != types.VirtualMachinePowerStatePoweredOn:
		return warn(fmt.Sprintf("its VM is %s, so it cannot leave", power)), nil
	}
	left := m.LeaveBy.Sub(e.cfg.Now())
	if left <= 0 && m.ReplacedBy != "" {
		// An upgrade never powers a worker off with its pods: it stops,
		// saying why, until an admin has made room and retries.
		return stepResult{}, adminNeeded{fmt.Errorf("%s did not leave by %s, its pods not all moved (an upgrade does not force it): %s; make room for them (disruption budgets, capacity), then `harmonyctl cluster retry %s`",
			m.Name, m.LeaveBy.UTC().Format(time.RFC3339), agentReport(st, reported), m.Cluster)}
	}
	if left <= 0 {
		return warn(fmt.Sprintf("it did not report %s by its deadline %s", v1.PhaseLeft, m.LeaveBy.UTC().Format(time.RFC3339))), nil
	}
	return stepResult{wait: min(left, e.cfg.StatusPoll)}, nil
}

// unhealthyComponents names the components a status reports unhealthy.
func unhealthyComponents(st v1.Status) []string {
	var names []string
	for _, c := range st.Components {
		if !c.Healthy {
			names = append(names, c.Name)
		}
	}
	return names
}

// refusedComponents says which of a node's components refuse its role
// for good (v1.ComponentRefused), and why; empty if none does.
func refusedComponents(components []v1.ComponentStatus) string {
	var out []string
	for _, c := range components {
		if c.Phase == v1.ComponentRefused {
			out = append(out, c.Name+": "+shorten(c.Message, 300))
		}
	}
	return strings.Join(out, "; ")
}

// shorten cuts an agent's message to at most n bytes, and says so.
func shorten(msg string, n int) string {
	if len(msg) <= n {
		return msg
	}
	return strings.ToValidUTF8(msg[:n], "") + "…"
}

// agentReport sums up a node's last status for an event: its phase, when,
// and what each component said that is not plain success.
func agentReport(st v1.Status, reported bool) string {
	if !reported {
		return "nothing (it never reported)"
	}
	out := fmt.Sprintf("%s at %s", st.Phase, st.ReportedAt.UTC().Format(time.RFC3339))
	for _, c := range st.Components {
		if c.Message == "" {
			continue
		}
		out += fmt.Sprintf("; %s %s: %s", c.Name, c.Phase, shorten(c.Message, 160))
		if len(out) > 900 {
			return shorten(out, 900)
		}
	}
	return out
}

// recordWait stores when a waiting machine is looked at again, with no
// event and no attempt counted.
func (e *engine) recordWait(m *machine, wait time.Duration) {
	// Scheduling is in the machine's own time, as engine.go's; events in
	// the controller's.
	m.NextTry = time.Now().Add(wait)
	now := e.cfg.Now().UTC()
	seen := m.News
	err := e.cfg.Store.Update(func(tx *store.Tx) error {
		if err := mergeProgress(tx, m, now); err != nil {
			return err
		}
		if m.News != seen {
			// A report with news came since the pass read the machine,
			// maybe after the step read the node's: no wait, and the
			// report's kick runs the next pass.
			m.NextTry = time.Time{}
		}
		return putMachine(tx, m)
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		e.cfg.Log.Error("record wait", "cluster", m.Cluster, "node", m.Name, "err", err)
	}
}

// stepResult is a step done: the step reached (empty: the step stays as
// set) and the event that tells of it (none without a message); or, with
// wait set, no step yet: the machine waits that long before it is looked
// at again.
type stepResult struct {
	next, typ, msg string
	wait           time.Duration
	// reason overrides the event reason the step implies.
	reason string
	// roles says the step changed what the cluster's roles say.
	roles bool
	// lostMember is the etcd member of a master removed without leaving
	// the cluster, for the remaining masters to remove.
	lostMember string
}

func done(next, msg string) stepResult { return stepResult{next: next, typ: "Normal", msg: msg} }

func dataDisk(rec *record, m *machine) vsphere.DataDisk {
	return vsphere.DataDisk{Datastore: m.DataDatastore, Dir: rec.diskDir(), Name: cmp.Or(m.DataDisk, m.Name), SizeGiB: rec.Spec.MasterDataDiskGiB}
}

// recordStep stores a finished step and its event in one transaction; the
// last step of a removal deletes the machine, its node record and its
// address.
func (e *engine) recordStep(p *pass, m *machine, r stepResult) error {
	now := e.cfg.Now().UTC()
	if r.next != "" {
		m.Step = r.next
	}
	m.Attempts, m.NextTry, m.LastError = 0, time.Time{}, ""
	err := e.cfg.Store.Update(func(tx *store.Tx) error {
		if err := mergeProgress(tx, m, now); err != nil {
			return err
		}
		switch r.next {
		case stepGone:
			if m.Role == v1.RoleMaster && m.DataDatastore != "" {
				if err := dataDiskWasOn(tx, m.Cluster, m.DataDatastore); err != nil {
					return err
				}
			}
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
			switch {
			case r.lostMember != "":
				if err := loseMember(tx, p, r.lostMember); err != nil {
					return err
				}
			case r.next == stepConfigured || r.roles:
				// The VM's UUID is known from here: the node's role
				// carries it as its provider ID.
				if err := putRoles(tx, p.rec, p.sec); err != nil {
					return err
				}
			}
		}
		if r.msg == "" {
			return nil
		}
		reason := r.reason
		if reason == "" {
			reason = reasonOfStep(r.next)
		}
		_, err := addEvent(tx, m.Cluster, v1.Event{Time: now, Type: r.typ, Node: m.Name, Reason: reason, Message: r.msg})
		return err
	})
	if err == nil {
		e.cfg.Notify(NotifyKey(m.Cluster))
	}
	return err
}

// loseMember notes the etcd member of a master removed without leaving
// in the cluster's record, and gives the roles again: the remaining
// masters' agents remove it. Until then it counts against the quorum: a
// lost master replaced by a new one leaves four members of which three
// must answer, so the next failure would stop the cluster.
func loseMember(tx *store.Tx, p *pass, id string) error {
	cur, err := loadCluster(tx, p.rec.Spec.Name)
	if err != nil {
		return err
	}
	if !slices.Contains(cur.LostEtcdMembers, id) {
		cur.LostEtcdMembers = append(cur.LostEtcdMembers, id)
		if extra := len(cur.LostEtcdMembers) - v1.MaxRemoveMembers; extra > 0 {
			cur.LostEtcdMembers = slices.Clone(cur.LostEtcdMembers[extra:])
		}
		if err := tx.Put(store.Clusters, cur.Spec.Name, cur); err != nil {
			return err
		}
	}
	// The rest of this pass gives roles from p.rec.
	p.rec.LostEtcdMembers = cur.LostEtcdMembers
	return putRoles(tx, cur, p.sec)
}

// mergeProgress takes what an admin changed on the stored machine while
// the workflow worked on it (removal, keep-VM, an aborted replacement, the
// fresh-disk path) into m, so that writing m back keeps both.
func mergeProgress(tx *store.Tx, m *machine, now time.Time) error {
	var cur machine
	if err := tx.Get(store.Machines, machineKey(m.Cluster, m.Name), &cur); err != nil {
		return fmt.Errorf("machine %s: %w", m.Name, err)
	}
	if cur.Remove && !m.Remove {
		// Removal was asked for meanwhile: it starts from a clean slate.
		m.Failed, m.Attempts, m.NextTry, m.LastError = false, 0, time.Time{}, ""
	}
	m.Remove, m.KeepVM, m.LeaveBy, m.News = cur.Remove, cur.KeepVM, cur.LeaveBy, cur.News
	if cur.Swap != nil && cur.Swap.Rollback && m.Swap != nil && !m.Swap.Rollback {
		// An abort turned the replacement around meanwhile.
		m.Swap.Rollback, m.Swap.Why = true, cur.Swap.Why
		m.Failed, m.Attempts, m.NextTry, m.LastError = false, 0, time.Time{}, ""
	}
	if cur.Swap != nil && cur.Swap.FreshDisk && m.Swap != nil && !m.Swap.FreshDisk {
		// An admin chose the fresh-disk path meanwhile (amend).
		if !m.pastDataDisk() {
			m.Swap.FreshDisk, m.DataDisk = true, cur.DataDisk
			return nil
		}
		// Too late: the step that just ended gave the new VM the old disk.
		_, err := addEvent(tx, m.Cluster, v1.Event{Time: now, Type: "Warning", Node: m.Name, Reason: "UpgradeFreshDisk",
			Message: fmt.Sprintf("%s: the fresh-disk path was chosen while its new VM was taking the old data disk %s, which it has now: it goes on with that disk; abort the upgrade to start afresh", m.Name, m.DataDisk)})
		return err
	}
	return nil
}

func reasonOfStep(step string) string {
	switch step {
	case stepDataDisk:
		return "DataDisk"
	case stepBootstrapped:
		return "Bootstrap"
	case stepLeft:
		return "Leave"
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
func (e *engine) recordFailure(p *pass, m *machine, stepErr error) {
	now := e.cfg.Now().UTC()
	m.Attempts++
	m.LastError = stepErr.Error()
	delay := min(e.cfg.RetryBase<<(m.Attempts-1), maxRetryDelay)
	delay += time.Duration(rand.Int64N(int64(delay)/4 + 1))
	m.NextTry = time.Now().Add(delay)
	var admin adminNeeded
	permanent := vsphere.Permanent(stepErr) || errors.As(stepErr, &admin)
	if permanent || m.Attempts >= e.cfg.MaxAttempts {
		m.Failed = true
	}
	ev := v1.Event{Time: now, Type: "Warning", Node: m.Name, Reason: "StepFailed",
		Message: fmt.Sprintf("%s: attempt %d after %q failed: %v; retry in %s", m.Name, m.Attempts, stepOrStart(m.Step), stepErr, delay.Round(time.Millisecond))}
	if m.Failed {
		why := fmt.Sprintf("gave up after %d attempts", m.Attempts)
		switch {
		case errors.As(stepErr, &admin):
			why = "it waits for an admin"
		case permanent:
			why = "the fault is permanent"
		}
		ev.Reason = "Failed"
		ev.Message = fmt.Sprintf("%s: %v; %s: fix the cause, then `harmonyctl cluster retry %s`", m.Name, stepErr, why, m.Cluster)
	}
	e.cfg.Log.Warn("cluster step failed", "cluster", m.Cluster, "node", m.Name, "step_done", m.Step, "attempt", m.Attempts, "failed", m.Failed, "err", stepErr)
	err := e.cfg.Store.Update(func(tx *store.Tx) error {
		if err := mergeProgress(tx, m, now); errors.Is(err, store.ErrNotFound) {
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
		e.cfg.Log.Error("record failure", "cluster", m.Cluster, "node", m.Name, "err", err)
	}
	e.cfg.Notify(NotifyKey(m.Cluster))
}

// adminNeeded is a step failure that no retry mends by itself: the
// machine fails at once, and waits for an admin to act and retry.
type adminNeeded struct{ error }

func (e adminNeeded) Unwrap() error { return e.error }

func stepOrStart(step string) string {
	if step == "" {
		return "start"
	}
	return step
}
