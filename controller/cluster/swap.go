package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/vmware/govmomi/vim25/types"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/store"
	"github.com/harmonykaas/harmony/controller/vsphere"
)

// A master's replacement in an upgrade by reimage, one recorded step at
// a time: the old VM hands over (its agent steps out of service without
// leaving), powers off and gives up its data disk and its name; a new VM
// of the same name, address, BIOS UUID and role is made by the machine's
// usual create steps from the new template, takes the disk, and must come
// back as the same etcd member; only then is the old VM destroyed. Until
// then the old VM is kept, renamed, so that a rollback can give it its
// disk and name back and power it on. No step creates or deletes a data
// disk, and AttachDataDisk refuses a disk another VM holds.
const (
	swapHandOver     = v1.SwapHandingOver
	swapHandedOver   = v1.SwapHandedOver
	swapOldOff       = v1.SwapOldOff
	swapDiskDetached = v1.SwapDiskDetached
	// swapCloning: the old VM is renamed aside; the machine's create
	// steps make the new VM.
	swapCloning   = v1.SwapCloning
	swapVerifying = v1.SwapVerifying
	swapVerified  = v1.SwapVerified
	// swapRolledBack: the old VM serves again; the upgrade stops.
	swapRolledBack = v1.SwapRolledBack
)

// swap is how far a master's replacement got.
type swap struct {
	Step      string    `json:"step"`
	StartedAt time.Time `json:"startedAt"`
	// HandOverBy is the deadline of the old VM's hand-over.
	HandOverBy time.Time `json:"handOverBy"`
	// OldVM is the VM being replaced; OldName the name it steps aside to.
	OldVM   string `json:"oldVM"`
	OldName string `json:"oldName"`
	// What the old VM was cloned from and ran, restored by a rollback.
	OldImage    string `json:"oldImage"`
	OldTemplate string `json:"oldTemplate"`
	OldSnapshot string `json:"oldSnapshot,omitempty"`
	OldVersion  string `json:"oldVersion"`
	// OldDataDisk is the name of the old VM's data disk, which a
	// rollback gives back to it.
	OldDataDisk string `json:"oldDataDisk,omitempty"`
	// MemberID is the etcd member the node was before: the new VM must
	// come back as it, unless FreshDisk.
	MemberID string `json:"memberID,omitempty"`
	// FreshDisk is the fresh-disk path, chosen by an admin: the new VM
	// gets a new, empty data disk and joins etcd as a new member in
	// place of MemberID.
	FreshDisk bool `json:"freshDisk,omitempty"`
	// Repair: a replace-node asked for it, not an upgrade; the new VM is
	// of the node's own image, and the old VM need not hand over
	// (replace.go).
	Repair      bool      `json:"repair,omitempty"`
	PoweredOnAt time.Time `json:"poweredOnAt,omitzero"`
	// Rollback says the replacement is being undone, and Why.
	Rollback bool   `json:"rollback,omitempty"`
	Why      string `json:"why,omitempty"`
}

// newSwap begins master m's replacement as etcd member member: its role
// says Leave with HandOver until handOverBy, and what its VM was cloned
// from and runs is kept for a rollback.
func newSwap(rec *record, m *machine, now, handOverBy time.Time, member string) *swap {
	image, template, snapshot := m.source(rec)
	return &swap{Step: swapHandOver, StartedAt: now, HandOverBy: handOverBy,
		OldVM: m.VM, OldName: m.Name + "-old", OldImage: image, OldTemplate: template, OldSnapshot: snapshot,
		OldVersion: m.kubernetesVersion(rec), OldDataDisk: m.DataDisk, MemberID: member}
}

func vmRef(value string) types.ManagedObjectReference {
	return types.ManagedObjectReference{Type: "VirtualMachine", Value: value}
}

