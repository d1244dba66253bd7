package flannel

import (
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/harmonykaas/harmony/agent/components/cni/plugin"
	"github.com/harmonykaas/harmony/agent/reconcile"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

func testRole(t *testing.T, name string) *v1.Role {
	t.Helper()
	r := &v1.Role{
		APIVersion: v1.APIVersion, Kind: "Role", NodeName: name, Revision: 1, Role: v1.RoleWorker,
		Cluster: v1.ClusterSettings{
			Name: "demo", VIP: "198.18.0.10", VRID: 51,
			PodCIDR: "198.19.0.0/17", ServiceCIDR: "198.19.128.0/20",
			CNI: v1.CNISettings{Type: "flannel", Flannel: &v1.FlannelSettings{VNI: 7, Port: 4789}},
		},
		Peers: []v1.Peer{
			{Name: "m1", Role: v1.RoleMaster, Address: "198.18.0.11"},
			{Name: "w1", Role: v1.RoleWorker, Address: "198.18.0.21"},
		},
	}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	return r
}

func testHost(t *testing.T) *reconcile.Host {
	return &reconcile.Host{Root: t.TempDir(), Facts: reconcile.Facts{Interface: "eth0", Addresses: []netip.Addr{netip.MustParseAddr("198.18.0.99")}}}
}

func put(t *testing.T, host *reconcile.Host, path, data string) {
	t.Helper()
	p := host.Path(path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// checkFile runs a planned file's validator on its own data, as the
// component does before it replaces the live file.
func checkFile(t *testing.T, f plugin.File) {
	t.Helper()
	p := filepath.Join(t.TempDir(), filepath.Base(f.Path))
	if err := os.WriteFile(p, f.Data, f.Mode); err != nil {
		t.Fatal(err)
	}
	if err := f.Validate(p); err != nil {
		t.Fatalf("%s refused by its own validator: %v\n%s", f.Path, err, f.Data)
	}
}

// A node goes through three stages: no credential (flanneld cannot run
// as the node), a credential but no lease (flanneld runs, nothing for
// the runtime yet), a lease (the bridge configuration over it).
func TestPlanFollowsCredentialAndLease(t *testing.T) {
	p := New(Config{})
	host := testHost(t)
	role := testRole(t, "w1")

	plan, err := p.Plan(host, role)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Units) != 0 || len(plan.Waiting) != 2 || !strings.Contains(plan.Waiting[0], KubeletKubeconfig) {
		t.Fatalf("without a credential: units %v, waiting %q", plan.Units, plan.Waiting)
	}
	if len(plan.Files) != 1 || plan.Files[0].Path != NetConfPath {
		t.Fatalf("files %v", plan.AllFiles())
	}
	checkFile(t, plan.Files[0])
	var nc NetConf
	if err := json.Unmarshal(plan.Files[0].Data, &nc); err != nil {
		t.Fatal(err)
	}
	if nc != (NetConf{Network: "198.19.0.0/17", Backend: Backend{Type: "vxlan", VNI: 7, Port: 4789}}) {
		t.Errorf("net-conf %+v", nc)
	}
	for _, b := range []string{"/usr/local/bin/flanneld", "/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/portmap", "/usr/lib/cni/loopback"} {
		if !slices.Contains(plan.Binaries, b) {
			t.Errorf("binaries %q lack %s", plan.Binaries, b)
		}
	}

	put(t, host, KubeletKubeconfig, "apiVersion: v1\n")
	plan, err = p.Plan(host, role)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Units) != 1 || len(plan.Waiting) != 1 || !strings.Contains(plan.Waiting[0], SubnetFile) {
		t.Fatalf("with a credential: units %v, waiting %q", plan.Units, plan.Waiting)
	}
	u := plan.Units[0]
	if u.Name != Unit || !slices.Equal(u.Env, []string{"NODE_NAME=w1"}) {
		t.Errorf("unit %+v", u)
	}
	for _, f := range []string{"--kube-subnet-mgr", "--ip-masq", "--iface=198.18.0.21", "--public-ip=198.18.0.21",
		"--kubeconfig-file=" + host.Path(KubeletKubeconfig), "--subnet-file=" + host.Path(SubnetFile), "--net-config-path=" + host.Path(NetConfPath)} {
		if !slices.Contains(u.Command, f) {
			t.Errorf("argv %q lacks %s", u.Command, f)
		}
	}

	put(t, host, SubnetFile, "FLANNEL_NETWORK=198.19.0.0/17\nFLANNEL_SUBNET=198.19.3.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n")
	plan, err = p.Plan(host, role)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Waiting) != 0 || len(plan.Files) != 2 || plan.Files[1].Path != ConfListPath {
		t.Fatalf("with a lease: waiting %q, files %v", plan.Waiting, plan.AllFiles())
	}
	checkFile(t, plan.Files[1])
	var list struct {
		Plugins []struct {
			Type string `json:"type"`
			MTU  int    `json:"mtu"`
			IPAM struct {
				Ranges [][]struct {
					Subnet string `json:"subnet"`
				} `json:"ranges"`
				Routes []struct {
					Dst string `json:"dst"`
				} `json:"routes"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(plan.Files[1].Data, &list); err != nil {
		t.Fatal(err)
	}
	bridge := list.Plugins[0]
	if bridge.MTU != 1450 || bridge.IPAM.Ranges[0][0].Subnet != "198.19.3.0/24" || bridge.IPAM.Routes[0].Dst != "198.19.0.0/17" {
		t.Errorf("bridge %+v", bridge)
	}
}

// A lease from another pod network (a node of a cluster re-created with
// another pod CIDR) is not used: the runtime would hand out addresses no
// route leads to.
func TestStaleLeaseIsNotUsed(t *testing.T) {
	p := New(Config{})
	host := testHost(t)
	put(t, host, KubeletKubeconfig, "apiVersion: v1\n")
	put(t, host, SubnetFile, "FLANNEL_SUBNET=10.244.3.1/24\nFLANNEL_MTU=1450\n")
	plan, err := p.Plan(host, testRole(t, "w1"))
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Files) != 1 || len(plan.Waiting) != 1 || !strings.Contains(plan.Waiting[0], "stale") {
		t.Fatalf("files %v, waiting %q", plan.AllFiles(), plan.Waiting)
	}
}

func TestReadLeaseRefuses(t *testing.T) {
	for name, data := range map[string]string{
		"no subnet":     "FLANNEL_MTU=1450\n",
		"IPv6 subnet":   "FLANNEL_SUBNET=fd00::1/64\nFLANNEL_MTU=1450\n",
		"no room":       "FLANNEL_SUBNET=198.19.3.1/31\nFLANNEL_MTU=1450\n",
		"no MTU":        "FLANNEL_SUBNET=198.19.3.1/24\n",
		"tiny MTU":      "FLANNEL_SUBNET=198.19.3.1/24\nFLANNEL_MTU=68\n",
		"MTU not a num": "FLANNEL_SUBNET=198.19.3.1/24\nFLANNEL_MTU=big\n",
	} {
		p := filepath.Join(t.TempDir(), "subnet.env")
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := readLease(p); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestPlanRefuses(t *testing.T) {
	cases := []struct {
		name  string
		mut   func(*v1.Role)
		field string
	}{
		{"no node name", func(r *v1.Role) { r.NodeName = "" }, "nodeName"},
		{"no pod CIDR", func(r *v1.Role) { r.Cluster.PodCIDR = "" }, "cluster.podCIDR"},
		{"pod CIDR of one node", func(r *v1.Role) { r.Cluster.PodCIDR = "198.19.0.0/24" }, "cluster.podCIDR"},
		{"IPv6 pod CIDR", func(r *v1.Role) { r.Cluster.PodCIDR = "fd00::/48" }, "cluster.podCIDR"},
		{"pod CIDR holds the node", func(r *v1.Role) { r.Cluster.PodCIDR = "198.18.0.0/16" }, "cluster.podCIDR"},
		{"VNI too large", func(r *v1.Role) { r.Cluster.CNI.Flannel.VNI = 1 << 24 }, "cluster.cni.flannel.vni"},
		{"port too large", func(r *v1.Role) { r.Cluster.CNI.Flannel.Port = 1 << 16 }, "cluster.cni.flannel.port"},
		{"IPv6 endpoint", func(r *v1.Role) { r.Peers[1].Address = "fd00::21" }, "peers[1].address"},
	}
	for _, tc := range cases {
		role := testRole(t, "w1")
		tc.mut(role)
		_, err := New(Config{}).Plan(testHost(t), role)
		var fe *v1.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: got %v, want field %s", tc.name, err, tc.field)
		}
	}
}

// Without its entry among the peers, the node's endpoint is its role's
// address, else the host's primary one; defaults fill a role without
// flannel settings.
func TestEndpointAndDefaults(t *testing.T) {
	role := testRole(t, "w1")
	role.Peers = role.Peers[:1]
	role.Cluster.CNI.Flannel = nil
	host := testHost(t)
	put(t, host, KubeletKubeconfig, "apiVersion: v1\n")
	plan, err := New(Config{}).Plan(host, role)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(plan.Units[0].Command, "--iface=198.18.0.99") {
		t.Errorf("argv %q: the host's address is not the endpoint", plan.Units[0].Command)
	}
	role.Addresses.IPs = []string{"198.18.0.50"}
	if plan, err = New(Config{}).Plan(host, role); err != nil || !slices.Contains(plan.Units[0].Command, "--iface=198.18.0.50") {
		t.Errorf("argv %q (%v): the role's address is not the endpoint", plan.Units[0].Command, err)
	}
	var nc NetConf
	if err := json.Unmarshal(plan.Files[0].Data, &nc); err != nil || nc.Backend.VNI != 1 || nc.Backend.Port != 8472 {
		t.Errorf("defaults: %+v %v", nc, err)
	}
}

func TestValidateNetConfRefuses(t *testing.T) {
	for name, data := range map[string]string{
		"unknown field": `{"Network":"198.19.0.0/17","Backend":{"Type":"vxlan","VNI":1,"Port":8472},"SubnetLen":25}`,
		"host bits":     `{"Network":"198.19.0.1/17","Backend":{"Type":"vxlan","VNI":1,"Port":8472}}`,
		"backend":       `{"Network":"198.19.0.0/17","Backend":{"Type":"host-gw","VNI":1,"Port":8472}}`,
		"VNI":           `{"Network":"198.19.0.0/17","Backend":{"Type":"vxlan","VNI":0,"Port":8472}}`,
		"port":          `{"Network":"198.19.0.0/17","Backend":{"Type":"vxlan","VNI":1,"Port":70000}}`,
	} {
		p := filepath.Join(t.TempDir(), "net-conf.json")
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := validateNetConf(p); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
