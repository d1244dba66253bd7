package cluster

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/vmware/govmomi/vim25/types"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/store"
)

// A replace-node is the repair of one master whose VM is broken: the
// replacement steps of an upgrade (swap.go), to the image the node runs.
// It differs in two ways. The old VM need not hand over: one that is
// powered off, whose agent is silent, or that is past its deadline is
// powered off without. And nothing drives it but its own steps: the
// operation ends when the new VM serves, or fails when it is rolled back
// (endRepairs).

// silentAgent is how long a replaced master's agent may stay silent after
// the request before its VM is taken as one that cannot hand over: an
// agent that answers gets its new role at once and reports within
// seconds.
const silentAgent = 2 * time.Minute

// ReplaceNode starts replacing a master's VM by a new one of the same
// name, address, BIOS UUID and image, on its data disk or, with
// req.FreshDisk, a new one. Asked again with req.FreshDisk for a master
// whose replacement runs (one stopped on its missing disk), it puts that
// replacement on the fresh-disk path.
func (s *Service) ReplaceNode(name, node string, req v1.ReplaceNodeRequest, by string) (v1.Operation, error) {
	return s.change(name, 0, v1.OperationReplaceNode, func(tx *store.Tx, rec *record, sec *secrets) (string, error) {
		switch {
		case rec.Deleting:
			return "", refuse(Conflict, "", "cluster %q is being deleted", name)
		case rec.Upgrade.running():
			return "", upgradeRuns(rec)
		case rec.Restore.running():
			return "", restoreRuns(rec)
		}
		machines, err := loadMachines(tx, name)
		if err != nil {
			return "", err
		}
		if i := slices.IndexFunc(machines, func(m machine) bool { return m.Name == node && m.Swap != nil && m.Swap.Repair }); i >= 0 && req.FreshDisk {
			return s.freshDiskForRepair(tx, rec, machines, &machines[i], by)
		}
		if err := replacing(name, machines); err != nil {
			return "", err
		}
		var m *machine
		var others []machine
		for i := range machines {
			o := &machines[i]
			switch {
			case o.Name == node && !o.Remove:
				m = o
			case o.Remove && !o.settled():
				// A master leaving etcd meanwhile could take the quorum.
				return "", refuse(Conflict, "", "node %s of cluster %q is being removed (step %q); wait for it first", o.Name, name, o.Step)
			case !o.Remove && !o.settled() && !o.Failed:
				return "", refuse(Conflict, "", "node %s of cluster %q is being created (step %q); wait for it first", o.Name, name, o.Step)
			case o.stayingMaster():
				others = append(others, *o)
			}
		}
		switch {
		case m == nil:
			return "", refuse(NotFound, "node", "cluster %q has no node %q", name, node)
		case m.Role != v1.RoleMaster:
			return "", refuse(Invalid, "node", "%s is a worker; replace a worker by removing it (`harmonyctl cluster remove-node %s %s`) and scaling the workers back up", node, name, node)
		}
		if req.FreshDisk {
			if err := freshDiskQuorum(rec, machines, node, "freshDisk"); err != nil {
				return "", err
			}
		}
		if !m.provisioned() || m.Failed {
			return "", refuse(Conflict, "node", "%s is not provisioned (step %q%s); its own workflow comes first: `harmonyctl cluster retry %s`", node, m.Step, failedNote(m), name)
		}
		// The cluster keeps its etcd quorum while this master is down only
		// if every other master serves.
		statuses := statusesOf(tx, machines)
		if err := checkMasters(others, statuses); err != nil {
			return "", refuse(PrecheckFailed, "node", "%v; every other master must be a started, healthy etcd member while %s is replaced", err, node)
		}
		now := s.cfg.Now().UTC()
		st, reported := statuses[node]
		member := ""
		if _, err := v1.ParseEtcdMemberID(st.EtcdMemberID); err == nil && reported {
			member = st.EtcdMemberID
		}
		m.Swap = newSwap(rec, m, now, now.Add(s.cfg.LeaveTimeout), member)
		m.Swap.Repair, m.Swap.FreshDisk = true, req.FreshDisk
		if err := putMachine(tx, m); err != nil {
			return "", err
		}
		if err := putRoles(tx, rec, sec); err != nil {
			return "", err
		}
		disk := fmt.Sprintf("its data disk %s", dataDisk(rec, m).Path())
		if req.FreshDisk {
			disk = fmt.Sprintf("a new, empty data disk (its etcd member %s is removed; the old disk %s is kept)", memberOrUnknown(member), dataDisk(rec, m).Path())
		}
		return fmt.Sprintf("replace %s's VM %s by a new VM of image %s on %s, by %s; first it hands over, unless it cannot",
			node, m.VM, m.Swap.OldImage, disk, by), nil
	})
}

