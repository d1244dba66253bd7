// Package contiv is the Contiv pod network (contiv/netplugin 1.2) in VXLAN
// mode, behind the CNI component's plugin.Plugin interface.
//
// What a node gets:
//   - /etc/cni/net.d/10-contiv.conflist: the network the container runtime
//     uses; the contivk8s binary asks the local netplugin for an address
//     over /run/contiv/contiv-cni.sock, so the list carries no IPAM.
//   - /var/contiv/config/contiv.json: the Kubernetes client settings
//     netplugin and netmaster read (a path Contiv hardcodes), with the
//     cluster CA and a client certificate.
//   - contiv-netplugin on every node (VTEP = the node's address, host label
//     = the Kubernetes node name), contiv-netmaster on masters and
//     appliances; both --netmode vxlan --fwdmode routing, because Contiv
//     refuses VXLAN with bridge forwarding.
//   - contiv-etcd-proxy on every node: Debian's etcd as a v2 proxy on
//     127.0.0.1:6666, which reaches the agent-managed etcd over TLS with a
//     client certificate. Contiv 1.2 speaks only etcd's v2 API, has no TLS
//     options for its cluster store and uses only the first endpoint it is
//     given; the proxy gives it TLS, every master, and nothing but v2 keys
//     (Kubernetes' data is in the v3 keyspace, which v2 requests cannot
//     reach). The etcd members must run with --enable-v2.
//   - on masters, /etc/contiv/network.json: Contiv's global settings and the
//     pod network (tenant default, network default-net, the cluster's pod
//     CIDR, VXLAN VNI), which netmaster keeps in its own store; the plan
//     pushes them through netmaster's REST API once it runs.
//
// Contiv is not packaged in Debian and is no longer maintained. Where its
// binaries are absent the CNI component renders and validates everything
// and starts nothing (see the component's Config.RequireDaemons).
package contiv

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/harmonykaas/harmony/agent/components/cni/plugin"
	"github.com/harmonykaas/harmony/agent/reconcile"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// Name selects Contiv in role.Cluster.CNI.Type.
const Name = "contiv"

// Unit names.
const (
	NetmasterUnit = "contiv-netmaster"
	NetpluginUnit = "contiv-netplugin"
	EtcdProxyUnit = "contiv-etcd-proxy"
)

// Paths on the node.
const (
	ConfListPath = plugin.ConfListDir + "/10-contiv.conflist"
	// K8sConfigPath is fixed in Contiv (utils/k8sutils).
	K8sConfigPath = "/var/contiv/config/contiv.json"
	K8sCAPath     = "/var/contiv/config/k8s-ca.crt"
	K8sCertPath   = "/var/contiv/config/k8s-client.crt"
	K8sKeyPath    = "/var/contiv/config/k8s-client.key"
	EtcdCAPath    = "/etc/contiv/etcd/ca.crt"
	EtcdCertPath  = "/etc/contiv/etcd/client.crt"
	EtcdKeyPath   = "/etc/contiv/etcd/client.key"
	NetworkPath   = "/etc/contiv/network.json"
	EtcdProxyDir  = "/var/lib/contiv/etcd-proxy"
)

// Contiv's own names and constants.
const (
	// networkName is the CNI network name Contiv's installer uses.
	networkName = "contiv-net"
	// cniType is Contiv's CNI binary in /opt/cni/bin.
	cniType = "contivk8s"
	// cniVersion is the version contivk8s answers in, whatever it is asked.
	cniVersion = "0.3.1"
	// Contiv's Kubernetes plugin puts every pod without labels in this
	// tenant and network.
	tenant     = "default"
	podNetwork = "default-net"
	// hostPrivateSubnet is Contiv's default for the host bridge
	// (contivh1); the pod and service networks must not overlap it.
	hostPrivateSubnet = "172.19.0.0/16"
	// vxlanBlock is the width of netmaster's default VXLAN range,
	// 1-10000; a VNI above it gets the block of that width that holds it.
	vxlanBlock = 10000
	// maxVNI and maxVXLANWidth are Contiv 1.2's own limits
	// (netutils.ParseTagRanges), far below VXLAN's 24 bits.
	maxVNI        = 65535
	maxVXLANWidth = 16000
	vxlanPort     = 4789
)

// DefaultVNI is the pod network's VXLAN network identifier when the role
// names none: inside netmaster's default VXLAN range (1-10000), so that
// its global settings stay as they start. VNIs are local to each
// cluster's own port group; the role may pick 1 to 65535, Contiv 1.2's
// limit.
const DefaultVNI = 4096

// kubeadmServiceCIDR is kubeadm's default service network, used when the
// role names none.
const kubeadmServiceCIDR = "10.96.0.0/12"

