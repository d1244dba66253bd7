package cluster

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/store"
	"github.com/harmonykaas/harmony/internal/randstr"
)

// newMachine names the next machine of a role.
func (rec *record) newMachine(role v1.NodeRole, now time.Time) machine {
	var name string
	if role == v1.RoleMaster {
		rec.MasterSeq++
		name = fmt.Sprintf("%s-m%d", rec.Spec.Name, rec.MasterSeq)
	} else {
		rec.WorkerSeq++
		name = fmt.Sprintf("%s-w%d", rec.Spec.Name, rec.WorkerSeq)
	}
	return machine{Cluster: rec.Spec.Name, Name: name, Role: role, CreatedAt: now,
		Image: rec.Spec.Image, Template: rec.Template, Snapshot: rec.Snapshot, KubernetesVersion: rec.Spec.KubernetesVersion}
}

// addMachines stores new machines with their node records and gives
// every machine of the cluster its new role.
func addMachines(tx *store.Tx, rec *record, sec *secrets, add []machine, now time.Time) error {
	for i := range add {
		m := &add[i]
		if err := putMachine(tx, m); err != nil {
			return err
		}
		uid, err := randstr.Hex(16)
		if err != nil {
			return err
		}
		if err := tx.CreateNode(store.Node{Name: m.Name, UID: uid, Cluster: rec.Spec.Name, Role: m.Role,
			IPs: []string{m.IP}, DNSNames: []string{m.Name}, CreatedAt: now}); err != nil {
			return err
		}
	}
	return putRoles(tx, rec, sec)
}

// putRoles recomputes and stores the roles of the cluster's remaining
// machines, and of the removed ones still leaving it (roles).
func putRoles(tx *store.Tx, rec *record, sec *secrets) error {
	machines, err := loadMachines(tx, rec.Spec.Name)
	if err != nil {
		return err
	}
	rs := roles(rec, sec, machines, agentSupportOf(tx, machines))
	if len(rs) == 0 {
		return nil
	}
	// The store wakes the nodes' watches once this transaction commits.
	_, err = tx.PutRoles(rs)
	return err
}

// agentSupport is what the nodes' agents reported they act on, for the
// role fields an older agent would refuse (roles decode strictly).
type agentSupport struct {
	// vrrp3 puts the masters on VRRPv3 (every master's agent runs it).
	vrrp3 bool
	// etcdSnapshots names the nodes whose agent takes etcd.snapshots,
	// etcdRestore those whose agent acts on etcd.restore, and
	// etcdRestoreFromController on its fromController.
	etcdSnapshots, etcdRestore, etcdRestoreFromController map[string]bool
	// etcdRestored is the newest etcd restore each node's agent reported
	// done.
	etcdRestored map[string]string
	// etcdRemoveMembers names the nodes whose agent acts on
	// etcd.removeMembers.
	etcdRemoveMembers map[string]bool
}

func agentSupportOf(tx *store.Tx, machines []machine) agentSupport {
	a := agentSupport{vrrp3: mastersRunVRRPv3(tx, machines),
		etcdSnapshots: map[string]bool{}, etcdRestore: map[string]bool{}, etcdRestoreFromController: map[string]bool{}, etcdRestored: map[string]string{},
		etcdRemoveMembers: map[string]bool{}}
	for _, m := range machines {
		st, ok := tx.Status(m.Name)
		if !ok {
			continue
		}
		a.etcdSnapshots[m.Name] = slices.Contains(st.Capabilities, v1.CapabilityEtcdSnapshots)
		a.etcdRestore[m.Name] = slices.Contains(st.Capabilities, v1.CapabilityEtcdRestore)
		a.etcdRestoreFromController[m.Name] = slices.Contains(st.Capabilities, v1.CapabilityEtcdRestoreFromController)
		a.etcdRestored[m.Name] = st.EtcdRestored
		a.etcdRemoveMembers[m.Name] = slices.Contains(st.Capabilities, v1.CapabilityEtcdRemoveMembers)
	}
	return a
}

// clusterState reads a cluster, its machines and their agents' last
// reports in one view, for a request's checks.
func (s *Service) clusterState(name string) (*record, []machine, map[string]v1.Status, error) {
	var rec *record
	var machines []machine
	var statuses map[string]v1.Status
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		var err error
		if rec, err = s.load(tx, name); err != nil {
			return err
		}
		if machines, err = loadMachines(tx, name); err != nil {
			return err
		}
		statuses = statusesOf(tx, machines)
		return nil
	})
	return rec, machines, statuses, err
}

// statusesOf is the machines' agents' last reports, by node; a machine
// whose agent never reported has none.
func statusesOf(tx *store.Tx, machines []machine) map[string]v1.Status {
	out := map[string]v1.Status{}
	for _, m := range machines {
		if st, ok := tx.Status(m.Name); ok {
			out[m.Name] = st
		}
	}
	return out
}

