package cluster

import (
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/ca"
	"github.com/harmonykaas/harmony/controller/store"
	"github.com/harmonykaas/harmony/internal/randstr"
)

const clusterCALifetime = 10 * 365 * 24 * time.Hour

// newSecrets makes a cluster's CAs (cluster, etcd, front-proxy), its
// service account key, a kubeadm bootstrap token and a VRRP password. The
// controller keeps them; masters get them in their roles.
func newSecrets(now time.Time) (*secrets, error) {
	var s secrets
	for _, c := range []struct {
		name string
		dst  **v1.KeyPair
	}{{"kubernetes", &s.PKI.ClusterCA}, {"etcd-ca", &s.PKI.EtcdCA}, {"front-proxy-ca", &s.PKI.FrontProxyCA}} {
		kp, err := ca.NewKeyPair(c.name, clusterCALifetime, now)
		if err != nil {
			return nil, fmt.Errorf("cluster CA %s: %w", c.name, err)
		}
		*c.dst = kp
	}
	var err error
	if s.PKI.ServiceAccountKey, err = ca.NewKey(); err != nil {
		return nil, fmt.Errorf("service account key: %w", err)
	}
	id, err := randstr.Lower(6)
	if err != nil {
		return nil, err
	}
	secret, err := randstr.Lower(16)
	if err != nil {
		return nil, err
	}
	s.BootstrapToken = id + "." + secret
	if s.VRRPPassword, err = randstr.Lower(8); err != nil {
		return nil, err
	}
	return &s, nil
}

// roles builds the role of every machine that stays in the cluster: the
// same settings and peers for all, masters ranked by name, the CAs with
// their keys for masters and the cluster CA's certificate alone for
// workers. A removed machine that has yet to leave (leaving) gets its
// role once more with Leave set: the same settings, and as peers the
// remaining nodes plus itself, so that it reaches the members it leaves
// while the others no longer count it.
//
// agents says which role fields the nodes' agents act on. The roles are
// validated as the store writes them (store.Tx.PutRoles), those that
// changed only: every step that changes one node's role recomputes all.
func roles(c *record, sec *secrets, machines []machine, agents agentSupport) []v1.Role {
	var live, leavers []machine
	for _, m := range machines {
		switch {
		case !m.Remove:
			live = append(live, m)
		case m.leaving():
			leavers = append(leavers, m)
		}
	}
	byRoleAndName := func(a, b machine) int {
		if a.Role != b.Role {
			return strings.Compare(string(a.Role), string(b.Role))
		}
		return strings.Compare(a.Name, b.Name)
	}
	slices.SortFunc(live, byRoleAndName)
	slices.SortFunc(leavers, byRoleAndName)
	s := c.Spec
	settings := v1.ClusterSettings{
		Name: s.Name, KubernetesVersion: s.KubernetesVersion, VIP: s.VIP, VRID: c.VRID,
		PodCIDR: s.PodCIDR, ServiceCIDR: s.ServiceCIDR, DNSDomain: s.DNSDomain,
		CNI:           s.CNI(),
		KubeProxyMode: s.KubeProxyMode(),
		LoadBalancer:  v1.LoadBalancerSettings{VRRPPassword: sec.VRRPPassword},
	}
	var peers []v1.Peer
	rank := 0
	for _, m := range live {
		p := v1.Peer{Name: m.Name, Role: m.Role, Address: m.IP}
		if m.Role == v1.RoleMaster {
			p.Rank = rank
			rank++
		}
		peers = append(peers, p)
	}
	workerPKI := &v1.ClusterPKI{ClusterCA: &v1.KeyPair{Certificate: sec.PKI.ClusterCA.Certificate}}
	out := make([]v1.Role, 0, len(live)+len(leavers))
	for _, m := range append(live, leavers...) {
		r := v1.Role{
			APIVersion: v1.APIVersion, Kind: "Role", NodeName: m.Name, Role: m.Role,
			Cluster:   settings,
			Addresses: v1.NodeAddresses{IPs: []string{m.IP}, DNSNames: []string{m.Name}},
			Peers:     peers,
			Versions:  v1.ComponentVersions{Kubernetes: m.kubernetesVersion(c)},
			Kubeadm:   &v1.KubeadmSettings{BootstrapToken: sec.BootstrapToken},
			PKI:       workerPKI,
		}
		// In an upgrade to another Kubernetes version, each node runs its
		// own until it is replaced.
		r.Cluster.KubernetesVersion = m.kubernetesVersion(c)
		if m.UUID != "" {
			r.ProviderID = v1.VSphereProviderID(m.UUID)
		}
		// Until the old VM is off: an agent told it serves again would
		// start its etcd member and control plane for the moment before
		// its power-off, or for good if that power-off waits on vCenter.
		if m.Swap != nil && (m.Swap.Step == swapHandOver || m.Swap.Step == swapHandedOver) && !m.Swap.Rollback {
			r.Leave = &v1.LeaveSettings{Deadline: m.Swap.HandOverBy, HandOver: true}
		}
		if m.Role == v1.RoleMaster {
			pki := sec.PKI
			r.PKI = &pki
			r.Etcd = &v1.EtcdSettings{DataDir: "/var/lib/etcd", DataDisk: true}
			r.Etcd.Snapshots, r.Etcd.SnapshotSince = snapshotSettings(c, agents.etcdSnapshots[m.Name])
			r.Etcd.Restore = restoreSettings(c, m.Name, agents)
			r.Etcd.RemoveMembers = removeMembers(c, agents.etcdRemoveMembers[m.Name])
			if agents.vrrp3 {
				r.Cluster.LoadBalancer.VRRPVersion = 3
				r.Cluster.LoadBalancer.AdvertInterval = v1.DefaultVRRPv3AdvertInterval.String()
			}
		}
		if m.Remove {
			// Ranked after the remaining masters: it holds no rank they
			// use.
			self := v1.Peer{Name: m.Name, Role: m.Role, Address: m.IP}
			if m.Role == v1.RoleMaster {
				self.Rank = rank
			}
			r.Peers = append(slices.Clip(peers), self)
			// A worker an upgrade replaces keeps its pods rather than
			// leave without them.
			r.Leave = &v1.LeaveSettings{Deadline: m.LeaveBy, KeepPods: m.ReplacedBy != ""}
		}
		out = append(out, r)
	}
	return out
}