// freshDiskForRepair puts master m's running replacement on the
// fresh-disk path, if it has not reached its data disk yet.
func (s *Service) freshDiskForRepair(tx *store.Tx, rec *record, machines []machine, m *machine, by string) (string, error) {
	if m.Swap.FreshDisk {
		return "", refuse(Conflict, "freshDisk", "%s's replacement is on the fresh-disk path already (%s)", m.Name, m.Swap.Step)
	}
	if err := freshDiskQuorum(rec, machines, m.Name, "freshDisk"); err != nil {
		return "", err
	}
	if !m.takeFreshDisk(s.cfg.Now()) {
		return "", refuse(Conflict, "freshDisk", "%s's replacement is past its data disk (%s)", m.Name, m.Swap.Step)
	}
	if err := putMachine(tx, m); err != nil {
		return "", err
	}
	_, err := addEvent(tx, rec.Spec.Name, v1.Event{Time: s.cfg.Now().UTC(), Type: "Warning", Node: m.Name, Reason: "ReplaceFreshDisk", Message: fmt.Sprintf(
		"%s: fresh-disk path, chosen by %s: its new VM gets an empty data disk and joins etcd as a new member in place of %s; the old disk's file is kept",
		m.Name, by, memberOrUnknown(m.Swap.MemberID))})
	return fmt.Sprintf("%s's running replacement takes the fresh-disk path, by %s", m.Name, by), err
}

// memberOrUnknown names an etcd member that may be unknown.
func memberOrUnknown(member string) string {
	if member == "" {
		return "(unknown: its agent never reported one)"
	}
	return member
}

// failedNote is why a failed machine failed, for a refusal's message.
func failedNote(m *machine) string {
	if m.Failed {
		return ", failed: " + m.LastError
	}
	return ""
}

// replacementRuns refuses a change while one of the cluster's masters is
// being replaced by a replace-node.
func replacementRuns(tx *store.Tx, cluster string) error {
	machines, err := loadMachines(tx, cluster)
	if err != nil {
		return err
	}
	return replacing(cluster, machines)
}

// replacing refuses a change while one of machines is being replaced by
// a replace-node.
func replacing(cluster string, machines []machine) error {
	for _, m := range machines {
		if m.Swap != nil && m.Swap.Repair {
			return refuse(Conflict, "", "node %s of cluster %q is being replaced (%s); wait for it to finish", m.Name, cluster, m.Swap.Step)
		}
	}
	return nil
}

// restoreRuns refuses a change while an etcd restore runs.
func restoreRuns(rec *record) error {
	return refuse(Conflict, "", "cluster %q is restoring etcd (%s); wait for it to finish", rec.Spec.Name, rec.Restore.ID)
}

// repairHandOver waits for a replaced master's agent to step out of
// service, as an upgrade's does, but only while that can happen: a VM
// that is not powered on, an agent silent since the request, or the
// deadline passed, and the old VM is powered off without.
func (e *engine) repairHandOver(ctx context.Context, p *pass, m *machine) (stepResult, error) {
	s := m.Swap
	st, reported := e.status(m.Name)
	if reported && st.Phase == v1.PhaseLeft && st.ReportedAt.After(s.StartedAt) {
		return swapDone(m, swapHandedOver, "Upgrade", "handed over: %s", agentReport(st, reported)), nil
	}
	without := func(why string) stepResult {
		r := swapDone(m, swapHandedOver, "Upgrade", "not handed over: %s; the agent last reported: %s", why, agentReport(st, reported))
		r.typ = "Warning"
		return r
	}
	power, err := p.vc.VM(vmRef(s.OldVM)).PowerState(ctx)
	if err != nil {
		return stepResult{}, fmt.Errorf("power state of %s: %w", s.OldVM, err)
	}
	now := e.cfg.Now()
	silence := s.StartedAt.Add(min(silentAgent, e.cfg.LeaveTimeout))
	answered := reported && st.ReportedAt.After(s.StartedAt)
	switch {
	case power != types.VirtualMachinePowerStatePoweredOn:
		return without(fmt.Sprintf("its VM is %s", power)), nil
	case !answered && !now.Before(silence):
		return without(fmt.Sprintf("its agent has been silent since the request, %s ago", now.Sub(s.StartedAt).Round(time.Second))), nil
	case !now.Before(s.HandOverBy):
		return without(fmt.Sprintf("it did not hand over by %s", s.HandOverBy.UTC().Format(time.RFC3339))), nil
	}
	wait := s.HandOverBy
	if !answered {
		wait = silence
	}
	return stepResult{wait: min(wait.Sub(now), e.cfg.StatusPoll)}, nil
}

// endRepairs clears the replacements that were rolled back, and says
// which: their operation failed.
func (e *engine) endRepairs(machines []machine) (string, error) {
	var msg string
	for _, m := range machines {
		if m.Swap == nil || !m.Swap.Repair || m.Swap.Step != swapRolledBack {
			continue
		}
		err := e.cfg.Store.Update(func(tx *store.Tx) error {
			var cur machine
			if err := tx.Get(store.Machines, machineKey(m.Cluster, m.Name), &cur); err != nil {
				return err
			}
			if cur.Swap == nil || !cur.Swap.Repair || cur.Swap.Step != swapRolledBack {
				return nil
			}
			cur.Swap = nil
			return putMachine(tx, &cur)
		})
		if err != nil {
			return "", err
		}
		if msg == "" {
			msg = fmt.Sprintf("%s's replacement was rolled back to its old VM %s: %s", m.Name, m.Swap.OldVM, m.Swap.Why)
		}
	}
	return msg, nil
}