// Config is how the plugin finds Contiv on the node. Zero fields take the
// defaults.
type Config struct {
	// NetmasterBinary default /usr/bin/netmaster.
	NetmasterBinary string
	// NetpluginBinary default /usr/bin/netplugin.
	NetpluginBinary string
	// CNIBinary is contivk8s, which the container runtime runs; default
	// /opt/cni/bin/contivk8s.
	CNIBinary string
	// EtcdBinary runs the v2 proxy; default /usr/bin/etcd.
	EtcdBinary string
	// EtcdPeerPort is where the masters' etcd members serve peers; the
	// proxy learns the members' client URLs there. Default 2380.
	EtcdPeerPort int
	// EtcdProxyPort is the proxy's port on 127.0.0.1; default 6666, the
	// port Contiv's own installer gave its store.
	EtcdProxyPort int
	// NetmasterPort is netmaster's REST port, on 127.0.0.1 and on the
	// node's address; default 9999.
	NetmasterPort int
	// APIServerPort is each master's kube-apiserver, used when the role
	// has no VIP; default 6443. With a VIP, netplugin goes through
	// HAProxy on VIPPort (default 8443).
	APIServerPort int
	VIPPort       int
}

// Plugin is Contiv.
type Plugin struct {
	cfg Config
}

var _ plugin.Plugin = (*Plugin)(nil)

// New returns the Contiv plugin, with defaults filled into cfg.
func New(cfg Config) *Plugin {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	defInt := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	def(&cfg.NetmasterBinary, "/usr/bin/netmaster")
	def(&cfg.NetpluginBinary, "/usr/bin/netplugin")
	def(&cfg.CNIBinary, "/opt/cni/bin/"+cniType)
	def(&cfg.EtcdBinary, "/usr/bin/etcd")
	defInt(&cfg.EtcdPeerPort, 2380)
	defInt(&cfg.EtcdProxyPort, 6666)
	defInt(&cfg.NetmasterPort, 9999)
	defInt(&cfg.APIServerPort, 6443)
	defInt(&cfg.VIPPort, v1.APIServerPort)
	return &Plugin{cfg: cfg}
}

// Name implements plugin.Plugin.
func (p *Plugin) Name() string { return Name }

// Owned implements plugin.Plugin.
func (p *Plugin) Owned() plugin.Owned {
	return plugin.Owned{
		Files: []string{ConfListPath, K8sConfigPath, K8sCAPath, K8sCertPath, K8sKeyPath,
			EtcdCAPath, EtcdCertPath, EtcdKeyPath, NetworkPath},
		Units: []string{NetpluginUnit, NetmasterUnit, EtcdProxyUnit},
	}
}

// params are the role's inputs, checked.
type params struct {
	node      string
	master    bool
	podCIDR   netip.Prefix
	gateway   netip.Addr
	svcCIDR   netip.Prefix
	vni       int
	vtep      netip.Addr
	apiServer string
	// etcdPeers are the control-plane nodes' etcd peer URLs, name=URL.
	etcdPeers []string
}

var fieldErr = plugin.FieldErr

