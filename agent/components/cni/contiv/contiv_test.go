package contiv

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/harmonykaas/harmony/agent/service"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

func TestPlanMaster(t *testing.T) {
	p := New(Config{})
	root := "/srv/m1"
	plan, err := p.Plan(testHost(root), testRole(t, "m1", testPKI(t)))
	if err != nil {
		t.Fatal(err)
	}

	// The CNI list, parsed as the container runtime parses it.
	list, err := libcni.ConfListFromBytes(file(t, plan, ConfListPath).Data)
	if err != nil {
		t.Fatal(err)
	}
	if list.CNIVersion != "0.3.1" || list.Name != "contiv-net" || len(list.Plugins) != 1 || list.Plugins[0].Network.Type != "contivk8s" {
		t.Errorf("conflist: version %q name %q plugins %d", list.CNIVersion, list.Name, len(list.Plugins))
	}
	if ipam := list.Plugins[0].Network.IPAM.Type; ipam != "" {
		t.Errorf("conflist has IPAM %q; netplugin allocates pod addresses", ipam)
	}

	var k8s K8sConfig
	if err := json.Unmarshal(file(t, plan, K8sConfigPath).Data, &k8s); err != nil {
		t.Fatal(err)
	}
	want := K8sConfig{APIServer: "https://198.18.0.10:8443", CA: root + K8sCAPath, Cert: root + K8sCertPath,
		Key: root + K8sKeyPath, ServiceSubnet: "198.19.128.0/20"}
	if k8s != want {
		t.Errorf("contiv.json %+v, want %+v", k8s, want)
	}
	if f := file(t, plan, K8sConfigPath); !slices.Equal(f.Units, []string{NetpluginUnit, NetmasterUnit}) || f.Mode != 0o600 {
		t.Errorf("contiv.json units %q mode %o", f.Units, f.Mode)
	}

	// The pod network netmaster gets: the pod CIDR, its first address as
	// gateway, the VNI, inside the global VXLAN range.
	var spec NetworkSpec
	if err := json.Unmarshal(file(t, plan, NetworkPath).Data, &spec); err != nil {
		t.Fatal(err)
	}
	if n := spec.Network; n.Subnet != "198.19.0.0/17" || n.Gateway != "198.19.0.1" || n.PktTag != 5001 || n.Encap != "vxlan" ||
		n.Key != "default:default-net" {
		t.Errorf("network %+v", n)
	}
	if g := spec.Global; g.FwdMode != "routing" || g.Vxlans != "1-10000" || g.PvtSubnet != "172.19.0.0/16" {
		t.Errorf("global %+v", g)
	}
	if err := spec.validate(); err != nil {
		t.Errorf("rendered spec refused by its own checks: %v", err)
	}
	if plan.Apply == nil {
		t.Error("a master's plan does not apply the pod network")
	}

	if names := unitNames(plan.Units); !slices.Equal(names, []string{EtcdProxyUnit, NetmasterUnit, NetpluginUnit}) {
		t.Errorf("units %q", names)
	}
	proxy := unit(t, plan, EtcdProxyUnit).Command
	if proxy[0] != "/usr/bin/etcd" || flag(t, proxy, "--proxy") != "on" ||
		flag(t, proxy, "--listen-client-urls") != "http://127.0.0.1:6666" ||
		flag(t, proxy, "--initial-cluster") != "m1=https://198.18.0.11:2380,m2=https://198.18.0.12:2380,m3=https://198.18.0.13:2380" ||
		flag(t, proxy, "--cert-file") != root+EtcdCertPath || flag(t, proxy, "--peer-trusted-ca-file") != root+EtcdCAPath ||
		flag(t, proxy, "--data-dir") != root+EtcdProxyDir {
		t.Errorf("proxy argv %q", proxy)
	}
	master := unit(t, plan, NetmasterUnit).Command
	netplugin := unit(t, plan, NetpluginUnit).Command
	for _, argv := range [][]string{master, netplugin} {
		if flag(t, argv, "--mode") != "kubernetes" || flag(t, argv, "--netmode") != "vxlan" || flag(t, argv, "--fwdmode") != "routing" ||
			flag(t, argv, "--etcd-endpoints") != "http://127.0.0.1:6666" {
			t.Errorf("argv %q", argv)
		}
	}
	if master[0] != "/usr/bin/netmaster" || flag(t, master, "--listen-url") != "127.0.0.1:9999" || flag(t, master, "--control-url") != "198.18.0.11:9999" {
		t.Errorf("netmaster argv %q", master)
	}
	if netplugin[0] != "/usr/bin/netplugin" || flag(t, netplugin, "--vtep-ip") != "198.18.0.11" || flag(t, netplugin, "--ctrl-ip") != "198.18.0.11" ||
		flag(t, netplugin, "--host") != "m1" || flag(t, netplugin, "--vxlan-port") != "4789" {
		t.Errorf("netplugin argv %q", netplugin)
	}
	if !slices.Equal(plan.Binaries, []string{"/usr/bin/etcd", "/usr/bin/netplugin", "/opt/cni/bin/contivk8s", "/usr/bin/netmaster"}) {
		t.Errorf("binaries %q", plan.Binaries)
	}
	if len(plan.Missing) != 0 {
		t.Errorf("a master with the role's CAs misses %q", plan.Missing)
	}
	if len(plan.Certs) != 2 || plan.Certs[0].Leaf.CommonName != "contiv:m1" || plan.Certs[0].CA.Key == "" {
		t.Errorf("certs %+v", plan.Certs)
	}
}

