package v1_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

func TestEtcdSnapshotSchedule(t *testing.T) {
	def, err := (*v1.EtcdSnapshots)(nil).Schedule()
	if err != nil || def != (v1.EtcdSnapshotSchedule{Enabled: true, Interval: 12 * time.Hour, Keep: 5}) {
		t.Errorf("no settings: %+v, %v; want on, every 12h, 5 kept", def, err)
	}
	got, err := (&v1.EtcdSnapshots{Interval: "90m", Keep: 2}).Schedule()
	if err != nil || got != (v1.EtcdSnapshotSchedule{Enabled: true, Interval: 90 * time.Minute, Keep: 2}) {
		t.Errorf("90m, 2: %+v, %v", got, err)
	}
	if got, err := (&v1.EtcdSnapshots{Disabled: true}).Schedule(); err != nil || got.Enabled {
		t.Errorf("disabled: %+v, %v", got, err)
	}
}

func TestDecodeRole(t *testing.T) {
	f := mustFixtures(t)
	valid := mustJSON(t, validRole())

	tests := []struct {
		name  string
		mut   func(r *v1.Role)
		raw   []byte
		field string
		// problem, if set, must appear in the error: for the key checks,
		// which the keyMatches defect would otherwise satisfy vacuously.
		problem string
	}{
		{name: "valid worker", mut: func(*v1.Role) {}, field: okField},
		{name: "minimal appliance", mut: func(r *v1.Role) {
			*r = v1.Role{APIVersion: v1.APIVersion, Kind: "Role", NodeName: "appliance-1", Role: v1.RoleAppliance,
				Cluster: v1.ClusterSettings{Name: "a"}}
		}, field: okField},
		{name: "IPv6 networks", mut: func(r *v1.Role) {
			r.Cluster.VIP, r.Cluster.PodCIDR, r.Cluster.ServiceCIDR = "fd00::100", "fd00:10::/56", "fd00:20::/108"
		}, field: okField},
		{name: "pod and service CIDR of different families", mut: func(r *v1.Role) { r.Cluster.ServiceCIDR = "fd00::/108" }, field: okField},
		{name: "VRID 255", mut: func(r *v1.Role) { r.Cluster.VRID = 255 }, field: okField},
		{name: "vSphere provider ID", mut: func(r *v1.Role) { r.ProviderID = v1.VSphereProviderID("4230A5C6-1B2C-3D4E-5F60-718293A4B5C6") }, field: okField},
		{name: "VNI max", mut: func(r *v1.Role) { r.Cluster.CNI.Contiv.VNI = 1<<24 - 1 }, field: okField},
		{name: "rank 254", mut: func(r *v1.Role) { r.Peers[0].Rank = 254 }, field: okField},
		{name: "version with build metadata", mut: func(r *v1.Role) { r.Versions.Etcd = "3.5.16+vmware.1" }, field: okField},
		{name: "exactly the size limit", raw: padTo(t, valid, v1.MaxRoleBytes), field: okField},

		{name: "wrong apiVersion", mut: func(r *v1.Role) { r.APIVersion = "v1" }, field: "apiVersion"},
		{name: "wrong kind", mut: func(r *v1.Role) { r.Kind = "Bootstrap" }, field: "kind"},
		{name: "empty node name", mut: func(r *v1.Role) { r.NodeName = "" }, field: "nodeName"},
		{name: "uppercase node name", mut: func(r *v1.Role) { r.NodeName = "Node-1" }, field: "nodeName"},
		{name: "provider ID of another cloud", mut: func(r *v1.Role) { r.ProviderID = "aws:///us-east-1a/i-0123" }, field: "providerID"},
		{name: "provider ID not a UUID", mut: func(r *v1.Role) { r.ProviderID = "vsphere://42;rm -rf" }, field: "providerID"},
		{name: "unknown kube-proxy mode", mut: func(r *v1.Role) { r.Cluster.KubeProxyMode = "userspace" }, field: "cluster.kubeProxyMode"},
		{name: "unknown role", mut: func(r *v1.Role) { r.Role = "etcd" }, field: "role"},
		{name: "empty role", mut: func(r *v1.Role) { r.Role = "" }, field: "role"},
		{name: "negative revision", mut: func(r *v1.Role) { r.Revision = -1 }, field: "revision"},
		{name: "leave with a deadline", mut: func(r *v1.Role) {
			r.Leave = &v1.LeaveSettings{Deadline: time.Date(2025, 1, 1, 0, 10, 0, 0, time.UTC)}
		}, field: okField},
		{name: "leave without a deadline", mut: func(r *v1.Role) { r.Leave = &v1.LeaveSettings{} }, field: "leave.deadline"},
		{name: "leave as an empty object", raw: []byte(strings.Replace(string(valid), `"role":"worker"`, `"role":"worker","leave":{}`, 1)), field: "leave.deadline"},
		{name: "leave deadline not a time", raw: []byte(strings.Replace(string(valid), `"role":"worker"`, `"role":"worker","leave":{"deadline":"soon"}`, 1)), field: ""},

		{name: "empty cluster name", mut: func(r *v1.Role) { r.Cluster.Name = "" }, field: "cluster.name"},
		{name: "cluster name with dot", mut: func(r *v1.Role) { r.Cluster.Name = "prod.eu" }, field: "cluster.name"},
		{name: "bad kubernetes version", mut: func(r *v1.Role) { r.Cluster.KubernetesVersion = "latest" }, field: "cluster.kubernetesVersion"},
		{name: "bad VIP", mut: func(r *v1.Role) { r.Cluster.VIP = "10.0.0.256" }, field: "cluster.vip"},
		{name: "VIP with prefix", mut: func(r *v1.Role) { r.Cluster.VIP = "10.0.0.100/24" }, field: "cluster.vip"},
		{name: "VRID 256", mut: func(r *v1.Role) { r.Cluster.VRID = 256 }, field: "cluster.vrid"},
		{name: "VIP with a zone", mut: func(r *v1.Role) { r.Cluster.VIP = "fe80::1%eth0" }, field: "cluster.vip"},
		{name: "unspecified VIP", mut: func(r *v1.Role) { r.Cluster.VIP = "0.0.0.0" }, field: "cluster.vip"},
		{name: "peer with a zone", mut: func(r *v1.Role) { r.Peers[0].Address = "fe80::2%eth0" }, field: "peers[0].address"},
		{name: "negative VRID", mut: func(r *v1.Role) { r.Cluster.VRID = -1 }, field: "cluster.vrid"},
		{name: "VRRP password too long", mut: func(r *v1.Role) { r.Cluster.LoadBalancer.VRRPPassword = "123456789" }, field: "cluster.loadBalancer.vrrpPassword"},
		{name: "VRRP password with a space", mut: func(r *v1.Role) { r.Cluster.LoadBalancer.VRRPPassword = "a b" }, field: "cluster.loadBalancer.vrrpPassword"},
		{name: "VRRP password with a comment sign", mut: func(r *v1.Role) { r.Cluster.LoadBalancer.VRRPPassword = "ab#cdefg" }, field: "cluster.loadBalancer.vrrpPassword"},
		{name: "VRRP password with a quote", mut: func(r *v1.Role) { r.Cluster.LoadBalancer.VRRPPassword = `ab"cdefg` }, field: "cluster.loadBalancer.vrrpPassword"},
		{name: "VRRP password with a brace", mut: func(r *v1.Role) { r.Cluster.LoadBalancer.VRRPPassword = "ab}" }, field: "cluster.loadBalancer.vrrpPassword"},
		{name: "client timeout not a duration", mut: func(r *v1.Role) { r.Cluster.LoadBalancer.ClientTimeout = "4 hours" }, field: "cluster.loadBalancer.clientTimeout"},
		{name: "tunnel timeout too long", mut: func(r *v1.Role) { r.Cluster.LoadBalancer.TunnelTimeout = "200h" }, field: "cluster.loadBalancer.tunnelTimeout"},
		{name: "check interval too short", mut: func(r *v1.Role) { r.Cluster.LoadBalancer.CheckInterval = "1ms" }, field: "cluster.loadBalancer.checkInterval"},
		{name: "VRRP version 4", mut: func(r *v1.Role) { r.Cluster.LoadBalancer.VRRPVersion = 4 }, field: "cluster.loadBalancer.vrrpVersion"},
		{name: "advert interval with VRRPv2", mut: func(r *v1.Role) { r.Cluster.LoadBalancer.AdvertInterval = "300ms" }, field: "cluster.loadBalancer.advertInterval"},
		{name: "advert interval not in centiseconds", mut: func(r *v1.Role) {
			r.Cluster.LoadBalancer.VRRPVersion, r.Cluster.LoadBalancer.AdvertInterval = 3, "305ms"
		}, field: "cluster.loadBalancer.advertInterval"},
		{name: "advert interval too long", mut: func(r *v1.Role) {
			r.Cluster.LoadBalancer.VRRPVersion, r.Cluster.LoadBalancer.AdvertInterval = 3, "41s"
		}, field: "cluster.loadBalancer.advertInterval"},
		{name: "load balancer settings", mut: func(r *v1.Role) {
			r.Cluster.LoadBalancer = v1.LoadBalancerSettings{VRRPPassword: "s3cr3t-1", ClientTimeout: "4h", ServerTimeout: "4h", TunnelTimeout: "8h", CheckInterval: "2s"}
		}, field: okField},
		{name: "VRRPv3 every 300ms", mut: func(r *v1.Role) {
			r.Cluster.LoadBalancer.VRRPVersion, r.Cluster.LoadBalancer.AdvertInterval = 3, "300ms"
		}, field: okField},
		{name: "pod CIDR not a network", mut: func(r *v1.Role) { r.Cluster.PodCIDR = "10.244.0.1/16" }, field: "cluster.podCIDR"},
		{name: "pod CIDR without prefix", mut: func(r *v1.Role) { r.Cluster.PodCIDR = "10.244.0.0" }, field: "cluster.podCIDR"},
		{name: "service CIDR not a network", mut: func(r *v1.Role) { r.Cluster.ServiceCIDR = "10.96.0.0/33" }, field: "cluster.serviceCIDR"},
		{name: "overlapping CIDRs", mut: func(r *v1.Role) { r.Cluster.PodCIDR, r.Cluster.ServiceCIDR = "10.0.0.0/8", "10.96.0.0/12" }, field: "cluster.serviceCIDR"},
		{name: "equal CIDRs", mut: func(r *v1.Role) { r.Cluster.ServiceCIDR = r.Cluster.PodCIDR }, field: "cluster.serviceCIDR"},
		{name: "bad DNS domain", mut: func(r *v1.Role) { r.Cluster.DNSDomain = "Cluster.Local" }, field: "cluster.dnsDomain"},
		{name: "unknown CNI", mut: func(r *v1.Role) { r.Cluster.CNI.Type = "calico" }, field: "cluster.cni.type"},
		{name: "contiv mode", mut: func(r *v1.Role) { r.Cluster.CNI.Contiv.Mode = "vlan" }, field: "cluster.cni.contiv.mode"},
		{name: "VNI too large", mut: func(r *v1.Role) { r.Cluster.CNI.Contiv.VNI = 1 << 24 }, field: "cluster.cni.contiv.vni"},
		{name: "negative VNI", mut: func(r *v1.Role) { r.Cluster.CNI.Contiv.VNI = -1 }, field: "cluster.cni.contiv.vni"},
		{name: "flannel VNI too large", mut: func(r *v1.Role) {
			r.Cluster.CNI = v1.CNISettings{Type: "flannel", Flannel: &v1.FlannelSettings{VNI: 1 << 24, Port: 8472}}
		}, field: "cluster.cni.flannel.vni"},
		{name: "flannel port too large", mut: func(r *v1.Role) {
			r.Cluster.CNI = v1.CNISettings{Type: "flannel", Flannel: &v1.FlannelSettings{VNI: 1, Port: 65536}}
		}, field: "cluster.cni.flannel.port"},

		{name: "bad address", mut: func(r *v1.Role) { r.Addresses.IPs[1] = "fd00::zz" }, field: "addresses.ips[1]"},
		{name: "bad DNS name", mut: func(r *v1.Role) { r.Addresses.DNSNames[0] = "node_1" }, field: "addresses.dnsNames[0]"},
		{name: "bad interface", mut: func(r *v1.Role) { r.Addresses.Interface = "ens192 up" }, field: "addresses.interface"},
		{name: "interface too long", mut: func(r *v1.Role) { r.Addresses.Interface = "abcdefghijklmnop" }, field: "addresses.interface"},

		{name: "bad peer name", mut: func(r *v1.Role) { r.Peers[0].Name = "Master-1" }, field: "peers[0].name"},
		{name: "duplicate peer", mut: func(r *v1.Role) { r.Peers[1].Name = r.Peers[0].Name }, field: "peers[1].name"},
		{name: "bad peer role", mut: func(r *v1.Role) { r.Peers[1].Role = "boss" }, field: "peers[1].role"},
		{name: "bad peer address", mut: func(r *v1.Role) { r.Peers[0].Address = "master-1.example.com" }, field: "peers[0].address"},
		{name: "empty peer address", mut: func(r *v1.Role) { r.Peers[0].Address = "" }, field: "peers[0].address"},
		{name: "rank 255", mut: func(r *v1.Role) { r.Peers[1].Rank = 255 }, field: "peers[1].rank"},
		{name: "negative rank", mut: func(r *v1.Role) { r.Peers[0].Rank = -1 }, field: "peers[0].rank"},

		{name: "bad kubernetes component version", mut: func(r *v1.Role) { r.Versions.Kubernetes = "1.31" }, field: "versions.kubernetes"},
		{name: "bad etcd version", mut: func(r *v1.Role) { r.Versions.Etcd = "3.5.x" }, field: "versions.etcd"},
		{name: "bad containerd version", mut: func(r *v1.Role) { r.Versions.Containerd = "1.7.22 " }, field: "versions.containerd"},
		{name: "bad keepalived version", mut: func(r *v1.Role) { r.Versions.Keepalived = "v2.3.1-" }, field: "versions.keepalived"},
		{name: "bad haproxy version", mut: func(r *v1.Role) { r.Versions.HAProxy = "3.0.5-" + strings.Repeat("a", 65) }, field: "versions.haproxy"},
		{name: "bad CNI version", mut: func(r *v1.Role) { r.Versions.CNI = "1.2.3;rm" }, field: "versions.cni"},

		{name: "relative etcd data dir", mut: func(r *v1.Role) { r.Etcd.DataDir = "var/lib/etcd" }, field: "etcd.dataDir"},
		{name: "unclean etcd data dir", mut: func(r *v1.Role) { r.Etcd.DataDir = "/var/lib/../etcd" }, field: "etcd.dataDir"},
		{name: "etcd data dir with trailing slash", mut: func(r *v1.Role) { r.Etcd.DataDir = "/var/lib/etcd/" }, field: "etcd.dataDir"},
		{name: "etcd data dir root", mut: func(r *v1.Role) { r.Etcd.DataDir = "/" }, field: "etcd.dataDir"},
		{name: "etcd snapshots set", mut: func(r *v1.Role) {
			r.Etcd.Snapshots = &v1.EtcdSnapshots{Interval: "30m", Keep: 100}
		}, field: okField},
		{name: "etcd snapshots off", mut: func(r *v1.Role) { r.Etcd.Snapshots = &v1.EtcdSnapshots{Disabled: true} }, field: okField},
		{name: "etcd snapshot interval not a duration", mut: func(r *v1.Role) {
			r.Etcd.Snapshots = &v1.EtcdSnapshots{Interval: "daily"}
		}, field: "etcd.snapshots.interval"},
		{name: "etcd snapshot interval too short", mut: func(r *v1.Role) {
			r.Etcd.Snapshots = &v1.EtcdSnapshots{Interval: "4m59s"}
		}, field: "etcd.snapshots.interval"},
		{name: "etcd snapshot interval too long", mut: func(r *v1.Role) {
			r.Etcd.Snapshots = &v1.EtcdSnapshots{Interval: "169h"}
		}, field: "etcd.snapshots.interval"},
		{name: "etcd snapshots keep negative", mut: func(r *v1.Role) { r.Etcd.Snapshots = &v1.EtcdSnapshots{Keep: -1} }, field: "etcd.snapshots.keep"},
		{name: "etcd snapshots keep too many", mut: func(r *v1.Role) { r.Etcd.Snapshots = &v1.EtcdSnapshots{Keep: 101} }, field: "etcd.snapshots.keep"},
		{name: "etcd restore on a worker", mut: func(r *v1.Role) {
			r.Etcd.Restore = &v1.EtcdRestore{ID: "r1", Source: "master-1", SnapshotTakenAt: time.Unix(1e9, 0)}
		}, field: "etcd.restore"},
		{name: "etcd restore ID uppercase", mut: func(r *v1.Role) {
			r.Role = v1.RoleMaster
			r.Etcd.Restore = &v1.EtcdRestore{ID: "R1", Source: "master-1", SnapshotTakenAt: time.Unix(1e9, 0)}
		}, field: "etcd.restore.id"},
		{name: "etcd restore ID empty", mut: func(r *v1.Role) {
			r.Role = v1.RoleMaster
			r.Etcd.Restore = &v1.EtcdRestore{Source: "master-1", SnapshotTakenAt: time.Unix(1e9, 0)}
		}, field: "etcd.restore.id"},
		{name: "etcd restore ID a path", mut: func(r *v1.Role) {
			r.Role = v1.RoleMaster
			r.Etcd.Restore = &v1.EtcdRestore{ID: "../r1", Source: "master-1", SnapshotTakenAt: time.Unix(1e9, 0)}
		}, field: "etcd.restore.id"},
		{name: "etcd restore from a worker", mut: func(r *v1.Role) {
			r.Role = v1.RoleMaster
			r.Peers = append(r.Peers, v1.Peer{Name: "worker-9", Role: v1.RoleWorker, Address: "10.0.0.99"})
			r.Etcd.Restore = &v1.EtcdRestore{ID: "r1", Source: "worker-9", SnapshotTakenAt: time.Unix(1e9, 0)}
		}, field: "etcd.restore.source"},
		{name: "etcd restore from a stranger", mut: func(r *v1.Role) {
			r.Role = v1.RoleMaster
			r.Etcd.Restore = &v1.EtcdRestore{ID: "r1", Source: "master-9", SnapshotTakenAt: time.Unix(1e9, 0)}
		}, field: "etcd.restore.source"},
		{name: "etcd restore without a snapshot", mut: func(r *v1.Role) {
			r.Role = v1.RoleMaster
			r.Etcd.Restore = &v1.EtcdRestore{ID: "r1", Source: "master-1"}
		}, field: "etcd.restore.snapshotTakenAt"},
		{name: "etcd members to remove", mut: func(r *v1.Role) {
			r.Role = v1.RoleMaster
			r.Etcd.RemoveMembers = []string{"8e9e05c52164694d", "1"}
		}, field: okField},
		{name: "etcd members to remove on a worker", mut: func(r *v1.Role) {
			r.Etcd.RemoveMembers = []string{"8e9e05c52164694d"}
		}, field: "etcd.removeMembers"},
		{name: "etcd member to remove in uppercase", mut: func(r *v1.Role) {
			r.Role = v1.RoleMaster
			r.Etcd.RemoveMembers = []string{"1", "8E9E05C52164694D"}
		}, field: "etcd.removeMembers[1]"},
		{name: "etcd member to remove too long", mut: func(r *v1.Role) {
			r.Role = v1.RoleMaster
			r.Etcd.RemoveMembers = []string{"18e9e05c52164694d"}
		}, field: "etcd.removeMembers[0]"},
		{name: "etcd member to remove zero", mut: func(r *v1.Role) {
			r.Role = v1.RoleMaster
			r.Etcd.RemoveMembers = []string{"0"}
		}, field: "etcd.removeMembers[0]"},
		{name: "etcd member to remove empty", mut: func(r *v1.Role) {
			r.Role = v1.RoleMaster
			r.Etcd.RemoveMembers = []string{""}
		}, field: "etcd.removeMembers[0]"},
		{name: "too many etcd members to remove", mut: func(r *v1.Role) {
			r.Role = v1.RoleMaster
			for i := range v1.MaxRemoveMembers + 1 {
				r.Etcd.RemoveMembers = append(r.Etcd.RemoveMembers, fmt.Sprintf("%x", i+1))
			}
		}, field: "etcd.removeMembers"},

		// Only the pair under test is set, so that the known keyMatches
		// defect in an earlier pair cannot mask it.
		{name: "cluster CA not PEM", mut: func(r *v1.Role) {
			r.PKI = &v1.ClusterPKI{ClusterCA: &v1.KeyPair{Certificate: "x", Key: f.caKey}}
		}, field: "pki.clusterCA.certificate"},
		{name: "cluster CA not a CA", mut: func(r *v1.Role) {
			r.PKI = &v1.ClusterPKI{ClusterCA: &v1.KeyPair{Certificate: f.leafPEM, Key: f.leafKey}}
		}, field: "pki.clusterCA.certificate"},
		{name: "cluster CA key of another CA", mut: func(r *v1.Role) {
			r.PKI = &v1.ClusterPKI{ClusterCA: &v1.KeyPair{Certificate: f.caPEM, Key: f.otherKey}}
		}, field: "pki.clusterCA.key", problem: "does not match"},
		{name: "cluster CA key missing on a master", mut: func(r *v1.Role) {
			r.Role = v1.RoleMaster
			r.PKI = &v1.ClusterPKI{ClusterCA: &v1.KeyPair{Certificate: f.caPEM}}
		}, field: "pki.clusterCA.key"},
		{name: "cluster CA certificate alone on a worker", mut: func(r *v1.Role) {
			r.Role = v1.RoleWorker
			r.PKI = &v1.ClusterPKI{ClusterCA: &v1.KeyPair{Certificate: f.caPEM}}
		}, field: okField},
		{name: "worker's CA certificate alone is still checked", mut: func(r *v1.Role) {
			r.Role = v1.RoleWorker
			r.PKI = &v1.ClusterPKI{ClusterCA: &v1.KeyPair{Certificate: f.leafPEM}}
		}, field: "pki.clusterCA.certificate"},
		{name: "bootstrap token", mut: func(r *v1.Role) {
			r.Kubeadm = &v1.KubeadmSettings{BootstrapToken: "abcdef.0123456789abcdef"}
		}, field: okField},
		{name: "bootstrap token, uppercase", mut: func(r *v1.Role) {
			r.Kubeadm = &v1.KubeadmSettings{BootstrapToken: "ABCDEF.0123456789abcdef"}
		}, field: "kubeadm.bootstrapToken"},
		{name: "bootstrap token, short secret", mut: func(r *v1.Role) {
			r.Kubeadm = &v1.KubeadmSettings{BootstrapToken: "abcdef.0123456789"}
		}, field: "kubeadm.bootstrapToken"},
		{name: "cluster CA key is a certificate", mut: func(r *v1.Role) {
			r.PKI = &v1.ClusterPKI{ClusterCA: &v1.KeyPair{Certificate: f.caPEM, Key: f.caPEM}}
		}, field: "pki.clusterCA.key"},
		{name: "etcd CA not a CA", mut: func(r *v1.Role) {
			r.PKI = &v1.ClusterPKI{EtcdCA: &v1.KeyPair{Certificate: f.leafPEM, Key: f.leafKey}}
		}, field: "pki.etcdCA.certificate"},
		{name: "etcd CA key of another CA", mut: func(r *v1.Role) {
			r.PKI = &v1.ClusterPKI{EtcdCA: &v1.KeyPair{Certificate: f.caPEM, Key: f.otherKey}}
		}, field: "pki.etcdCA.key", problem: "does not match"},
		{name: "front proxy CA empty", mut: func(r *v1.Role) {
			r.PKI = &v1.ClusterPKI{FrontProxyCA: &v1.KeyPair{}}
		}, field: "pki.frontProxyCA.certificate"},
		{name: "front proxy CA key of another CA", mut: func(r *v1.Role) {
			r.PKI = &v1.ClusterPKI{FrontProxyCA: &v1.KeyPair{Certificate: f.caPEM, Key: f.otherKey}}
		}, field: "pki.frontProxyCA.key", problem: "does not match"},
		{name: "service account key not PEM", mut: func(r *v1.Role) {
			r.PKI = &v1.ClusterPKI{ServiceAccountKey: "secret"}
		}, field: "pki.serviceAccountKey"},
		{name: "service account key is a certificate", mut: func(r *v1.Role) {
			r.PKI = &v1.ClusterPKI{ServiceAccountKey: f.caPEM}
		}, field: "pki.serviceAccountKey"},
		{name: "service account key, valid", mut: func(r *v1.Role) {
			r.PKI = &v1.ClusterPKI{ServiceAccountKey: f.caKey}
		}, field: okField},

		{name: "unknown field", raw: []byte(`{"apiVersion":"harmony.dev/v1","kind":"Role","secret":"x"}`), field: "secret"},
		{name: "revision as a string", raw: []byte(`{"apiVersion":"harmony.dev/v1","kind":"Role","revision":"3"}`), field: "revision"},
		{name: "vrid as a string", raw: []byte(`{"cluster":{"vrid":"51"}}`), field: "cluster.vrid"},
		{name: "peers as an object", raw: []byte(`{"peers":{}}`), field: "peers"},
		{name: "trailing data", raw: append(append([]byte{}, valid...), " x"...), field: ""},
		{name: "second document", raw: append(append([]byte{}, valid...), valid...), field: ""},
		{name: "truncated", raw: valid[:len(valid)/2], field: ""},
		{name: "empty", raw: []byte{}, field: ""},
		{name: "null", raw: []byte("null"), field: "apiVersion"},
		{name: "one byte over the size limit", raw: padTo(t, valid, v1.MaxRoleBytes+1), field: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := tc.raw
			if data == nil {
				r := validRole()
				tc.mut(r)
				data = mustJSON(t, r)
			}
			got, err := v1.DecodeRole(bytes.NewReader(data))
			checkResult(t, err, tc.field)
			if tc.problem != "" && !strings.Contains(err.Error(), tc.problem) {
				t.Fatalf("error %q does not say %q", err, tc.problem)
			}
			if err != nil {
				if got != nil {
					t.Errorf("returned a role along with error %v", err)
				}
				return
			}
			if err := got.Validate(); err != nil {
				t.Errorf("decoded role does not validate: %v", err)
			}
		})
	}
}