// params checks what Contiv needs of the role and the host. The role has
// passed api/v1 validation on its way in; these are Contiv's own limits
// on top (IPv4 only, room for a gateway, no overlap with its host bridge).
func (p *Plugin) params(host *reconcile.Host, role *v1.Role) (params, error) {
	out := params{node: role.NodeName, master: role.Role == v1.RoleMaster || role.Role == v1.RoleAppliance}
	if role.NodeName == "" {
		return out, fieldErr("nodeName", "required: netplugin's host label must be the Kubernetes node name")
	}
	c := role.Cluster
	if ct := c.CNI.Contiv; ct != nil {
		if ct.Mode != "" && ct.Mode != "vxlan" {
			return out, fieldErr("cluster.cni.contiv.mode", "must be \"vxlan\", got %q", ct.Mode)
		}
		out.vni = ct.VNI
	}
	switch {
	case out.vni == 0:
		out.vni = DefaultVNI
	case out.vni < 1 || out.vni > maxVNI:
		return out, fieldErr("cluster.cni.contiv.vni", "must be between 1 and %d (Contiv 1.2's limit), got %d", maxVNI, out.vni)
	}

	if c.PodCIDR == "" {
		return out, fieldErr("cluster.podCIDR", "required: Contiv's pod network is the cluster's pod CIDR")
	}
	pod, err := netip.ParsePrefix(c.PodCIDR)
	switch {
	case err != nil || pod.Masked() != pod:
		return out, fieldErr("cluster.podCIDR", "%q is not a network in CIDR form", c.PodCIDR)
	case !pod.Addr().Is4():
		return out, fieldErr("cluster.podCIDR", "%s: Contiv 1.2 allocates IPv4 pod addresses only", pod)
	case pod.Bits() < 1 || pod.Bits() > 30:
		return out, fieldErr("cluster.podCIDR", "%s: the prefix must be /1 to /30, to leave a gateway and pod addresses", pod)
	}
	out.podCIDR, out.gateway = pod, pod.Addr().Next()
	private := netip.MustParsePrefix(hostPrivateSubnet)
	if pod.Overlaps(private) {
		return out, fieldErr("cluster.podCIDR", "%s overlaps Contiv's host-private subnet %s", pod, private)
	}

	svc := c.ServiceCIDR
	if svc == "" {
		svc = kubeadmServiceCIDR
	}
	out.svcCIDR, err = netip.ParsePrefix(svc)
	if err != nil || !out.svcCIDR.Addr().Is4() {
		return out, fieldErr("cluster.serviceCIDR", "%q is not an IPv4 network in CIDR form", svc)
	}
	if out.svcCIDR.Overlaps(private) {
		return out, fieldErr("cluster.serviceCIDR", "%s overlaps Contiv's host-private subnet %s", out.svcCIDR, private)
	}
	if out.svcCIDR.Overlaps(pod) {
		return out, fieldErr("cluster.serviceCIDR", "%s overlaps the pod network %s", out.svcCIDR, pod)
	}

	var controlPlane []v1.Peer
	for i, peer := range role.Peers {
		addr, err := netip.ParseAddr(peer.Address)
		if err != nil {
			return out, fieldErr(fmt.Sprintf("peers[%d].address", i), "%q is not an IP address", peer.Address)
		}
		if pod.Contains(addr) || private.Contains(addr) {
			return out, fieldErr("cluster.podCIDR", "%s or Contiv's host-private subnet contains node %s's address %s (peers[%d])", pod, peer.Name, addr, i)
		}
		if peer.Name == role.NodeName {
			if !usableVTEP(addr) {
				return out, fieldErr(fmt.Sprintf("peers[%d].address", i), "%s cannot be a VXLAN tunnel endpoint: Contiv needs a unicast IPv4 address", addr)
			}
			out.vtep = addr
		}
		if peer.Role == v1.RoleMaster || peer.Role == v1.RoleAppliance {
			controlPlane = append(controlPlane, peer)
		}
	}
	if !out.vtep.IsValid() {
		// Not among its peers (a role without peers): the primary address.
		if len(host.Facts.Addresses) == 0 {
			return out, fieldErr("peers", "node %s is not among the role's peers, and the host has no primary address for the VXLAN tunnel endpoint", role.NodeName)
		}
		out.vtep = host.Facts.Addresses[0].Unmap()
		if !usableVTEP(out.vtep) {
			return out, fieldErr("peers", "node %s is not among the role's peers, and its primary address %s is not a unicast IPv4 address for the VXLAN tunnel endpoint", role.NodeName, out.vtep)
		}
	}
	if len(controlPlane) == 0 {
		return out, fieldErr("peers", "no master or appliance among the role's peers: Contiv's store is the masters' etcd")
	}
	slices.SortStableFunc(controlPlane, func(a, b v1.Peer) int {
		if a.Rank != b.Rank {
			return a.Rank - b.Rank
		}
		return strings.Compare(a.Name, b.Name)
	})
	for _, peer := range controlPlane {
		addr := netip.MustParseAddr(peer.Address)
		out.etcdPeers = append(out.etcdPeers, peer.Name+"=https://"+netip.AddrPortFrom(addr, uint16(p.cfg.EtcdPeerPort)).String())
	}
	if c.VIP != "" {
		vip, err := netip.ParseAddr(c.VIP)
		if err != nil {
			return out, fieldErr("cluster.vip", "%q is not an IP address", c.VIP)
		}
		out.apiServer = "https://" + netip.AddrPortFrom(vip, uint16(p.cfg.VIPPort)).String()
	} else {
		first := netip.MustParseAddr(controlPlane[0].Address)
		out.apiServer = "https://" + netip.AddrPortFrom(first, uint16(p.cfg.APIServerPort)).String()
	}
	return out, nil
}

func usableVTEP(a netip.Addr) bool {
	a = a.Unmap()
	return a.Is4() && !a.IsUnspecified() && !a.IsLoopback() && !a.IsMulticast() && !a.IsLinkLocalUnicast() && a != netip.AddrFrom4([4]byte{255, 255, 255, 255})
}

// vxlanRange is netmaster's allowed VXLAN range: its default 1-10000, or
// the block of the same width that holds vni.
func vxlanRange(vni int) string {
	lo := (vni-1)/vxlanBlock*vxlanBlock + 1
	return strconv.Itoa(lo) + "-" + strconv.Itoa(min(lo+vxlanBlock-1, maxVNI))
}