func TestPlanWorker(t *testing.T) {
	plan, err := New(Config{}).Plan(testHost("/"), testRole(t, "w2", testPKI(t)))
	if err != nil {
		t.Fatal(err)
	}
	if names := unitNames(plan.Units); !slices.Equal(names, []string{EtcdProxyUnit, NetpluginUnit}) {
		t.Errorf("units %q", names)
	}
	netplugin := unit(t, plan, NetpluginUnit).Command
	if flag(t, netplugin, "--vtep-ip") != "198.18.0.22" || flag(t, netplugin, "--host") != "w2" {
		t.Errorf("netplugin argv %q", netplugin)
	}
	if slices.Contains(plan.Binaries, "/usr/bin/netmaster") {
		t.Error("a worker needs netmaster")
	}
	if plan.Apply != nil || slices.Contains(plan.AllFiles(), NetworkPath) {
		t.Error("a worker applies the pod network")
	}
	if _, err := libcni.ConfListFromBytes(file(t, plan, ConfListPath).Data); err != nil {
		t.Error(err)
	}
	if f := file(t, plan, K8sConfigPath); !slices.Equal(f.Units, []string{NetpluginUnit}) {
		t.Errorf("contiv.json units %q", f.Units)
	}
	// The role carries the cluster CA without its key and no etcd CA: the
	// client certificate cannot be issued here, the store is unreachable.
	if len(plan.Certs) != 1 || plan.Certs[0].CA.Key != "" {
		t.Errorf("certs %+v", plan.Certs)
	}
	if len(plan.Missing) != 1 || !strings.Contains(plan.Missing[0], "pki.etcdCA") {
		t.Errorf("missing %q", plan.Missing)
	}
}

func TestPlanDefaults(t *testing.T) {
	role := testRole(t, "m2", testPKI(t))
	role.Cluster.CNI = v1.CNISettings{}
	role.Cluster.ServiceCIDR = ""
	role.Cluster.VIP = ""
	plan, err := New(Config{}).Plan(testHost("/"), role)
	if err != nil {
		t.Fatal(err)
	}
	var spec NetworkSpec
	if err := json.Unmarshal(file(t, plan, NetworkPath).Data, &spec); err != nil {
		t.Fatal(err)
	}
	if spec.Network.PktTag != DefaultVNI {
		t.Errorf("VNI %d, want the default %d", spec.Network.PktTag, DefaultVNI)
	}
	var k8s K8sConfig
	if err := json.Unmarshal(file(t, plan, K8sConfigPath).Data, &k8s); err != nil {
		t.Fatal(err)
	}
	// Without a VIP, the first master by rank; kubeadm's service network.
	if k8s.APIServer != "https://198.18.0.11:6443" || k8s.ServiceSubnet != "10.96.0.0/12" {
		t.Errorf("contiv.json %+v", k8s)
	}

	// A VNI above netmaster's default range gets a range of the same
	// width that holds it, within Contiv's limits.
	for vni, want := range map[int]string{10000: "1-10000", 10001: "10001-20000", 20000: "10001-20000", 65535: "60001-65535"} {
		role.Cluster.CNI.Contiv = &v1.ContivSettings{VNI: vni}
		plan, err = New(Config{}).Plan(testHost("/"), role)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(file(t, plan, NetworkPath).Data, &spec); err != nil {
			t.Fatal(err)
		}
		if spec.Global.Vxlans != want || spec.Network.PktTag != vni || spec.validate() != nil {
			t.Errorf("VNI %d: global %+v network %+v (%v)", vni, spec.Global, spec.Network, spec.validate())
		}
	}
}

