package contiv

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/agent/components/cni/plugin"
	"github.com/harmonykaas/harmony/agent/pki"
	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/agent/service"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// testPKI is what the controller puts in a master's role.
func testPKI(t *testing.T) *v1.ClusterPKI {
	t.Helper()
	cluster, err := pki.NewCA("cluster-ca", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	etcd, err := pki.NewCA("etcd-ca", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &v1.ClusterPKI{ClusterCA: cluster, EtcdCA: etcd}
}

// testRole is a validated role of node name in a cluster of three masters
// (ranked m1, m2, m3, listed out of order on purpose) and two workers.
func testRole(t *testing.T, name string, p *v1.ClusterPKI) *v1.Role {
	t.Helper()
	r := &v1.Role{
		APIVersion: v1.APIVersion, Kind: "Role", NodeName: name, Revision: 1, Role: v1.RoleWorker,
		Cluster: v1.ClusterSettings{
			Name: "demo", VIP: "198.18.0.10", VRID: 51,
			PodCIDR: "198.19.0.0/17", ServiceCIDR: "198.19.128.0/20",
			CNI: v1.CNISettings{Type: "contiv", Contiv: &v1.ContivSettings{Mode: "vxlan", VNI: 5001}},
		},
		Peers: []v1.Peer{
			{Name: "w1", Role: v1.RoleWorker, Address: "198.18.0.21"},
			{Name: "m3", Role: v1.RoleMaster, Address: "198.18.0.13", Rank: 2},
			{Name: "m1", Role: v1.RoleMaster, Address: "198.18.0.11", Rank: 0},
			{Name: "m2", Role: v1.RoleMaster, Address: "198.18.0.12", Rank: 1},
			{Name: "w2", Role: v1.RoleWorker, Address: "198.18.0.22"},
		},
	}
	for _, peer := range r.Peers {
		if peer.Name == name {
			r.Role = peer.Role
			r.Addresses.IPs = []string{peer.Address}
		}
	}
	if r.Role == v1.RoleWorker && p != nil {
		// Workers get the cluster CA's certificate alone.
		p = &v1.ClusterPKI{ClusterCA: &v1.KeyPair{Certificate: p.ClusterCA.Certificate}}
	}
	r.PKI = p
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	return r
}

func testHost(root string) *reconcile.Host {
	return &reconcile.Host{Root: root, Facts: reconcile.Facts{Interface: "eth0", Addresses: []netip.Addr{netip.MustParseAddr("198.18.0.99")}}}
}

func file(t *testing.T, plan *plugin.Plan, path string) plugin.File {
	t.Helper()
	for _, f := range plan.Files {
		if f.Path == path {
			return f
		}
	}
	t.Fatalf("the plan has no %s", path)
	return plugin.File{}
}

func unit(t *testing.T, plan *plugin.Plan, name string) service.Unit {
	t.Helper()
	i := slices.IndexFunc(plan.Units, func(u service.Unit) bool { return u.Name == name })
	if i < 0 {
		t.Fatalf("the plan has no unit %s", name)
	}
	return plan.Units[i]
}

// flag returns the value after name in argv.
func flag(t *testing.T, argv []string, name string) string {
	t.Helper()
	i := slices.Index(argv, name)
	if i < 0 || i+1 >= len(argv) {
		t.Fatalf("argv has no %s: %q", name, argv)
	}
	return argv[i+1]
}
