// Package flannel is flannel (github.com/flannel-io/flannel) with its
// VXLAN backend, behind the CNI component's plugin.Plugin interface: the
// pod network that moves packets.
//
// What a node gets:
//   - /etc/harmony/flannel/net-conf.json: the cluster's pod network and the
//     VXLAN backend (VNI and UDP port from the role), what kube-flannel
//     ships as a ConfigMap.
//   - harmony-flannel: flanneld --kube-subnet-mgr, run as the node itself
//     with the kubelet's credential; the masters grant every node read
//     access to Nodes (rbac.go), and the Node authorizer lets a node patch
//     its own Node's status. Its lease is the Node's spec.podCIDR, which
//     kube-controller-manager allocates from the cluster's pod CIDR; its
//     VXLAN endpoint is the node's address from the role; it masquerades
//     pod traffic that leaves the pod network.
//   - /etc/cni/net.d/10-flannel.conflist: a bridge (cni0) with host-local
//     addresses from the node's lease, and portmap, rendered from the
//     lease file flanneld writes (/run/flannel/subnet.env). Upstream's
//     flannel CNI binary (flannel-io/cni-plugin) renders the same bridge
//     configuration at every pod's creation; the module proxy here does not
//     serve it, so the agent renders it once per lease instead, and the
//     reference plugins from Debian's containernetworking-plugins run it.
//
// Until flanneld has its lease the node has no network configuration, so
// the kubelet keeps the node NotReady, as with kube-flannel's DaemonSet.
package flannel

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"

	"github.com/harmonykaas/harmony/agent/components/cni/plugin"
	"github.com/harmonykaas/harmony/agent/components/kubeadm"
	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/agent/service"
	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/images/components"
)

// Name selects flannel in role.Cluster.CNI.Type.
const Name = v1.CNIFlannel

// Unit runs flanneld.
const Unit = "flannel"

// Paths on the node.
const (
	NetConfPath  = "/etc/harmony/flannel/net-conf.json"
	ConfListPath = plugin.ConfListDir + "/10-flannel.conflist"
	// SubnetFile is flanneld's lease file (its --subnet-file default).
	SubnetFile = "/run/flannel/subnet.env"
	// KubeletKubeconfig is the kubelet's credential, which kubeadm writes
	// when the node joins.
	KubeletKubeconfig = kubeadm.KubeletKubeconfig
	// AdminKubeconfig is the cluster admin's credential that kubeadm
	// leaves on masters: with it a master grants nodes what flanneld
	// needs (rbac.go).
	AdminKubeconfig = kubeadm.AdminKubeconfig
)

// Config is how the plugin finds flannel on the node. Zero fields take the
// defaults.
type Config struct {
	// Binary is flanneld; default /usr/local/bin/flanneld, where the node
	// image installs it.
	Binary string
	// CNIBinDir holds the reference plugins the configuration names;
	// default components.CNIBinDir.
	CNIBinDir string
}

// Plugin is flannel.
type Plugin struct {
	cfg Config
	// granted: this process has seen the RBAC objects exist, so passes
	// stop asking the API.
	granted atomic.Bool
}

var _ plugin.Plugin = (*Plugin)(nil)

// New returns the flannel plugin, with defaults filled into cfg.
func New(cfg Config) *Plugin {
	if cfg.Binary == "" {
		cfg.Binary = "/usr/local/bin/flanneld"
	}
	if cfg.CNIBinDir == "" {
		cfg.CNIBinDir = components.CNIBinDir
	}
	return &Plugin{cfg: cfg}
}

// Name implements plugin.Plugin.
func (p *Plugin) Name() string { return Name }

// Owned implements plugin.Plugin.
func (p *Plugin) Owned() plugin.Owned {
	return plugin.Owned{Files: []string{NetConfPath, ConfListPath}, Units: []string{Unit}}
}

// Inputs are what other programs write and the plan reads: the agent
// watches them.
func (p *Plugin) Inputs() []string { return []string{KubeletKubeconfig, SubnetFile} }

// params are the role's inputs, checked.
type params struct {
	node    string
	podCIDR netip.Prefix
	vni     int
	port    int
	// endpoint is the node's VXLAN endpoint and the address flanneld
	// advertises.
	endpoint netip.Addr
}

var fieldErr = plugin.FieldErr

// params checks what flannel needs of the role and the host: the role has
// passed api/v1 validation; these are flannel's own limits on top.
func (p *Plugin) params(host *reconcile.Host, role *v1.Role) (params, error) {
	out := params{node: role.NodeName, vni: v1.DefaultFlannelVNI, port: v1.DefaultFlannelPort}
	if role.NodeName == "" {
		return out, fieldErr("nodeName", "required: flanneld leases the pod subnet of the Kubernetes node of this name")
	}
	if fl := role.Cluster.CNI.Flannel; fl != nil {
		if fl.VNI != 0 {
			out.vni = fl.VNI
		}
		if fl.Port != 0 {
			out.port = fl.Port
		}
	}
	if out.vni < 1 || out.vni > 1<<24-1 {
		return out, fieldErr("cluster.cni.flannel.vni", "must be between 1 and 16777215, got %d", out.vni)
	}
	if out.port < 1 || out.port > 65535 {
		return out, fieldErr("cluster.cni.flannel.port", "must be between 1 and 65535, got %d", out.port)
	}
	pod, err := netip.ParsePrefix(role.Cluster.PodCIDR)
	switch {
	case role.Cluster.PodCIDR == "":
		return out, fieldErr("cluster.podCIDR", "required: flannel's network is the cluster's pod CIDR")
	case err != nil || pod.Masked() != pod:
		return out, fieldErr("cluster.podCIDR", "%q is not a network in CIDR form", role.Cluster.PodCIDR)
	case !pod.Addr().Is4():
		return out, fieldErr("cluster.podCIDR", "%s: flannel's VXLAN backend here is IPv4 only", pod)
	case pod.Bits() > maxPodCIDRBits:
		// kube-controller-manager gives each node a /24 (kubeadm's
		// default node-cidr-mask-size), and a cluster needs room for
		// more than one node.
		return out, fieldErr("cluster.podCIDR", "%s is too small: each node gets a /%d, so the prefix must be /%d or shorter", pod, nodeSubnetBits, maxPodCIDRBits)
	}
	out.podCIDR = pod
	out.endpoint, err = endpoint(host, role)
	if err != nil {
		return out, err
	}
	if pod.Contains(out.endpoint) {
		return out, fieldErr("cluster.podCIDR", "%s contains the node's own address %s", pod, out.endpoint)
	}
	return out, nil
}