// swapDone is a swap step done: the swap reached step, with an event.
func swapDone(m *machine, step, reason, format string, args ...any) stepResult {
	m.Swap.Step = step
	return stepResult{typ: "Normal", reason: m.Swap.reason(reason), msg: m.Name + ": " + fmt.Sprintf(format, args...)}
}

// reason is an upgrade's event reason, or a replace-node's: "Replace"
// in place of "Upgrade" (UpgradeRollback: ReplaceRollback).
func (s *swap) reason(upgrade string) string {
	if s.Repair {
		return "Replace" + strings.TrimPrefix(upgrade, "Upgrade")
	}
	return upgrade
}

// swapStep does the next step of a master's replacement.
func (e *engine) swapStep(ctx context.Context, p *pass, m *machine) (stepResult, error) {
	s := m.Swap
	switch {
	case s.Step == swapRolledBack:
		// Rolled back onto a clone of the old image (its old VM was
		// gone): the clone waits until the engine ends the replacement.
		return stepResult{}, nil
	case s.Rollback:
		return e.rollbackStep(ctx, p, m)
	}
	vc, old := p.vc, vmRef(s.OldVM)
	switch s.Step {
	case swapHandOver:
		if s.Repair {
			return e.repairHandOver(ctx, p, m)
		}
		return e.handOver(m), nil
	case swapHandedOver:
		if err := vc.PowerOff(ctx, old); err != nil {
			return stepResult{}, err
		}
		r := swapDone(m, swapOldOff, "Upgrade", "old VM %s powered off", s.OldVM)
		r.roles = true // the new VM's role says no Leave
		return r, nil
	case swapOldOff:
		paths, err := vc.DetachPersistentDisks(ctx, old)
		if err != nil {
			return stepResult{}, err
		}
		d := dataDisk(p.rec, m)
		if len(paths) == 0 {
			// Detached before a crash: it must be on no VM now.
			users, err := vc.DiskUsers(ctx, p.folder, d.Path())
			if err != nil {
				return stepResult{}, err
			}
			if len(users) > 0 {
				return stepResult{}, &vsphere.DiskInUseError{Path: d.Path(), VMs: []string{users[0].Name}}
			}
		}
		return swapDone(m, swapDiskDetached, "Upgrade", "data disk %s detached from the old VM %s, kept", d.Path(), s.OldVM), nil
	case swapDiskDetached:
		if err := vc.Rename(ctx, old, s.OldName); err != nil {
			return stepResult{}, err
		}
		disk := e.toClone(p.rec, m)
		return swapDone(m, swapCloning, "Upgrade", "old VM %s renamed %s and kept for a rollback; cloning its replacement from %s, with %s",
			s.OldVM, s.OldName, m.Template, disk), nil
	case swapCloning:
		if m.Step != stepPoweredOn {
			return e.createStep(ctx, p, m)
		}
		return swapDone(m, swapVerifying, "Upgrade", "waiting for the new VM to report Ready as etcd member %s", s.MemberID), nil
	case swapVerifying:
		return e.verifySwap(m), nil
	case swapVerified:
		if err := vc.Destroy(ctx, old); err != nil {
			return stepResult{}, err
		}
		m.Swap = nil
		return stepResult{typ: "Normal", reason: s.reason("Upgraded"), msg: fmt.Sprintf("%s: replaced by a VM of image %s; the old VM %s destroyed",
			m.Name, m.Image, s.OldVM)}, nil
	}
	return stepResult{}, fmt.Errorf("unknown replacement step %q", s.Step)
}

// toClone sends the machine to its create steps for the new VM, of the
// upgrade's image (a repair's is the node's own), and says which data
// disk the new VM gets.
func (e *engine) toClone(rec *record, m *machine) string {
	s := m.Swap
	m.VM, m.Step = "", stepPending
	if !s.Repair {
		m.Image, m.Template, m.Snapshot = rec.Upgrade.Image, rec.Upgrade.Template, rec.Upgrade.Snapshot
		m.KubernetesVersion = rec.Upgrade.KubernetesVersion
	}
	if s.FreshDisk {
		m.DataDisk = freshDiskName(m.Name, e.cfg.Now())
		return "a new, empty data disk " + m.DataDisk
	}
	return "the old VM's data disk"
}

