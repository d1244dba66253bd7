// Package kubeadm is the reconcile.Component that makes a node a
// Kubernetes master or worker with kubeadm, against the agent-managed etcd
// (external etcd, https://127.0.0.1:2379) and the cluster CAs the role
// carries.
//
// Every master has the same CAs, so each runs kubeadm's local phases
// itself (certs, kubeconfig, control-plane); kubeadm makes the leaf
// certificates and keeps valid ones. The first master (lowest rank) also
// runs the cluster-wide phases once its apiserver answers. Where what
// runs depends on the host:
//
//	                     host with a kubelet (a VM)            lab (no kubelet)
//	first master         local phases; kubelet-start once;     local phases; kube-apiserver
//	                     then upload-config, bootstrap-token,  from its manifest as a unit;
//	                     addon, mark-control-plane,            then upload-config,
//	                     kubelet-finalize                      bootstrap-token, addon
//	other master         kubeadm join (control plane) once,    local phases; kube-apiserver
//	                     then local phases                     as a unit
//	worker               kubeadm join once                     join.yaml validated only
//
// With no kubelet (Config.StandInForKubelet) the component reads the
// kube-apiserver static-pod manifest kubeadm wrote and runs its command as
// the "kube-apiserver" unit: it stands in for the kubelet, for the
// apiserver only.
package kubeadm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/harmonykaas/harmony/agent/files"
	"github.com/harmonykaas/harmony/agent/reconcile"
	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/images/components"
)

// Name names the component.
const Name = "kubeadm"

// APIServerUnit is the unit that stands in for the kubelet's apiserver pod.
const APIServerUnit = "kube-apiserver"

// Paths on the node (under reconcile.Host.Root). kubeadm's own are fixed
// by kubeadm.
const (
	ConfigDir       = "/etc/harmony/kubeadm"
	InitConfigFile  = ConfigDir + "/init.yaml"
	JoinConfigFile  = ConfigDir + "/join.yaml"
	LocalKubeconfig = ConfigDir + "/local-admin.conf"
	PatchesDir      = ConfigDir + "/patches"
	// KubeletPatchFile is kubeadm's name for a merge patch of the
	// KubeletConfiguration.
	KubeletPatchFile = PatchesDir + "/kubeletconfiguration+merge.yaml"
	StateDir         = "/var/lib/harmony/kubeadm"

	KubernetesDir         = "/etc/kubernetes"
	PKIDir                = KubernetesDir + "/pki"
	ManifestsDir          = KubernetesDir + "/manifests"
	APIServerManifest     = ManifestsDir + "/kube-apiserver.yaml"
	KubeletKubeconfig     = KubernetesDir + "/kubelet.conf"
	AdminKubeconfig       = KubernetesDir + "/admin.conf"
	SuperAdminKubeconfig  = KubernetesDir + "/super-admin.conf"
	CACertFile            = PKIDir + "/ca.crt"
	CAKeyFile             = PKIDir + "/ca.key"
	FrontProxyCACertFile  = PKIDir + "/front-proxy-ca.crt"
	FrontProxyCAKeyFile   = PKIDir + "/front-proxy-ca.key"
	ServiceAccountKeyFile = PKIDir + "/sa.key"
	ServiceAccountPubFile = PKIDir + "/sa.pub"
	EtcdCAFile            = PKIDir + "/etcd/ca.crt"
	EtcdClientCertFile    = PKIDir + "/apiserver-etcd-client.crt"
	EtcdClientKeyFile     = PKIDir + "/apiserver-etcd-client.key"
	// KubeletConfigFile is written by kubelet-start; the first master's
	// marker that its kubelet was started.
	KubeletConfigFile = "/var/lib/kubelet/config.yaml"

	// EtcdEndpoint is the local agent-managed etcd member.
	EtcdEndpoint = "https://127.0.0.1:2379"
)

// Ports: the apiserver on every master, HAProxy on the VIP.
const (
	apiServerPort = 6443
	frontendPort  = v1.APIServerPort
)