// Each node's pod subnet: kube-controller-manager's default mask for IPv4.
const (
	nodeSubnetBits = 24
	maxPodCIDRBits = nodeSubnetBits - 1
)

// endpoint is the node's address: its own entry among the role's peers,
// else the role's first address, else the host's primary address.
func endpoint(host *reconcile.Host, role *v1.Role) (netip.Addr, error) {
	for i, peer := range role.Peers {
		if peer.Name != role.NodeName {
			continue
		}
		a, err := netip.ParseAddr(peer.Address)
		if err != nil || !a.Unmap().Is4() {
			return netip.Addr{}, fieldErr(fmt.Sprintf("peers[%d].address", i), "%q is not an IPv4 address for the VXLAN endpoint", peer.Address)
		}
		return a.Unmap(), nil
	}
	for i, s := range role.Addresses.IPs {
		if a, err := netip.ParseAddr(s); err == nil && a.Unmap().Is4() {
			return a.Unmap(), nil
		} else if err != nil {
			return netip.Addr{}, fieldErr(fmt.Sprintf("addresses.ips[%d]", i), "%q is not an IP address", s)
		}
	}
	for _, a := range host.Facts.Addresses {
		if a.Unmap().Is4() {
			return a.Unmap(), nil
		}
	}
	return netip.Addr{}, fieldErr("addresses.ips", "node %s has no IPv4 address in its role or on its primary interface for the VXLAN endpoint", role.NodeName)
}

// Plan implements plugin.Plugin.
func (p *Plugin) Plan(host *reconcile.Host, role *v1.Role) (*plugin.Plan, error) {
	in, err := p.params(host, role)
	if err != nil {
		return nil, err
	}
	netConf, err := renderNetConf(in)
	if err != nil {
		return nil, err
	}
	plan := &plugin.Plan{
		Files:    []plugin.File{{Path: NetConfPath, Data: netConf, Mode: 0o644, Validate: validateNetConf, Units: []string{Unit}}},
		Binaries: []string{p.cfg.Binary},
	}
	for _, b := range components.CNIPlugins() {
		plan.Binaries = append(plan.Binaries, p.cfg.CNIBinDir+"/"+b)
	}
	// flanneld runs as the node: not before kubeadm has given the node
	// its credential, and no longer once a reset has taken it.
	if exists(host.Path(KubeletKubeconfig)) {
		plan.Units = []service.Unit{{Name: Unit, Env: []string{"NODE_NAME=" + in.node}, Command: []string{p.cfg.Binary,
			"--kube-subnet-mgr",
			"--kubeconfig-file=" + host.Path(KubeletKubeconfig),
			"--net-config-path=" + host.Path(NetConfPath),
			"--subnet-file=" + host.Path(SubnetFile),
			"--iface=" + in.endpoint.String(),
			"--public-ip=" + in.endpoint.String(),
			"--ip-masq",
		}}}
	} else {
		plan.Waiting = append(plan.Waiting, "the kubelet's credential "+KubeletKubeconfig+" (kubeadm writes it when the node joins), as which flanneld runs")
	}

	if exists(host.Path(AdminKubeconfig)) {
		plan.Apply = func(ctx context.Context) ([]string, error) {
			if p.granted.Load() {
				return nil, nil
			}
			actions, err := ensureRBAC(ctx, host, AdminKubeconfig)
			p.granted.Store(err == nil)
			return actions, err
		}
	}

	// The network configuration follows the lease. Until flanneld has
	// one there is none, and a lease outside the pod network (a
	// cluster re-created with another pod CIDR) is not used.
	lease, err := readLease(host.Path(SubnetFile))
	switch {
	case err == nil && !in.podCIDR.Contains(lease.subnet.Addr()):
		plan.Waiting = append(plan.Waiting, fmt.Sprintf("a lease inside the pod network %s: %s holds %s (stale; flanneld rewrites it)", in.podCIDR, SubnetFile, lease.subnet))
	case err == nil:
		conflist, err := renderConfList(lease, in.podCIDR)
		if err != nil {
			return nil, err
		}
		plan.Files = append(plan.Files, plugin.File{Path: ConfListPath, Data: conflist, Mode: 0o644,
			Validate: plugin.ConfListValidator(ConfListRule)})
	default:
		plan.Waiting = append(plan.Waiting, "flanneld's lease of the node's pod subnet ("+SubnetFile+": "+err.Error()+")")
	}
	return plan, nil
}