// A node the role does not list among its peers uses its primary address.
func TestPlanVTEPFromFacts(t *testing.T) {
	role := testRole(t, "m1", testPKI(t))
	role.NodeName = "extra"
	plan, err := New(Config{}).Plan(testHost("/"), role)
	if err != nil {
		t.Fatal(err)
	}
	if vtep := flag(t, unit(t, plan, NetpluginUnit).Command, "--vtep-ip"); vtep != "198.18.0.99" {
		t.Errorf("VTEP %s, want the host's primary address", vtep)
	}
	host := testHost("/")
	host.Facts.Addresses = []netip.Addr{netip.MustParseAddr("2001:db8::1")}
	if _, err := New(Config{}).Plan(host, role); err == nil || !strings.Contains(err.Error(), "peers:") {
		t.Errorf("an IPv6 primary address as VTEP: %v", err)
	}
}

// Roles that passed api/v1 validation (or were injected past it) but that
// Contiv cannot serve: each error names the field.
func TestPlanRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(r *v1.Role)
		field  string
	}{
		{"no pod CIDR", func(r *v1.Role) { r.Cluster.PodCIDR = "" }, "cluster.podCIDR: required"},
		{"pod CIDR not a network", func(r *v1.Role) { r.Cluster.PodCIDR = "198.19.0.1/16" }, "cluster.podCIDR:"},
		{"IPv6 pods", func(r *v1.Role) { r.Cluster.PodCIDR = "fd00:10::/64" }, "cluster.podCIDR: fd00:10::/64: Contiv 1.2 allocates IPv4"},
		{"no room", func(r *v1.Role) { r.Cluster.PodCIDR = "198.19.0.0/31" }, "cluster.podCIDR:"},
		{"pods on Contiv's host bridge", func(r *v1.Role) { r.Cluster.PodCIDR = "172.16.0.0/12" }, "cluster.podCIDR: 172.16.0.0/12 overlaps Contiv's host-private subnet"},
		{"pods over the nodes", func(r *v1.Role) { r.Cluster.PodCIDR = "198.18.0.0/24" }, "cluster.podCIDR:"},
		{"services on Contiv's host bridge", func(r *v1.Role) { r.Cluster.ServiceCIDR = "172.19.0.0/20" }, "cluster.serviceCIDR:"},
		{"services over pods", func(r *v1.Role) { r.Cluster.ServiceCIDR = "198.19.0.0/20" }, "cluster.serviceCIDR:"},
		{"VNI too large", func(r *v1.Role) { r.Cluster.CNI.Contiv.VNI = 1 << 24 }, "cluster.cni.contiv.vni:"},
		{"VNI beyond Contiv", func(r *v1.Role) { r.Cluster.CNI.Contiv.VNI = 70000 }, "cluster.cni.contiv.vni: must be between 1 and 65535"},
		{"VNI negative", func(r *v1.Role) { r.Cluster.CNI.Contiv.VNI = -1 }, "cluster.cni.contiv.vni:"},
		{"VLAN mode", func(r *v1.Role) { r.Cluster.CNI.Contiv.Mode = "vlan" }, "cluster.cni.contiv.mode:"},
		{"no masters", func(r *v1.Role) {
			r.Peers = slices.DeleteFunc(r.Peers, func(p v1.Peer) bool { return p.Role == v1.RoleMaster })
		}, "peers: no master"},
		{"IPv6 VTEP", func(r *v1.Role) { r.Peers[0].Address = "2001:db8::21" }, "peers[0].address:"},
		{"no node name", func(r *v1.Role) { r.NodeName = "" }, "nodeName:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			role := testRole(t, "w1", testPKI(t))
			tc.mutate(role)
			_, err := New(Config{}).Plan(testHost("/"), role)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %v, want one naming %q", err, tc.field)
			}
		})
	}
}