// Config is how the agent, or the lab, sets the component up. Zero fields
// take the defaults.
type Config struct {
	// Binary is kubeadm; default /usr/bin/kubeadm.
	Binary string
	// Systemctl starts and stops the kubelet's unit, which is not one of
	// the agent's (kubeadm starts it with the systemctl on PATH); default
	// /usr/bin/systemctl.
	Systemctl string
	// APIServerBinary runs in place of the manifest's image when standing
	// in for the kubelet; default /usr/bin/kube-apiserver.
	APIServerBinary string
	// StandInForKubelet: this host has no kubelet (the lab), so the
	// component runs the kube-apiserver static pod as a unit.
	StandInForKubelet bool
	// Kubelet: a kubelet (and container runtime) exists on this host, so
	// the node really joins.
	Kubelet bool
	// KubeletHealthURL is the kubelet's health endpoint, asked where
	// Kubelet is set; default http://127.0.0.1:10248/healthz (the
	// kubelet's default, which kubeadm keeps).
	KubeletHealthURL string
	// DialContext reaches the local apiserver (/readyz, and the first
	// master's one API call) and the kubelet; a plain dialer when nil. Tests use it to
	// reach an apiserver inside a network namespace.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// Command builds every kubeadm command; exec.CommandContext when nil.
	// Tests use it to run kubeadm inside a network namespace.
	Command func(ctx context.Context, argv []string) *exec.Cmd
	// Unconfined wraps a kubeadm command that needs more than the agent's
	// sandbox allows: reset unmounts the kubelet's pod volumes, which takes
	// CAP_SYS_ADMIN in the node's own mount namespace. The wrapped command
	// must end within maxRuntime even if the agent is killed meanwhile.
	// nil runs it like every other command (tests, and a host with no
	// sandbox).
	Unconfined func(argv []string, maxRuntime time.Duration) []string
	// CommandTimeout bounds one kubeadm run; default 5m (a join waits for
	// discovery and the kubelet's TLS bootstrap).
	CommandTimeout time.Duration
	// EtcdRestored is the newest etcd restore the local etcd member took
	// part in (the etcd component's Restored), run before this component
	// in a pass; nil: none ever. Each new one restarts the control plane
	// (EtcdRestoredEnv).
	EtcdRestored func() string
	// ImagesDir holds the container images the node image carries, and
	// ImagesImported is the stamp its first-boot unit leaves once
	// containerd has them (both node paths). While the directory holds an
	// image and the stamp is missing, the runs that start the kubelet
	// (join, kubelet-start) wait: kubeadm's image preflight would fail,
	// and the kubelet could not run a static pod yet. Empty: no wait.
	ImagesDir, ImagesImported string
}

// Component converges kubeadm. It is also a prometheus.Collector.
type Component struct {
	cfg Config

	// mu serializes passes: two at once would race on the files.
	mu sync.Mutex
	// version is kubeadm's, asked once per binary.
	version, versionOf string
	// standInLogged: the stand-in is announced once, not every pass.
	standInLogged bool

	metrics metricsState
	// node is the last observation of the Kubernetes Node.
	node atomic.Pointer[v1.KubernetesNodeStatus]
}

var (
	_ reconcile.Component  = (*Component)(nil)
	_ prometheus.Collector = (*Component)(nil)
)

// New returns the component, with defaults filled into cfg.
func New(cfg Config) *Component {
	if cfg.Binary == "" {
		cfg.Binary = "/usr/bin/kubeadm"
	}
	if cfg.APIServerBinary == "" {
		cfg.APIServerBinary = "/usr/bin/kube-apiserver"
	}
	if cfg.Systemctl == "" {
		cfg.Systemctl = "/usr/bin/systemctl"
	}
	if cfg.Command == nil {
		cfg.Command = func(ctx context.Context, argv []string) *exec.Cmd {
			return exec.CommandContext(ctx, argv[0], argv[1:]...)
		}
	}
	if cfg.KubeletHealthURL == "" {
		cfg.KubeletHealthURL = "http://127.0.0.1:10248/healthz"
	}
	if cfg.CommandTimeout == 0 {
		cfg.CommandTimeout = 5 * time.Minute
	}
	return &Component{cfg: cfg, metrics: newMetricsState()}
}

// Name implements reconcile.Component.
func (c *Component) Name() string { return Name }

// Inputs are the node paths that another program writes and a pass
// reads: the agent watches them, so the join follows the import at once.
func (c *Component) Inputs() []string {
	if c.cfg.ImagesImported == "" {
		return nil
	}
	return []string{c.cfg.ImagesImported}
}