// reports tells whether node's agent said it acts on capability.
func reports(tx *store.Tx, node, capability string) bool {
	st, ok := tx.Status(node)
	return ok && slices.Contains(st.Capabilities, capability)
}

// mastersRunVRRPv3 reports whether every master that runs keepalived
// (one that stays, or one still leaving) has said through its agent that
// it runs VRRPv3. A v2 and a v3 keepalived do not hear each other and
// would both hold the VIP, so one master without it (an older image, or
// a new VM that has not reported yet) keeps them all on v2.
func mastersRunVRRPv3(tx *store.Tx, machines []machine) bool {
	n := 0
	for _, m := range machines {
		if m.Role != v1.RoleMaster || m.Remove && !m.leaving() {
			continue
		}
		if !reports(tx, m.Name, v1.CapabilityVRRPv3) {
			return false
		}
		n++
	}
	return n > 0
}

// markRemoved starts a machine's removal from a clean slate. leaveBy is
// the deadline of its leaving the cluster (zero: the cluster goes, there is
// nothing to leave); the caller stores the roles again (putRoles), which
// gives the node its role with Leave. A deadline already set stays: a
// second removal does not extend it.
func markRemoved(tx *store.Tx, cluster, node string, keepVM bool, leaveBy time.Time) error {
	var m machine
	if err := tx.Get(store.Machines, machineKey(cluster, node), &m); err != nil {
		return err
	}
	if leaveBy.IsZero() || m.LeaveBy.IsZero() {
		m.LeaveBy = leaveBy
	}
	m.Remove, m.KeepVM = true, keepVM
	m.Failed, m.Attempts, m.NextTry, m.LastError = false, 0, time.Time{}, ""
	return putMachine(tx, &m)
}

// cmpCreated orders machines by creation, then by name with its index
// ("-w10" after "-w9").
func cmpCreated(a, b machine) int {
	return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(len(a.Name), len(b.Name)), strings.Compare(a.Name, b.Name))
}

func checkVIP(p *v1.Provider, vip string) error {
	if p.IPPool == nil {
		return refuse(Invalid, "provider", "provider %q has no ipPool; clusters need static addresses for the VIP and the masters", p.Name)
	}
	addrs, err := p.IPPool.Addresses()
	if err != nil {
		return refuse(Invalid, "provider", "provider %q: %v", p.Name, err)
	}
	a, _ := netip.ParseAddr(vip)
	if !slices.Contains(addrs, a) {
		return refuse(Invalid, "vip", "%s is not inside the ipPool of provider %q (%v)", vip, p.Name, p.IPPool.Ranges)
	}
	return nil
}

func allocateVIP(tx *store.Tx, p *v1.Provider, cluster, vip string) error {
	var owner addressOwner
	if err := tx.Get(store.Addresses, addressKey(p.Name, vip), &owner); err == nil {
		holder := "the VIP of cluster " + owner.Cluster
		if owner.Node != "" {
			holder = "node " + owner.Node + " of cluster " + owner.Cluster
		}
		return refuse(Conflict, "vip", "%s is already held by %s; pick a free address of the pool", vip, holder)
	}
	return tx.Put(store.Addresses, addressKey(p.Name, vip), addressOwner{Cluster: cluster})
}

// allocateIPs gives each machine the lowest free address of the pool.
func allocateIPs(tx *store.Tx, p *v1.Provider, machines []machine) error {
	addrs, err := p.IPPool.Addresses()
	if err != nil {
		return err
	}
	next := 0
	for i := range machines {
		for ; next < len(addrs) && tx.Has(store.Addresses, addressKey(p.Name, addrs[next].String())); next++ {
		}
		if next == len(addrs) {
			return refuse(PrecheckFailed, "ipPool", "provider %q's ipPool has too few free addresses: %d more nodes need one", p.Name, len(machines)-i)
		}
		machines[i].IP = addrs[next].String()
		if err := tx.Put(store.Addresses, addressKey(p.Name, machines[i].IP), addressOwner{Cluster: machines[i].Cluster, Node: machines[i].Name}); err != nil {
			return err
		}
		next++
	}
	return nil
}

// freeVRID picks the lowest VRRP router ID no other cluster of the
// provider (its network) uses.
func freeVRID(tx *store.Tx, provider string) (int, error) {
	clusters, err := store.ListJSON[record](tx, store.Clusters, "")
	if err != nil {
		return 0, err
	}
	used := map[int]bool{}
	for _, cl := range clusters {
		if cl.Spec.Provider == provider {
			used[cl.VRID] = true
		}
	}
	for id := 1; id <= 255; id++ {
		if !used[id] {
			return id, nil
		}
	}
	return 0, refuse(PrecheckFailed, "provider", "provider %q already has 255 clusters, every VRRP router ID is taken", provider)
}