// beforeClone reports whether the old VM still holds the machine's name:
// the replacement has not sent the machine to its clone yet.
func (s *swap) beforeClone() bool {
	switch s.Step {
	case swapHandOver, swapHandedOver, swapOldOff, swapDiskDetached:
		return !s.Rollback
	}
	return false
}

// oldVMGone goes on with a replacement whose old VM was destroyed or
// unregistered behind the controller's back before the clone: nothing is
// left to hand over, power off, detach or rename, so the new VM is cloned
// at once, as the sweep clones a vanished VM again. The data disk
// outlives an unregistered VM; one destroyed with its VM stops the clone
// on the missing disk, which says to choose the fresh-disk path.
func (e *engine) oldVMGone(rec *record, m *machine) stepResult {
	s := m.Swap
	disk := e.toClone(rec, m)
	m.Failed = false // a step failed on the missing VM: that is over
	r := swapDone(m, swapCloning, "Upgrade", "WARNING: the old VM %s is gone from vCenter; cloning its replacement from %s at once, with %s (a rollback would clone the old image again)",
		s.OldVM, m.Template, disk)
	r.typ, r.roles = "Warning", true // the new VM's role says no Leave
	return r
}

// handOver waits for the old VM's agent to report that it stepped out of
// service (its role says Leave with HandOver). Past the deadline the
// replacement is abandoned: nothing has changed in vCenter yet.
func (e *engine) handOver(m *machine) stepResult {
	s := m.Swap
	st, reported := e.status(m.Name)
	switch {
	case reported && st.Phase == v1.PhaseLeft && st.ReportedAt.After(s.StartedAt):
		return swapDone(m, swapHandedOver, "Upgrade", "handed over: %s", agentReport(st, reported))
	case !e.cfg.Now().Before(s.HandOverBy):
		return e.startRollback(m, fmt.Sprintf("it did not hand over by %s; the agent last reported: %s",
			s.HandOverBy.UTC().Format(time.RFC3339), agentReport(st, reported)))
	}
	return stepResult{wait: min(s.HandOverBy.Sub(e.cfg.Now()), e.cfg.StatusPoll)}
}

// verifySwap waits for the new VM's agent to report Ready, as the same
// etcd member and with its Kubernetes Node Ready; past UpgradeNodeTimeout
// after its power-on, as another member, or with a component that refuses
// its role, the replacement is rolled back.
func (e *engine) verifySwap(m *machine) stepResult {
	s := m.Swap
	st, reported := e.status(m.Name)
	fresh := reported && st.ReportedAt.After(s.PoweredOnAt)
	if fresh && !s.FreshDisk && s.MemberID != "" && st.EtcdMemberID != "" && st.EtcdMemberID != s.MemberID {
		return e.startRollback(m, fmt.Sprintf("the new VM came up as etcd member %s, not %s", st.EtcdMemberID, s.MemberID))
	}
	// On the fresh-disk path the node is a new member (its agent removed
	// the old one before it joined).
	member := s.MemberID == "" || st.EtcdMemberID == s.MemberID
	if s.FreshDisk {
		member = st.EtcdMemberID != "" && st.EtcdMemberID != s.MemberID
	}
	kubeReady := st.KubernetesNode == nil || st.KubernetesNode.Ready == "True"
	if fresh && st.Phase == v1.PhaseReady && kubeReady && member {
		return swapDone(m, swapVerified, "Upgrade", "the new VM serves: %s", agentReport(st, reported))
	}
	if why := e.newVMFault(s.PoweredOnAt, st, fresh); why != "" {
		return e.startRollback(m, "the new VM "+why)
	}
	return stepResult{wait: min(s.PoweredOnAt.Add(e.cfg.UpgradeNodeTimeout).Sub(e.cfg.Now()), e.cfg.StatusPoll)}
}

