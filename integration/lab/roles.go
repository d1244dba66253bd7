package lab

import (
	"fmt"
	"net/netip"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// Cluster settings of the lab. The pod and service networks sit inside
// 198.18.0.0/15 too, like every address the lab uses.
const (
	clusterName = "lab"
	podCIDR     = "198.19.0.0/17"
	serviceCIDR = "198.19.128.0/20"
	dnsDomain   = "cluster.local"
)

// plan names the lab's hosts and addresses.
func plan(cfg *Config, r *record) []hostRecord {
	var hosts []hostRecord
	add := func(prefix string, n int, role v1.NodeRole, first byte) {
		for i := range n {
			name := fmt.Sprintf("%s%d", prefix, i+1)
			hosts = append(hosts, hostRecord{
				Name: name, Netns: hostNetns(r.ID, name), Role: string(role),
				IP:   addr(cfg.Subnet, first+byte(i)).String(),
				Root: hostRoot(cfg.StateDir, name),
			})
		}
	}
	add("m", cfg.Masters, v1.RoleMaster, 11)
	add("w", cfg.Workers, v1.RoleWorker, 31)
	return hosts
}

// vip is the API virtual IP.
func vip(subnet netip.Prefix) netip.Addr { return addr(subnet, 10) }

// roles builds every host's role: one cluster, the masters ranked in
// order, the CAs for masters and the cluster CA's certificate alone for
// workers.
func roles(cfg *Config, hosts []hostRecord, p *v1.ClusterPKI, kubernetesVersion string) ([]v1.Role, error) {
	password, err := randomString(8)
	if err != nil {
		return nil, err
	}
	tokenID, err := randomString(6)
	if err != nil {
		return nil, err
	}
	tokenSecret, err := randomString(16)
	if err != nil {
		return nil, err
	}
	cluster := v1.ClusterSettings{
		Name:              clusterName,
		KubernetesVersion: kubernetesVersion,
		VIP:               vip(cfg.Subnet).String(),
		// One VRID per lab subnet, so two labs never answer each other.
		VRID:        int(cfg.Subnet.Addr().As4()[2]%254) + 1,
		PodCIDR:     podCIDR,
		ServiceCIDR: serviceCIDR,
		DNSDomain:   dnsDomain,
		CNI:         v1.CNISettings{Type: "contiv", Contiv: &v1.ContivSettings{Mode: "vxlan", VNI: 4096}},
		LoadBalancer: v1.LoadBalancerSettings{
			VRRPPassword:  password,
			CheckInterval: "1s",
		},
	}
	var peers []v1.Peer
	rank := 0
	for _, h := range hosts {
		peer := v1.Peer{Name: h.Name, Role: v1.NodeRole(h.Role), Address: h.IP}
		if peer.Role == v1.RoleMaster {
			peer.Rank = rank
			rank++
		}
		peers = append(peers, peer)
	}
	workerPKI := &v1.ClusterPKI{ClusterCA: &v1.KeyPair{Certificate: p.ClusterCA.Certificate}}
	var out []v1.Role
	for _, h := range hosts {
		r := v1.Role{
			APIVersion: v1.APIVersion, Kind: "Role", NodeName: h.Name, Role: v1.NodeRole(h.Role),
			Cluster:   cluster,
			Addresses: v1.NodeAddresses{IPs: []string{h.IP}, Interface: "eth0"},
			Peers:     peers,
			Kubeadm:   &v1.KubeadmSettings{BootstrapToken: tokenID + "." + tokenSecret},
			PKI:       workerPKI,
		}
		if r.Role == v1.RoleMaster {
			r.PKI = p
			r.Etcd = &v1.EtcdSettings{DataDir: "/var/lib/etcd"}
		}
		if err := r.Validate(); err != nil {
			return nil, fmt.Errorf("lab role for %s: %w", h.Name, err)
		}
		out = append(out, r)
	}
	return out, nil
}
