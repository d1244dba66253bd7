package lab

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/client"
	"github.com/harmonykaas/harmony/controller/clientconfig"
	"github.com/harmonykaas/harmony/internal/atomicfile"
)

// Ports on the machine's lab address (.1) and on each host.
const (
	controllerPort  = 9443
	prometheusPort  = 9090
	agentMetricPort = 9101
)

// hostRoot is a host's root directory: what / is to a real VM's agent.
func hostRoot(stateDir, name string) string { return filepath.Join(stateDir, "hosts", name) }

// Up builds the lab and waits until it has converged: every agent
// enrolled and Ready, and the apiserver answering /readyz through the
// VIP. A lab already in StateDir is taken down first, so Up twice works.
// On error the lab is left as it is, for its logs; Down removes it.
func Up(ctx context.Context, cfg Config) (*Summary, error) {
	if err := cfg.defaults(); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	log := cfg.Log
	if err := checkTools(cfg); err != nil {
		return nil, err
	}
	if err := Down(ctx, cfg.StateDir, log); err != nil {
		return nil, fmt.Errorf("lab: remove the previous lab: %w", err)
	}
	created := false
	if _, err := os.Stat(cfg.StateDir); errors.Is(err, os.ErrNotExist) {
		created = true
	}
	if err := os.MkdirAll(filepath.Join(cfg.StateDir, "logs"), 0o700); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	r := newRecord(cfg.StateDir)
	r.Subnet, r.CreatedDir = cfg.Subnet.String(), created
	r.BinDir, r.KubernetesBinDir = cfg.BinDir, cfg.KubernetesBinDir
	r.Hosts = plan(&cfg, r)
	// The record comes first: whatever exists after this, Down can find.
	if err := r.save(); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}

	log.Info("lab: network", "subnet", cfg.Subnet, "switch", r.Switch, "hosts", len(r.Hosts))
	if err := makeSwitch(ctx, r, cfg.Subnet); err != nil {
		return nil, err
	}
	for _, h := range r.Hosts {
		if err := makeHost(ctx, r, h, cfg.Subnet); err != nil {
			return nil, err
		}
	}

	ctl, err := startController(ctx, &cfg, r)
	if err != nil {
		return nil, err
	}
	k8sVersion, err := kubernetesVersion(ctx, cfg.KubernetesBinDir)
	if err != nil {
		return nil, err
	}
	p, err := clusterPKI()
	if err != nil {
		return nil, err
	}
	log.Info("lab: nodes and roles", "kubernetes", k8sVersion)
	for _, h := range r.Hosts {
		var res v1.NodeWithBootstrap
		spec := v1.NodeSpec{Name: h.Name, Cluster: clusterName, Role: v1.NodeRole(h.Role), IPs: []string{h.IP}}
		if err := ctl.Do(ctx, "POST", v1.PathNodes, spec, &res); err != nil {
			return nil, fmt.Errorf("lab: add node %s: %w", h.Name, err)
		}
		if err := writeJSON(filepath.Join(h.Root, "etc", "harmony", "bootstrap.json"), res.Bootstrap, 0o600); err != nil {
			return nil, err
		}
	}
	rs, err := roles(&cfg, r.Hosts, p, k8sVersion)
	if err != nil {
		return nil, err
	}
	if err := ctl.Do(ctx, "PUT", v1.PathRoles, v1.RoleList{Items: rs}, nil); err != nil {
		return nil, fmt.Errorf("lab: set roles: %w", err)
	}

	if err := startPrometheus(ctx, &cfg, r, ctl); err != nil {
		return nil, err
	}
	sum, err := summarize(&cfg, r, p)
	if err != nil {
		return nil, err
	}
	sum.AgentsStarted = time.Now()
	for _, h := range r.Hosts {
		if err := startAgent(r, h); err != nil {
			return nil, err
		}
	}
	if err := writeJSON(filepath.Join(cfg.StateDir, "summary.json"), sum, 0o600); err != nil {
		return nil, err
	}
	waitCtx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	if err := waitConverged(waitCtx, log, ctl, r, sum); err != nil {
		return sum, fmt.Errorf("lab: not converged after %s: %w (logs under %s)", cfg.Timeout, err, cfg.StateDir)
	}
	log.Info("lab: converged", "apiserver", sum.APIServer)
	return sum, nil
}