// The files' own checkers refuse what netplugin and netmaster would.
func TestValidators(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct{ name, data string }{
		{"http", `{"K8S_API_SERVER":"http://198.18.0.10:8443","K8S_CA":"/a","K8S_CERT":"/b","K8S_KEY":"/c","SVC_SUBNET":"10.96.0.0/12"}`},
		{"no port", `{"K8S_API_SERVER":"https://198.18.0.10","K8S_CA":"/a","K8S_CERT":"/b","K8S_KEY":"/c","SVC_SUBNET":"10.96.0.0/12"}`},
		{"relative CA", `{"K8S_API_SERVER":"https://198.18.0.10:8443","K8S_CA":"a","K8S_CERT":"/b","K8S_KEY":"/c","SVC_SUBNET":"10.96.0.0/12"}`},
		{"bad subnet", `{"K8S_API_SERVER":"https://198.18.0.10:8443","K8S_CA":"/a","K8S_CERT":"/b","K8S_KEY":"/c","SVC_SUBNET":"10.96.0.1/12"}`},
		{"unknown key", `{"K8S_API_SERVER":"https://198.18.0.10:8443","K8S_CA":"/a","K8S_CERT":"/b","K8S_KEY":"/c","SVC_SUBNET":"10.96.0.0/12","X":1}`},
	} {
		if err := validateK8sConfig(write("contiv.json", tc.data)); err == nil {
			t.Errorf("contiv.json %s: accepted", tc.name)
		}
	}

	good := NetworkSpec{
		Global:  Global{Key: "global", Name: "global", ArpMode: "proxy", FwdMode: "routing", NetworkInfraType: "default", PvtSubnet: "172.19.0.0/16", Vlans: "1-4094", Vxlans: "1-10000"},
		Network: Network{Key: "default:default-net", TenantName: "default", NetworkName: "default-net", NwType: "data", Encap: "vxlan", PktTag: 4096, Subnet: "198.19.0.0/17", Gateway: "198.19.0.1"},
	}
	if err := good.validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(s *NetworkSpec)
	}{
		{"bridge forwarding", func(s *NetworkSpec) { s.Global.FwdMode = "bridge" }},
		{"VNI outside range", func(s *NetworkSpec) { s.Network.PktTag = 10001 }},
		{"reversed range", func(s *NetworkSpec) { s.Global.Vxlans = "10-1" }},
		{"range too wide", func(s *NetworkSpec) { s.Global.Vxlans = "1-20000" }},
		{"range beyond Contiv", func(s *NetworkSpec) { s.Global.Vxlans = "60000-70000"; s.Network.PktTag = 65000 }},
		{"gateway outside", func(s *NetworkSpec) { s.Network.Gateway = "198.18.0.1" }},
		{"gateway is the network", func(s *NetworkSpec) { s.Network.Gateway = "198.19.0.0" }},
		{"overlap host bridge", func(s *NetworkSpec) { s.Network.Subnet = "172.19.0.0/24"; s.Network.Gateway = "172.19.0.1" }},
		{"key", func(s *NetworkSpec) { s.Network.Key = "default-net" }},
		{"name", func(s *NetworkSpec) { s.Network.NetworkName = "default_net"; s.Network.Key = "default:default_net" }},
		{"private /24", func(s *NetworkSpec) { s.Global.PvtSubnet = "172.19.0.0/24" }},
	} {
		s := good
		tc.mutate(&s)
		data, _ := json.Marshal(s)
		if err := validateNetworkSpec(write("network.json", string(data))); err == nil {
			t.Errorf("network.json %s: accepted", tc.name)
		}
	}
}

func unitNames(units []service.Unit) []string {
	var out []string
	for _, u := range units {
		out = append(out, u.Name)
	}
	return out
}