// snapshotSettings is what a master's role says of etcd snapshots: the
// spec's settings and, while an upgrade runs, the snapshot it asks for
// (checkSnapshots), or one asked for by hand (snapshotRequest.since),
// the later if both run; nothing for an agent that does not take them.
// A request already answered never stands for a running upgrade's: an
// agent takes one snapshot per since it is given, and the one it took
// for the request may be gone (or taken before a restore) by the time the
// upgrade asks, which would then wait for good.
func snapshotSettings(c *record, takes bool) (*v1.EtcdSnapshots, time.Time) {
	if !takes {
		return nil, time.Time{}
	}
	return c.Spec.EtcdSnapshots, snapshotSince(c)
}

func snapshotSince(c *record) time.Time {
	r := c.EtcdSnapshot
	switch {
	case c.Upgrade.running() && r.running():
		return later(c.Upgrade.StartedAt, r.since())
	case c.Upgrade.running():
		return c.Upgrade.StartedAt
	case r.asks():
		return r.since()
	}
	return time.Time{}
}

// removeMembers is what a master's role says of etcd members to remove:
// those of masters lost (record.LostEtcdMembers), for an agent that acts
// on them.
func removeMembers(c *record, acts bool) []string {
	if !acts || len(c.LostEtcdMembers) == 0 {
		return nil
	}
	return slices.Clone(c.LostEtcdMembers)
}

// StatusReported gives a cluster's nodes their roles again when a
// master's report changes what the roles say (a restore's source that
// reports its part done asks the others to join it): the masters move to VRRPv3
// once the last of them reports it runs it, and back to v2 should one
// that does not join (a new VM of an older image); a master gets the
// spec's etcd snapshot settings once its agent reports it takes them,
// and the lost members to remove once it reports it removes them.
// Any other report changes nothing here, and costs a read.
func (s *Service) StatusReported(node string) error {
	stale := func(tx *store.Tx) (*record, bool, error) {
		n, err := tx.Node(node)
		if err != nil || n.Cluster == "" || n.Role != v1.RoleMaster {
			return nil, false, nil
		}
		role, ok := tx.Role(node)
		if !ok {
			return nil, false, nil
		}
		rec, err := loadCluster(tx, n.Cluster)
		if err != nil || rec.Deleting {
			return nil, false, nil
		}
		machines, err := loadMachines(tx, n.Cluster)
		if err != nil {
			return nil, false, err
		}
		vrrp := (role.Cluster.LoadBalancer.VRRPVersion == 3) != mastersRunVRRPv3(tx, machines)
		etcd := false
		if role.Etcd != nil {
			want, since := snapshotSettings(rec, reports(tx, node, v1.CapabilityEtcdSnapshots))
			has := role.Etcd.Snapshots
			etcd = (has == nil) != (want == nil) || has != nil && *has != *want || !role.Etcd.SnapshotSince.Equal(since) ||
				!slices.Equal(role.Etcd.RemoveMembers, removeMembers(rec, reports(tx, node, v1.CapabilityEtcdRemoveMembers)))
		}
		return rec, vrrp || etcd || restoreRolesStale(tx, rec, machines), nil
	}
	var change bool
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		var err error
		_, change, err = stale(tx)
		return err
	})
	if err != nil || !change {
		return err
	}
	return s.cfg.Store.Update(func(tx *store.Tx) error {
		rec, change, err := stale(tx)
		if err != nil || !change {
			return err
		}
		sec, err := loadSecrets(tx, rec.Spec.Name)
		if err != nil {
			return err
		}
		if err := putRoles(tx, rec, sec); err != nil {
			return err
		}
		s.log.Info("roles given again: what the masters' agents act on changed", "cluster", rec.Spec.Name, "after", node)
		return nil
	})
}