// checkTools fails early, naming what is missing.
func checkTools(cfg Config) error {
	need := []string{
		filepath.Join(cfg.BinDir, "harmony-agent"), filepath.Join(cfg.BinDir, "harmony-controller"),
		filepath.Join(cfg.KubernetesBinDir, "kubeadm"), filepath.Join(cfg.KubernetesBinDir, "kube-apiserver"),
		"/usr/sbin/keepalived", "/usr/sbin/haproxy", "/usr/bin/etcd", "/usr/bin/prometheus",
	}
	for _, p := range need {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("lab: %s is missing (scripts/install-deps.sh installs the daemons, make build and make kubernetes the binaries)", p)
		}
	}
	if os.Geteuid() != 0 {
		return errors.New("lab: must run as root (it makes network namespaces)")
	}
	return nil
}

func startController(ctx context.Context, cfg *Config, r *record) (*client.Client, error) {
	dataDir := filepath.Join(cfg.StateDir, "controller")
	listen := netip.AddrPortFrom(addr(cfg.Subnet, 1), controllerPort).String()
	cfg.Log.Info("lab: controller", "listen", listen)
	proc, err := startDetached([]string{filepath.Join(cfg.BinDir, "harmony-controller"), "serve",
		"--data-dir", dataDir, "--listen", listen}, filepath.Join(cfg.StateDir, "logs", "controller.log"))
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	proc.Name = "controller"
	r.Procs = append(r.Procs, proc)
	if err := r.save(); err != nil {
		return nil, err
	}
	adminConf := filepath.Join(dataDir, "admin.conf")
	var c *client.Client
	err = poll(ctx, 30*time.Second, func() error {
		if !proc.Alive() {
			return errStop{errors.New("the controller exited; see logs/controller.log")}
		}
		conf, err := clientconfig.Load(adminConf)
		if err != nil {
			return err
		}
		if c, err = client.New(conf, ""); err != nil {
			return err
		}
		return c.Do(ctx, "GET", v1.PathNodes, nil, nil)
	})
	if err != nil {
		return nil, fmt.Errorf("lab: controller: %w", err)
	}
	return c, nil
}

func startAgent(r *record, h hostRecord) error {
	argv := []string{"ip", "netns", "exec", h.Netns,
		filepath.Join(r.BinDir, "harmony-agent"),
		"--no-guestinfo",
		"--bootstrap-file", filepath.Join(h.Root, "etc", "harmony", "bootstrap.json"),
		"--state-dir", filepath.Join(h.Root, "var", "lib", "harmony"),
		"--address", h.IP,
		"--metrics-listen", netip.AddrPortFrom(netip.MustParseAddr(h.IP), agentMetricPort).String(),
		"--node-stack", "--root", h.Root,
		"--stand-in-for-kubelet",
		"--kubeadm", filepath.Join(r.KubernetesBinDir, "kubeadm"),
		"--kube-apiserver", filepath.Join(r.KubernetesBinDir, "kube-apiserver"),
		"--reconcile-interval", "5s",
	}
	if err := os.MkdirAll(filepath.Join(h.Root, "var", "log", "harmony"), 0o755); err != nil {
		return err
	}
	// The agent's PID is found again through its namespace, like every
	// process of the host.
	if _, err := startDetached(argv, filepath.Join(h.Root, "var", "log", "harmony", "agent.log")); err != nil {
		return fmt.Errorf("lab: agent on %s: %w", h.Name, err)
	}
	return nil
}