func TestDecodeRoleKeepsFields(t *testing.T) {
	want := validRole()
	got, err := v1.DecodeRole(bytes.NewReader(mustJSON(t, want)))
	if err != nil {
		t.Fatal(err)
	}
	if !semanticEqual(got, want) {
		t.Errorf("decoded %+v\nwant %+v", got, want)
	}
}

// TestRolePKIAccepted checks that a master's role with real cluster CAs, in
// every key encoding ParsePrivateKeyPEM supports, is accepted.
func TestRolePKIAccepted(t *testing.T) {
	f := mustFixtures(t)

	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 1024) // small: speed only
	if err != nil {
		t.Fatal(err)
	}
	sec1, err := x509.MarshalECPrivateKey(ecKey)
	if err != nil {
		t.Fatal(err)
	}
	pairs := map[string]func() (*v1.KeyPair, error){
		"ECDSA PKCS#8": func() (*v1.KeyPair, error) { return &v1.KeyPair{Certificate: f.caPEM, Key: f.caKey}, nil },
		"ECDSA SEC1": func() (*v1.KeyPair, error) {
			return caPair(ecKey, &ecKey.PublicKey, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1}))
		},
		"Ed25519 PKCS#8": func() (*v1.KeyPair, error) {
			k, err := pkcs8PEM(edKey)
			if err != nil {
				return nil, err
			}
			return caPair(edKey, edKey.Public(), []byte(k))
		},
		"RSA PKCS#1": func() (*v1.KeyPair, error) {
			return caPair(rsaKey, &rsaKey.PublicKey, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rsaKey)}))
		},
	}
	for name, mk := range pairs {
		t.Run(name, func(t *testing.T) {
			kp, err := mk()
			if err != nil {
				t.Fatal(err)
			}
			r := validRole()
			r.Role = v1.RoleMaster
			r.PKI = &v1.ClusterPKI{ClusterCA: kp, EtcdCA: kp, FrontProxyCA: kp, ServiceAccountKey: kp.Key}
			_, err = v1.DecodeRole(bytes.NewReader(mustJSON(t, r)))
			if err != nil {
				t.Fatalf("valid PKI refused: %v", err)
			}
		})
	}
}

