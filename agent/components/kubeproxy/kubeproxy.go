// Package kubeproxy is the reconcile.Component that runs kube-proxy on
// every Kubernetes node, as a unit of the node rather than kubeadm's
// DaemonSet: it uses the node's own iptables, nft and IPVS tools (the
// versions the image pins, the ones flanneld uses too), so no container
// image has to carry them, and its version is the node's kubelet's.
//
// What a node gets:
//   - /etc/harmony/kube-proxy/config.yaml: a KubeProxyConfiguration with
//     the mode the cluster spec asks (ipvs, the PRD's default; iptables;
//     nftables), the cluster's pod CIDR, the node's name, NodePorts on the
//     node's primary addresses only.
//   - kube-proxy, run as the node itself with the kubelet's credential,
//     once kubeadm has written it. The masters bind kube-proxy's ClusterRole
//     (system:node-proxier, which Kubernetes ships) to the nodes' group, so
//     that a node may read what kube-proxy watches: Services,
//     EndpointSlices and Nodes.
//
// kubeadm's own kube-proxy addon is skipped (the kubeadm component's
// SkipPhases), so only this one runs.
package kubeproxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/yaml"

	"github.com/harmonykaas/harmony/agent/components/kubeadm"
	"github.com/harmonykaas/harmony/agent/files"
	"github.com/harmonykaas/harmony/agent/kubeapi"
	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/agent/service"
	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/images/components"
)

// Name names the component and its unit.
const Name = "kube-proxy"

// Paths on the node.
const (
	ConfigDir  = "/etc/harmony/kube-proxy"
	ConfigFile = ConfigDir + "/config.yaml"
	// conntrackMaxFile is the connection-tracking table size kube-proxy
	// raises by default. The kernel lets only the first network namespace
	// write it; a node in a namespace of its own (the lab's bodies)
	// leaves it to its host.
	conntrackMaxFile = "/proc/sys/net/netfilter/nf_conntrack_max"
	// ipvsFile exists once the kernel has IPVS (modules-load.d loads it).
	ipvsFile = "/proc/net/ip_vs"
)

// proxierRole is the ClusterRole Kubernetes ships for kube-proxy, and the
// binding that gives it to every node's credential.
const (
	proxierRole    = "system:node-proxier"
	proxierBinding = "harmony:kube-proxy:nodes"
)

// Config is how the agent sets the component up. Zero fields take the
// defaults.
type Config struct {
	// Binary is kube-proxy where the image does not carry the cluster's
	// version under components.KubernetesDir; default /usr/bin/kube-proxy,
	// where the node image links Kubernetes n's.
	Binary string
	// HealthURL is kube-proxy's health endpoint; default
	// http://127.0.0.1:10256/healthz, its default.
	HealthURL string
}

// Component runs kube-proxy.
type Component struct {
	cfg Config
	// granted: this process has seen the binding exist.
	granted atomic.Bool
	mu      sync.Mutex
}

var _ reconcile.Component = (*Component)(nil)

// New returns the component.
func New(cfg Config) *Component {
	if cfg.Binary == "" {
		cfg.Binary = "/usr/bin/kube-proxy"
	}
	if cfg.HealthURL == "" {
		cfg.HealthURL = "http://127.0.0.1:10256/healthz"
	}
	return &Component{cfg: cfg}
}

// binary is the kube-proxy of the cluster's version where the image
// carries it (n and n-1: kube-proxy must not be newer than the control
// plane), else Config.Binary.
func (c *Component) binary(role *v1.Role) string {
	if v := role.KubernetesVersion(); v != "" {
		if b := components.KubernetesBinary(v, "kube-proxy"); exists(b) {
			return b
		}
	}
	return c.cfg.Binary
}

// Name implements reconcile.Component.
func (c *Component) Name() string { return Name }

// Inputs are what kubeadm writes and the component waits for; the agent
// watches them.
func (c *Component) Inputs() []string {
	return []string{kubeadm.KubeletKubeconfig, kubeadm.AdminKubeconfig}
}