// newVMFault says why a new VM of an upgrade, powered on at poweredOn and
// not serving yet, never will: it refused its role (its image cannot do
// what the role asks, so waiting changes nothing), or the node timeout
// has passed. Empty: it may still. fresh: st is the new VM's own report.
func (e *engine) newVMFault(poweredOn time.Time, st v1.Status, fresh bool) string {
	if refused := refusedComponents(st.Components); fresh && refused != "" {
		return "refused its role: " + refused
	}
	if e.cfg.Now().Before(poweredOn.Add(e.cfg.UpgradeNodeTimeout)) {
		return ""
	}
	return fmt.Sprintf("was not Ready within %s of its power-on; it reported: %s", e.cfg.UpgradeNodeTimeout, agentReport(st, fresh))
}

// startRollback turns the replacement around.
func (e *engine) startRollback(m *machine, why string) stepResult {
	m.Swap.Rollback, m.Swap.Why = true, why
	return stepResult{typ: "Warning", reason: m.Swap.reason("UpgradeRollback"), roles: true,
		msg: fmt.Sprintf("%s: rolling back to the old VM %s: %s", m.Name, m.Swap.OldVM, why)}
}

// rollbackStep undoes a replacement, whatever step it reached, each part
// looking at vCenter first: the new VM (if any) is destroyed, its data
// disk detached first and kept; the old VM gets its name and disk back
// and powers on.
func (e *engine) rollbackStep(ctx context.Context, p *pass, m *machine) (stepResult, error) {
	s, vc := m.Swap, p.vc
	old := vmRef(s.OldVM)
	finish := func(format string, args ...any) stepResult {
		m.VM, m.Step, m.DataDisk = s.OldVM, stepPoweredOn, s.OldDataDisk
		m.Image, m.Template, m.Snapshot, m.KubernetesVersion = s.OldImage, s.OldTemplate, s.OldSnapshot, s.OldVersion
		s.Step = swapRolledBack
		return stepResult{typ: "Warning", reason: s.reason("UpgradeRolledBack"), roles: true, msg: m.Name + ": " + fmt.Sprintf(format, args...)}
	}
	// oldDisk is the data disk the old VM had, which a rollback gives back.
	oldDisk := func() vsphere.DataDisk {
		o := *m
		o.DataDisk = s.OldDataDisk
		return dataDisk(p.rec, &o)
	}
	// The old VM destroyed or unregistered behind the controller's back:
	// the machine is cloned again as it was, as the sweep does.
	gone := func() stepResult {
		disk := "the old VM's data disk"
		if s.FreshDisk {
			// The fresh-disk path is undone with the rest.
			disk = fmt.Sprintf("the old VM's data disk %s, not the fresh one (a new, empty disk is made at that path if it is missing)", oldDisk().Path())
		}
		r := finish("rolled back: the old VM %s is gone from vCenter, so %s is cloned again from its old image %s, with %s%s (%s)",
			s.OldVM, m.Name, s.OldImage, disk, e.rejoinNote(m), s.Why)
		m.VM, m.Step = "", stepPending
		return r
	}
	if s.Step == swapHandOver {
		return finish("replacement abandoned before anything changed in vCenter; the old VM %s serves on: %s", s.OldVM, s.Why), nil
	}
	newVM := ""
	if m.VM != "" && m.VM != s.OldVM {
		newVM = m.VM
	} else if vm, err := vc.FindVM(ctx, p.folder, m.Name); err != nil {
		return stepResult{}, err
	} else if vm != nil && vm.Reference().Value != s.OldVM {
		newVM = vm.Reference().Value
	}
	if newVM != "" {
		// Destroy detaches the data disk (a persistent disk) first.
		if err := vc.Destroy(ctx, vmRef(newVM)); err != nil {
			return stepResult{}, err
		}
		m.VM = s.OldVM
		return stepResult{typ: "Warning", reason: s.reason("UpgradeRollback"), msg: fmt.Sprintf("%s: the new VM %s destroyed; its data disk kept", m.Name, newVM)}, nil
	}
	if err := vc.Rename(ctx, old, m.Name); vsphere.IsNotFound(err) {
		return gone(), nil
	} else if err != nil {
		return stepResult{}, err
	}
	disk := "its data disk again"
	if m.Role == v1.RoleMaster {
		d := oldDisk()
		err := vc.AttachDataDisk(ctx, p.folder, old, d)
		switch {
		case vsphere.IsNotFound(err):
			return gone(), nil
		case errors.Is(err, vsphere.ErrDiskMissing):
			// Nothing to give back; its agent will say it has no disk.
			disk, err = "no data disk: "+d.Path()+" is missing", nil
		}
		if err != nil {
			return stepResult{}, err
		}
	}
	if err := vc.PowerOn(ctx, old); vsphere.IsNotFound(err) {
		return gone(), nil
	} else if err != nil {
		return stepResult{}, err
	}
	return finish("rolled back: the old VM %s has its name and %s, and is powered on%s (%s)", s.OldVM, disk, e.rejoinNote(m), s.Why), nil
}