func kubernetesVersion(ctx context.Context, binDir string) (string, error) {
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "kubeadm"), "version", "-o", "short").Output()
	if err != nil {
		return "", fmt.Errorf("lab: kubeadm version: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// summarize issues the lab user's credentials and says where everything is.
func summarize(cfg *Config, r *record, p *v1.ClusterPKI) (*Summary, error) {
	credDir := filepath.Join(cfg.StateDir, "credentials")
	etcdCred, err := clientCert(p.EtcdCA, filepath.Join(credDir, "etcd"), "lab-etcd-client")
	if err != nil {
		return nil, err
	}
	admin, err := clientCert(p.ClusterCA, filepath.Join(credDir, "kubernetes"), "lab-admin", "system:masters")
	if err != nil {
		return nil, err
	}
	v := vip(cfg.Subnet)
	sum := &Summary{
		VIP:        v.String(),
		APIServer:  "https://" + netip.AddrPortFrom(v, 8443).String(),
		Kubeconfig: filepath.Join(credDir, "admin.kubeconfig"),
		Etcd:       EtcdSummary{CA: etcdCred.CA, Cert: etcdCred.Cert, Key: etcdCred.Key},
		Controller: "https://" + netip.AddrPortFrom(addr(cfg.Subnet, 1), controllerPort).String(),
		Prometheus: "http://" + netip.AddrPortFrom(addr(cfg.Subnet, 1), prometheusPort).String(),
		StateDir:   cfg.StateDir,
	}
	if err := writeKubeconfig(sum.Kubeconfig, sum.APIServer, admin); err != nil {
		return nil, err
	}
	for _, h := range r.Hosts {
		sum.Hosts = append(sum.Hosts, HostSummary{Name: h.Name, Netns: h.Netns, IP: h.IP, Role: h.Role, Root: h.Root})
		if h.Role == string(v1.RoleMaster) {
			sum.Etcd.Endpoints = append(sum.Etcd.Endpoints, "https://"+netip.AddrPortFrom(netip.MustParseAddr(h.IP), 2379).String())
		}
	}
	return sum, nil
}

// waitConverged waits until every node reports Ready and the apiserver
// answers /readyz through the VIP, logging each node's progress.
func waitConverged(ctx context.Context, log interface{ Info(string, ...any) }, ctl *client.Client, r *record, sum *Summary) error {
	ca, err := os.ReadFile(filepath.Join(filepath.Dir(sum.Kubeconfig), "kubernetes", "ca.crt"))
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	readyz := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	seen := map[string]string{}
	sum.Ready = map[string]time.Time{}
	var last error
	for {
		last = converged(ctx, ctl, readyz, sum, func(node, state string) {
			if seen[node] != state {
				seen[node] = state
				log.Info("lab: node", "node", node, "state", state)
			}
			if _, ok := sum.Ready[node]; !ok && state == string(v1.PhaseReady) {
				sum.Ready[node] = time.Now()
			}
		})
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return last
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func converged(ctx context.Context, ctl *client.Client, readyz *http.Client, sum *Summary, report func(node, state string)) error {
	var nodes v1.NodeList
	if err := ctl.Do(ctx, "GET", v1.PathNodes, nil, &nodes); err != nil {
		return err
	}
	var notReady []string
	for _, n := range nodes.Items {
		state := "waiting for enrollment"
		if n.Status != nil {
			state = string(n.Status.Phase)
			for _, c := range n.Status.Components {
				if !c.Healthy {
					state += fmt.Sprintf(", %s: %s", c.Name, c.Message)
				}
			}
		}
		report(n.Name, state)
		if n.Status == nil || n.Status.Phase != v1.PhaseReady {
			notReady = append(notReady, n.Name)
		}
	}
	if len(notReady) > 0 {
		return fmt.Errorf("nodes not ready: %s", strings.Join(notReady, ", "))
	}
	req, err := http.NewRequestWithContext(ctx, "GET", sum.APIServer+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := readyz.Do(req)
	if err != nil {
		return fmt.Errorf("readyz through the VIP: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("readyz through the VIP: %s", resp.Status)
	}
	return nil
}

// errStop ends a poll early.
type errStop struct{ error }

// poll calls f until it succeeds, returns errStop, or timeout passes.
func poll(ctx context.Context, timeout time.Duration, f func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		err := f()
		var stop errStop
		if err == nil || errors.As(err, &stop) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func writeJSON(path string, v any, perm os.FileMode) error {
	data, err := jsonIndent(v)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, data, perm)
}