// imagesPending says what the kubelet's first start waits for, or "".
func (c *Component) imagesPending(host *reconcile.Host) string {
	if c.cfg.ImagesImported == "" || exists(host.Path(c.cfg.ImagesImported)) {
		return ""
	}
	tars, err := filepath.Glob(host.Path(filepath.Join(c.cfg.ImagesDir, "*.tar")))
	if err != nil || len(tars) == 0 {
		return ""
	}
	return fmt.Sprintf("waiting for the first-boot import of the node image's %d container image archives (%s)", len(tars), c.cfg.ImagesImported)
}

func (c *Component) checkConfig() error {
	for _, b := range []struct{ name, path string }{{"Binary", c.cfg.Binary}, {"APIServerBinary", c.cfg.APIServerBinary}, {"Systemctl", c.cfg.Systemctl}} {
		if !filepath.IsAbs(b.path) {
			return fmt.Errorf("kubeadm component: %s %q is not an absolute path", b.name, b.path)
		}
	}
	if c.cfg.StandInForKubelet && c.cfg.Kubelet {
		return errors.New("kubeadm component: StandInForKubelet and Kubelet both set; a host with a kubelet needs no stand-in")
	}
	return nil
}

// Reconcile implements reconcile.Component.
func (c *Component) Reconcile(ctx context.Context, host *reconcile.Host, role *v1.Role) reconcile.Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := reconcile.Status{Component: Name}
	if err := c.checkConfig(); err != nil {
		return st.Failed(err)
	}
	if role == nil || (role.Role != v1.RoleMaster && role.Role != v1.RoleWorker) {
		c.metrics.clear()
		return c.disable(ctx, host, st, "not a Kubernetes node")
	}
	version, err := c.kubeadmVersion(ctx)
	if err != nil {
		return st.Failed(err)
	}
	p, err := newPlan(role, host.Facts.Addresses, frontendPort, version)
	if err != nil {
		return c.fail(ctx, host, st, err)
	}
	if p.master && c.cfg.EtcdRestored != nil {
		p.etcdRestored = c.cfg.EtcdRestored()
	}
	if c.cfg.Kubelet {
		if err := useClusterKubelet(host, p.version, &st); err != nil {
			return c.fail(ctx, host, st, err)
		}
	}
	if p.master {
		st = c.reconcileMaster(ctx, host, role, p, st)
	} else {
		st = c.reconcileWorker(ctx, host, p, st)
	}
	if c.cfg.Kubelet && exists(host.Path(KubeletKubeconfig)) {
		if n, err := c.observeNode(ctx, host, role.NodeName); err != nil {
			st.Message += "; Node not read: " + err.Error()
		} else {
			st.Message += "; " + nodeSummary(n)
		}
	}
	return st
}

// reconcileWorker renders and validates the JoinConfiguration, and joins
// once where a kubelet exists.
func (c *Component) reconcileWorker(ctx context.Context, host *reconcile.Host, p *plan, st reconcile.Status) reconcile.Status {
	c.metrics.clear()
	// A node that was a master in the lab may still run the stand-in.
	actions, err := host.StopUnit(ctx, APIServerUnit)
	if err != nil {
		return c.fail(ctx, host, st, err)
	}
	st.Actions = append(st.Actions, actions...)
	join, err := renderJoin(p, apiServerPort)
	if err != nil {
		return c.fail(ctx, host, st, err)
	}
	if err := c.writeConfig(ctx, host, JoinConfigFile, join, p.token, &st); err != nil {
		return c.fail(ctx, host, st, err)
	}
	if err := writePatches(host, p, &st); err != nil {
		return c.fail(ctx, host, st, err)
	}
	// Left from a time as a master; it may hold the bootstrap token.
	if err := removeFile(host, InitConfigFile, &st); err != nil {
		return c.fail(ctx, host, st, err)
	}
	st.Phase = reconcile.PhaseConverged
	if !c.cfg.Kubelet {
		st.Healthy = true
		st.Message = "join configuration validated; no kubelet on this host, so it does not join"
		return st
	}
	st.Message = "joined (" + KubeletKubeconfig + " exists)"
	if !exists(host.Path(KubeletKubeconfig)) {
		if wait := c.imagesPending(host); wait != "" {
			st.Message = wait
			return st
		}
		if _, err := c.kubeadm(ctx, host, p.token, "join", "--config", JoinConfigFile); err != nil {
			return c.fail(ctx, host, st, err)
		}
		st.Actions = append(st.Actions, "ran kubeadm join")
		st.Message = "joined"
	}
	if err := c.kubeletHealthy(ctx); err != nil {
		st.Message += "; " + err.Error()
		return st
	}
	st.Healthy = true
	st.Message += "; kubelet healthy"
	return st
}