// params are the role's inputs, checked.
type params struct {
	node        string
	mode        string
	clusterCIDR string
}

func newParams(role *v1.Role) (params, error) {
	p := params{node: role.NodeName, mode: role.Cluster.KubeProxyMode}
	if p.node == "" {
		return p, &v1.FieldError{Field: "nodeName", Problem: "required: kube-proxy serves the Kubernetes node of this name"}
	}
	if err := v1.ValidateKubeProxyMode("cluster.kubeProxyMode", p.mode); err != nil {
		return p, err
	}
	if p.mode == "" {
		p.mode = v1.DefaultKubeProxyMode
	}
	if role.Cluster.PodCIDR != "" {
		pod, err := netip.ParsePrefix(role.Cluster.PodCIDR)
		if err != nil || pod.Masked() != pod {
			return p, &v1.FieldError{Field: "cluster.podCIDR", Problem: fmt.Sprintf("%q is not a network in CIDR form", role.Cluster.PodCIDR)}
		}
		p.clusterCIDR = pod.String()
	}
	return p, nil
}

// Reconcile implements reconcile.Component.
func (c *Component) Reconcile(ctx context.Context, host *reconcile.Host, role *v1.Role) reconcile.Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := reconcile.Status{Component: Name}
	if role == nil {
		return st.Failed(errors.New("no role"))
	}
	if role.Role != v1.RoleMaster && role.Role != v1.RoleWorker {
		st.Phase, st.Healthy, st.Message = reconcile.PhaseConverged, true, "not a Kubernetes node"
		return st
	}
	p, err := newParams(role)
	if err != nil {
		return st.Failed(err)
	}
	// systemd-modules-load has run before the agent starts (sysinit), so
	// no IPVS now means this image's kernel will not have it: refused, so
	// that a replacement VM rolls back at once instead of timing out.
	if p.mode == v1.KubeProxyIPVS && !exists(host.Path(ipvsFile)) {
		return st.Failed(reconcile.Refuse(fmt.Errorf("cluster.kubeProxyMode: ipvs, and this kernel has no IPVS (no %s; the image loads ip_vs at boot): choose iptables or nftables in the cluster spec's network.kubeProxyMode", ipvsFile)))
	}
	data, err := render(host, p)
	if err != nil {
		return st.Failed(err)
	}
	changed, err := files.WriteOwing(host.Path(ConfigFile), data, 0o644, check, host.OweReload(Name))
	if err != nil {
		return st.Failed(fmt.Errorf("%s: %w", ConfigFile, err))
	}
	if changed {
		st.Actions = append(st.Actions, "wrote "+ConfigFile)
	}
	bin := c.binary(role)
	if !exists(bin) {
		return st.Failed(fmt.Errorf("%s is not installed; the node image carries it", bin))
	}
	// It runs as the node: not before kubeadm has given the node its
	// credential, and no longer once a reset has taken it.
	if !exists(host.Path(kubeadm.KubeletKubeconfig)) {
		actions, err := host.StopUnit(ctx, Name)
		st.Actions = append(st.Actions, actions...)
		if err != nil {
			return st.Failed(err)
		}
		st.Phase = reconcile.PhaseConverged
		st.Message = "waiting for the kubelet's credential " + kubeadm.KubeletKubeconfig + " (kubeadm writes it when the node joins), as which kube-proxy runs"
		return st
	}
	// kube-proxy retries its watches until the grant is there: a failed
	// grant is said in the status and retried on the next pass.
	var grantErr error
	if exists(host.Path(kubeadm.AdminKubeconfig)) && !c.granted.Load() {
		var actions []string
		actions, grantErr = grant(ctx, host)
		st.Actions = append(st.Actions, actions...)
		c.granted.Store(grantErr == nil)
	}
	unit := service.Unit{Name: Name, Command: []string{bin, "--config=" + host.Path(ConfigFile)}}
	actions, err := host.RunUnit(ctx, unit, false)
	st.Actions = append(st.Actions, actions...)
	if err != nil {
		return st.Failed(err)
	}
	st.Units = []string{Name}
	st.Phase = reconcile.PhaseConverged
	if s, err := host.Services.State(ctx, Name); err != nil || !s.Running {
		st.Message = "not running"
		if s.LastExit != "" {
			st.Message += " (last exit: " + s.LastExit + ")"
		}
		return st
	}
	if err := c.healthy(ctx); err != nil {
		st.Message = "running, rules not synced yet: " + err.Error()
		return st
	}
	if grantErr != nil {
		st.Message = "nodes not granted kube-proxy's access yet: " + grantErr.Error()
		return st
	}
	st.Healthy = true
	st.Message = "mode " + p.mode
	return st
}