// caPair makes a self-signed CA certificate for key and returns it with
// keyPEM.
func caPair(key any, pub any, keyPEM []byte) (*v1.KeyPair, error) {
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		return nil, err
	}
	return &v1.KeyPair{
		Certificate: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		Key:         string(keyPEM),
	}, nil
}

func TestParsePrivateKeyPEM(t *testing.T) {
	f := mustFixtures(t)
	if _, err := v1.ParsePrivateKeyPEM([]byte(f.caKey)); err != nil {
		t.Errorf("PKCS#8 key: %v", err)
	}
	for name, bad := range map[string]string{
		"empty":       "",
		"not PEM":     "key",
		"certificate": f.caPEM,
		"corrupt":     "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
		"wrong label": strings.ReplaceAll(f.caKey, "PRIVATE KEY", "EC PRIVATE KEY"),
	} {
		if _, err := v1.ParsePrivateKeyPEM([]byte(bad)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestRoleRedacted(t *testing.T) {
	f := mustFixtures(t)
	r := validRole()
	r.PKI = validPKI(f)
	r.PKI.FrontProxyCA = nil // a nil pair must stay nil, not panic
	before := mustJSON(t, r)

	red := r.Redacted()

	// The original, and everything it points to, is unchanged.
	if after := mustJSON(t, r); !bytes.Equal(before, after) {
		t.Fatalf("Redacted mutated the original:\nbefore %s\nafter  %s", before, after)
	}
	if red.PKI == r.PKI || red.PKI.ClusterCA == r.PKI.ClusterCA || red.PKI.EtcdCA == r.PKI.EtcdCA {
		t.Fatal("Redacted shares PKI pointers with the original")
	}
	// No private key survives anywhere in the redacted form.
	out := mustJSON(t, red)
	if bytes.Contains(out, []byte("PRIVATE KEY")) || bytes.Contains(out, []byte(strings.TrimSpace(f.caKey))) {
		t.Fatalf("redacted role still holds a private key: %s", out)
	}
	for name, got := range map[string]string{
		"clusterCA.key":     red.PKI.ClusterCA.Key,
		"etcdCA.key":        red.PKI.EtcdCA.Key,
		"serviceAccountKey": red.PKI.ServiceAccountKey,
	} {
		if got != "REDACTED" {
			t.Errorf("%s = %q, want REDACTED", name, got)
		}
	}
	if red.PKI.FrontProxyCA != nil {
		t.Error("a nil key pair became non-nil")
	}
	// Certificates are public and stay, so the output remains useful.
	if red.PKI.ClusterCA.Certificate != f.caPEM || red.PKI.EtcdCA.Certificate != f.caPEM {
		t.Error("Redacted dropped a certificate")
	}
	if red.NodeName != r.NodeName || red.Cluster.VIP != r.Cluster.VIP || red.Cluster.Name != r.Cluster.Name {
		t.Error("Redacted changed non-secret fields")
	}

	// The VRRP password is a secret too.
	withVRRP := validRole()
	withVRRP.Cluster.LoadBalancer.VRRPPassword = "s3cr3t!"
	if got := withVRRP.Redacted().Cluster.LoadBalancer.VRRPPassword; got != "REDACTED" {
		t.Errorf("vrrpPassword = %q after Redacted", got)
	}
	if withVRRP.Cluster.LoadBalancer.VRRPPassword != "s3cr3t!" {
		t.Error("Redacted mutated the original's VRRP password")
	}

	// So is the bootstrap token; a certificate-only pair keeps its empty
	// key empty.
	withToken := validRole()
	withToken.Kubeadm = &v1.KubeadmSettings{BootstrapToken: "abcdef.0123456789abcdef"}
	withToken.PKI = &v1.ClusterPKI{ClusterCA: &v1.KeyPair{Certificate: f.caPEM}}
	redToken := withToken.Redacted()
	if redToken.Kubeadm.BootstrapToken != "REDACTED" || withToken.Kubeadm.BootstrapToken == "REDACTED" {
		t.Errorf("bootstrapToken = %q redacted, %q original", redToken.Kubeadm.BootstrapToken, withToken.Kubeadm.BootstrapToken)
	}
	if redToken.PKI.ClusterCA.Key != "" {
		t.Errorf("an empty key became %q", redToken.PKI.ClusterCA.Key)
	}

	// Without PKI there is nothing to redact, and nothing must appear.
	plain := validRole()
	if got := plain.Redacted(); got.PKI != nil {
		t.Error("Redacted invented a PKI")
	}
	// An empty service account key stays empty rather than claiming a
	// redacted secret.
	r2 := validRole()
	r2.PKI = &v1.ClusterPKI{ClusterCA: &v1.KeyPair{Certificate: f.caPEM, Key: f.caKey}}
	if got := r2.Redacted(); got.PKI.ServiceAccountKey != "" {
		t.Errorf("serviceAccountKey = %q, want empty", got.PKI.ServiceAccountKey)
	}
}

func TestNodeRoleValid(t *testing.T) {
	for _, r := range []v1.NodeRole{v1.RoleAppliance, v1.RoleMaster, v1.RoleWorker} {
		if !r.Valid() {
			t.Errorf("%q is not valid", r)
		}
	}
	for _, r := range []v1.NodeRole{"", "Master", "etcd", "worker "} {
		if r.Valid() {
			t.Errorf("%q is valid", r)
		}
	}
}

// TestRoleJSONNames pins the wire names other components depend on.
func TestRoleJSONNames(t *testing.T) {
	var m map[string]any
	if err := json.Unmarshal(mustJSON(t, validRole()), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"apiVersion", "kind", "nodeName", "revision", "updatedAt", "role", "cluster", "addresses", "peers", "versions", "etcd"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON has no %q", k)
		}
	}
}

func TestRoleKubernetesVersion(t *testing.T) {
	for _, c := range []struct {
		name            string
		cluster, pinned string
		want            string
	}{
		{"the cluster's", "v1.33.6", "v1.34.2", "v1.33.6"},
		{"the node's pin when the cluster names none", "", "v1.33.6", "v1.33.6"},
		{"with its v added", "1.33.6", "", "v1.33.6"},
		{"a pin with its v added", "", "1.33.6", "v1.33.6"},
		{"none", "", "", ""},
	} {
		r := v1.Role{Cluster: v1.ClusterSettings{KubernetesVersion: c.cluster}, Versions: v1.ComponentVersions{Kubernetes: c.pinned}}
		if got := r.KubernetesVersion(); got != c.want {
			t.Errorf("%s: cluster %q, pinned %q: got %q, want %q", c.name, c.cluster, c.pinned, got, c.want)
		}
	}
}