// disable stops the stand-in apiserver, asking the manager rather than
// remembering, so that a unit left by an earlier agent stops too.
func (c *Component) disable(ctx context.Context, host *reconcile.Host, st reconcile.Status, why string) reconcile.Status {
	st.Phase = reconcile.PhaseDisabled
	st.Healthy = true
	st.Message = why
	actions, err := host.StopUnit(ctx, APIServerUnit)
	if err != nil {
		return st.Failed(err)
	}
	st.Actions = actions
	return st
}

// writePatches writes the node's kubeadm patches before the configuration
// that names their directory, and removes one the role no longer asks for.
func writePatches(host *reconcile.Host, p *plan, st *reconcile.Status) error {
	data, err := kubeletPatch(p)
	if err != nil {
		return err
	}
	if data == nil {
		return removeFile(host, KubeletPatchFile, st)
	}
	if err := os.MkdirAll(host.Path(PatchesDir), 0o700); err != nil {
		return err
	}
	changed, err := files.Write(host.Path(KubeletPatchFile), data, 0o600, nil)
	if changed {
		st.Actions = append(st.Actions, "wrote "+KubeletPatchFile)
	}
	return err
}

// writeConfig writes a kubeadm configuration (0600: it may hold the
// bootstrap token) only after `kubeadm config validate` accepts it.
func (c *Component) writeConfig(ctx context.Context, host *reconcile.Host, nodePath string, data []byte, secret string, st *reconcile.Status) error {
	changed, err := files.Write(host.Path(nodePath), data, 0o600, func(candidate string) error {
		_, err := c.run(ctx, []string{c.cfg.Binary, "config", "validate", "--config", candidate}, secret)
		return err
	})
	if err != nil {
		var ve *files.ValidationError
		if errors.As(err, &ve) {
			return fmt.Errorf("new %s refused by kubeadm, the old one stays: %w", nodePath, ve.Err)
		}
		return err
	}
	if changed {
		st.Actions = append(st.Actions, "wrote "+nodePath)
	}
	return nil
}

// fail reports Failed; what ran before keeps running, and Healthy says
// whether the stand-in apiserver still runs.
func (c *Component) fail(ctx context.Context, host *reconcile.Host, st reconcile.Status, err error) reconcile.Status {
	st = st.Failed(err)
	if c.cfg.StandInForKubelet {
		if s, err := host.Services.State(ctx, APIServerUnit); err == nil {
			st.Healthy = s.Running
			st.Units = []string{APIServerUnit}
		}
	}
	return st
}

// kubeadmVersion is kubeadm's version ("v1.34.2"): the default
// kubernetesVersion, and part of what the phase records depend on. On a
// node image the binary is a link into the image's layout, whose directory
// names the version; elsewhere the binary is asked, once. Asking means
// starting the multi-call Kubernetes binary, which took 15 s of a first
// boot under TCG, beside the image import.
func (c *Component) kubeadmVersion(ctx context.Context) (string, error) {
	if c.versionOf == c.cfg.Binary && c.version != "" {
		return c.version, nil
	}
	if target, err := os.Readlink(c.cfg.Binary); err == nil {
		if v, ok := components.KubernetesVersionAt(target); ok {
			c.version, c.versionOf = v, c.cfg.Binary
			return v, nil
		}
	}
	out, err := c.run(ctx, []string{c.cfg.Binary, "version", "-o", "short"}, "")
	if err != nil {
		return "", err
	}
	v := strings.TrimSpace(out)
	if !strings.HasPrefix(v, "v") || strings.ContainsAny(v, " \n") {
		return "", fmt.Errorf("kubeadm version: unexpected answer %q", v)
	}
	c.version, c.versionOf = v, c.cfg.Binary
	return v, nil
}