// healthy asks kube-proxy's health endpoint, which answers 200 once its
// rules are in sync with the API.
func (c *Component) healthy(ctx context.Context) error {
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	return kubeapi.HealthCheck(ctx, client, c.cfg.HealthURL, 3*time.Second)
}

// grant binds kube-proxy's ClusterRole to every node, as the cluster
// admin of a master's admin.conf; an existing binding is left alone.
func grant(ctx context.Context, host *reconcile.Host) ([]string, error) {
	client, err := kubeapi.Open(host, kubeadm.AdminKubeconfig, nil)
	if err != nil {
		return nil, err
	}
	return client.EnsureAll(ctx, []kubeapi.Object{kubeapi.GroupBinding(proxierBinding, proxierRole, kubeapi.NodesGroup)})
}

// kube-proxy's configuration file (kubeproxy.config.k8s.io/v1alpha1),
// reduced to the fields the component sets. kube-proxy decodes it
// strictly, so a misspelt field stops it; the tests run the real binary
// on what render writes.
type configuration struct {
	APIVersion        string           `json:"apiVersion"`
	Kind              string           `json:"kind"`
	ClientConnection  clientConnection `json:"clientConnection"`
	HostnameOverride  string           `json:"hostnameOverride"`
	Mode              string           `json:"mode"`
	ClusterCIDR       string           `json:"clusterCIDR,omitempty"`
	NodePortAddresses []string         `json:"nodePortAddresses"`
	Conntrack         conntrack        `json:"conntrack"`
}

type clientConnection struct {
	Kubeconfig string `json:"kubeconfig"`
}

type conntrack struct {
	// MaxPerCore 0 leaves nf_conntrack_max as it is; nil takes
	// kube-proxy's default (32768 per core, at least 131072).
	MaxPerCore *int32 `json:"maxPerCore,omitempty"`
}

const configAPIVersion = "kubeproxy.config.k8s.io/v1alpha1"

// render is the configuration for the node.
func render(host *reconcile.Host, p params) ([]byte, error) {
	cfg := configuration{
		APIVersion:       configAPIVersion,
		Kind:             "KubeProxyConfiguration",
		ClientConnection: clientConnection{Kubeconfig: host.Path(kubeadm.KubeletKubeconfig)},
		HostnameOverride: p.node,
		Mode:             p.mode,
		ClusterCIDR:      p.clusterCIDR,
		// NodePorts answer on the node's primary addresses, not on every
		// address a pod network or a VIP adds (upstream's recommendation).
		NodePortAddresses: []string{"primary"},
	}
	if unix.Access(host.Path(conntrackMaxFile), unix.W_OK) != nil {
		zero := int32(0)
		cfg.Conntrack.MaxPerCore = &zero
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", ConfigFile, err)
	}
	return data, nil
}

// check accepts a configuration render could have written: it is the
// last guard before kube-proxy reads the file.
func check(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var cfg configuration
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		return err
	}
	switch {
	case cfg.APIVersion != configAPIVersion || cfg.Kind != "KubeProxyConfiguration":
		return fmt.Errorf("not a %s KubeProxyConfiguration", configAPIVersion)
	case cfg.HostnameOverride == "":
		return errors.New("hostnameOverride: empty")
	case cfg.ClientConnection.Kubeconfig == "":
		return errors.New("clientConnection.kubeconfig: empty")
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