// rejoinNote says, for a rollback, when the new VM may have joined etcd
// as a new member: that removed the old member, so the old VM cannot
// serve as it again. Its agent sees that the cluster no longer has the
// member its state is of, sets the state aside and joins afresh.
func (e *engine) rejoinNote(m *machine) string {
	s := m.Swap
	if m.Role != v1.RoleMaster || s.PoweredOnAt.IsZero() {
		return ""
	}
	st, reported := e.status(m.Name)
	other := reported && st.ReportedAt.After(s.PoweredOnAt) && st.EtcdMemberID != "" && st.EtcdMemberID != s.MemberID
	const rejoin = "the old VM's agent sets that member's state aside on its data disk and joins afresh"
	switch {
	case other:
		return fmt.Sprintf("; the new VM joined etcd as member %s, which removed member %s: %s", st.EtcdMemberID, s.MemberID, rejoin)
	case s.FreshDisk:
		return fmt.Sprintf("; the new VM, on the fresh-disk path, may have joined etcd as a new member, which removes member %s: if so, %s", s.MemberID, rejoin)
	}
	return ""
}

// pastDataDisk reports whether the machine's replacement has its data
// disk already: the new VM went beyond the step that attaches it.
func (m *machine) pastDataDisk() bool {
	switch m.Swap.Step {
	case swapCloning:
		return m.Step != stepPending && m.Step != stepCloned && m.Step != stepConfigured
	case swapVerifying, swapVerified:
		return true
	}
	return false
}

// takeFreshDisk puts a replacement that has not reached its data disk on
// the fresh-disk path, and lets its workflow run again (it may have
// stopped on the missing disk). False: too late, the replacement is past
// its data disk or rolling back.
func (m *machine) takeFreshDisk(now time.Time) bool {
	if m.Swap.Rollback || m.pastDataDisk() {
		return false
	}
	m.Swap.FreshDisk = true
	if m.Swap.Step == swapCloning {
		m.DataDisk = freshDiskName(m.Name, now)
	}
	m.Failed, m.Attempts, m.NextTry, m.LastError = false, 0, time.Time{}, ""
	return true
}

// freshDiskName names the new data disk of a fresh-disk replacement: the
// old disk's file stays where it is, under the machine's name.
func freshDiskName(node string, now time.Time) string {
	return node + "-" + now.UTC().Format("20060102t150405")
}

// status is a node's last report.
func (e *engine) status(node string) (v1.Status, bool) {
	var st v1.Status
	var ok bool
	_ = e.cfg.Store.View(func(tx *store.Tx) error {
		st, ok = tx.Status(node)
		return nil
	})
	return st, ok
}
