package lab

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/client"
	"github.com/harmonykaas/harmony/controller/clientconfig"
	"github.com/harmonykaas/harmony/integration/lab/body"
	"github.com/harmonykaas/harmony/internal/atomicfile"
	"github.com/harmonykaas/harmony/internal/ctxio"
	"github.com/harmonykaas/harmony/internal/kubeconfig"
	"github.com/harmonykaas/harmony/internal/vcsim"
)

// Ports on the machine's lab address (.1); the agents' is v1.AgentMetricsPort.
const (
	controllerPort = 9443
	prometheusPort = 9090
)

// kubeconfigLifetime is the lab user's kubeconfig's, the longest the
// controller issues.
const kubeconfigLifetime = 7 * 24 * time.Hour

// Up builds the lab as a user builds Harmony on vSphere, and returns once
// the cluster is ready: every node Ready and /readyz answering through
// the VIP. A lab already in StateDir is taken down first. On error the
// lab is left as it is, for its logs; Down removes it. One Up or Down at a
// time works on a state directory: another gets ErrBusy.
func Up(ctx context.Context, cfg Config) (*Summary, error) {
	if err := cfg.defaults(); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	release, err := claim(cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	defer release()
	log := cfg.Log
	sum := &Summary{Started: time.Now(), StateDir: cfg.StateDir, Cluster: ClusterName,
		Enrolled: map[string]time.Time{}, Ready: map[string]time.Time{}}
	if cfg.OVA == "" {
		ova, err := body.FindOVA(cfg.ImagesDir, "harmony-node")
		if err != nil {
			return nil, fmt.Errorf("lab: node image: %w (make images builds it)", err)
		}
		cfg.OVA = ova
	}
	if err := checkTools(cfg); err != nil {
		return nil, err
	}
	if err := down(ctx, cfg.StateDir, log); err != nil {
		return nil, fmt.Errorf("lab: remove the previous lab: %w", err)
	}
	if err := checkSubnetFree(ctx, nil, cfg.Subnet); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	created := false
	if _, err := os.Stat(cfg.StateDir); errors.Is(err, os.ErrNotExist) {
		created = true
	}
	r := newRecord(cfg.StateDir)
	r.Subnet, r.CreatedDir, r.BinDir = cfg.Subnet.String(), created, cfg.BinDir
	r.VCenterLatencyMS = cfg.VCenterLatency.Milliseconds()
	if cfg.UpgradeNodeTimeout > 0 {
		r.ControllerFlags = append(r.ControllerFlags, "--upgrade-node-timeout", cfg.UpgradeNodeTimeout.String())
	}
	for _, dir := range []string{r.logsDir(), r.credsDir()} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("lab: %w", err)
		}
	}
	// The record comes first: whatever exists after this, Down can find.
	if err := r.save(); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}

	log.Info("lab: network", "subnet", cfg.Subnet, "switch", r.Switch)
	if err := makeSwitch(ctx, r, cfg.Subnet); err != nil {
		return nil, err
	}
	// The image's root file system, ready before any VM powers on.
	log.Info("lab: node image", "ova", cfg.OVA)
	if _, err := body.PrepareImage(ctx, cfg.OVA, r.imagesDir(), log); err != nil {
		return nil, fmt.Errorf("lab: node image: %w", err)
	}
	ep, err := startServe(ctx, &cfg, r)
	if err != nil {
		return nil, err
	}
	sum.VCenter, sum.VCenterCredentials = ep.URL, r.vcenterFile()
	ctl, err := startController(ctx, &cfg, r, sum)
	if err != nil {
		return nil, err
	}

	// From here on, what a user does against a real vCenter.
	prov := ep.Provider(ProviderName, ipPool(cfg.Subnet))
	if _, err := ctl.ApplyProvider(ctx, &prov); err != nil {
		return nil, fmt.Errorf("lab: apply provider: %w", err)
	}
	img, err := importImage(ctx, cfg.OVA, cfg.Log, ctl)
	if err != nil {
		return nil, err
	}
	sum.Image = img.Name
	if err := addImage(r, img.Name, cfg.OVA); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	spec := clusterSpec(&cfg, img.Name)
	log.Info("lab: create cluster", "cluster", spec.Name, "masters", cfg.Masters, "workers", cfg.Workers, "image", img.Name)
	if _, err := ctl.CreateCluster(ctx, &spec); err != nil {
		return nil, fmt.Errorf("lab: create cluster: %w", err)
	}
	sum.Created = time.Now()
	sum.VIP = spec.VIP
	sum.APIServer = v1.APIServerURL(spec.VIP)
	sum.Kubeconfig = filepath.Join(r.credsDir(), "admin.kubeconfig")
	kc, err := ctl.Kubeconfig(ctx, ClusterName, kubeconfigLifetime)
	if err != nil {
		return nil, fmt.Errorf("lab: kubeconfig: %w", err)
	}
	if err := atomicfile.Write(sum.Kubeconfig, []byte(kc.Kubeconfig), 0o600); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	c, err := ctl.Cluster(ctx, ClusterName)
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	for _, n := range c.Status.Nodes {
		sum.Nodes = append(sum.Nodes, NodeSummary{Name: n.Name, Role: string(n.Role), IP: n.IP,
			Netns: vmNetns(r.ID, n.Name), Body: filepath.Join(r.vmDir(n.Name), bodyDirName)})
	}
	if err := startPrometheus(ctx, &cfg, r, ctl); err != nil {
		return nil, err
	}
	sum.Prometheus = "http://" + netip.AddrPortFrom(addr(cfg.Subnet, 1), prometheusPort).String()
	if err := writeJSON(filepath.Join(cfg.StateDir, "summary.json"), sum, 0o600); err != nil {
		return nil, err
	}
	waitCtx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	if err := waitReady(waitCtx, &cfg, ctl, sum, []byte(kc.Kubeconfig)); err != nil {
		return sum, fmt.Errorf("lab: cluster not ready after %s: %w (logs under %s)", cfg.Timeout, err, cfg.StateDir)
	}
	log.Info("lab: ready", "apiserver", sum.APIServer, "took", time.Since(sum.Started).Round(time.Second))
	return sum, nil
}

// checkTools fails early, naming what is missing and how to get it.
func checkTools(cfg Config) error {
	if os.Geteuid() != 0 {
		return errors.New("lab: must run as root (it makes network namespaces, mounts and containers)")
	}
	for _, p := range []struct{ path, how string }{
		{filepath.Join(cfg.BinDir, "harmony-controller"), "make build"},
		{filepath.Join(cfg.BinDir, "harmonyctl"), "make build"},
		{filepath.Join(cfg.BinDir, "vmware-rpctool"), "make build"},
		{cfg.OVA, "make images"},
	} {
		if _, err := os.Stat(p.path); err != nil {
			return fmt.Errorf("lab: %s is missing (%s makes it)", p.path, p.how)
		}
	}
	if err := checkInotify(); err != nil {
		return err
	}
	if err := checkDiskRoom(cfg.StateDir, labGrowthBytes); err != nil {
		return err
	}
	for _, tool := range []struct{ name, pkg string }{
		{"systemd-nspawn", "systemd-container"}, {"ip", "iproute2"},
		{"prometheus", "prometheus"}, {"promtool", "prometheus"},
	} {
		if _, err := exec.LookPath(tool.name); err != nil {
			return fmt.Errorf("lab: %s is missing (scripts/install-deps.sh, or apt-get install %s)", tool.name, tool.pkg)
		}
	}
	return nil
}

// The lab's VMs share the host's file system (each body's disk is an
// overlay upper directory on it), so every node's kubelet measures that
// file system, and evicts every pod once its free share falls below the
// kubelet's default imagefs.available threshold. A lab that starts
// close to it has its pods evicted in the middle of a test. Hence the
// threshold plus what a lab adds over a run (images, clones, logs: about
// 5 GiB for TestLab).
const (
	kubeletEvictionFree = 0.15
	labGrowthBytes      = 8 << 30
)

// checkDiskRoom refuses to start a lab whose nodes' kubelets would soon
// see disk pressure, with growth bytes to spare.
func checkDiskRoom(stateDir string, growth float64) error {
	dir := stateDir
	for {
		if _, err := os.Stat(dir); err == nil || dir == filepath.Dir(dir) {
			break
		}
		dir = filepath.Dir(dir)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return fmt.Errorf("lab: statfs %s: %w", dir, err)
	}
	total, free := float64(fs.Blocks)*float64(fs.Bsize), float64(fs.Bavail)*float64(fs.Bsize)
	need := total*kubeletEvictionFree + growth
	if free < need {
		const gib = 1 << 30
		return fmt.Errorf("lab: %s has %.1f GiB free of %.1f GiB; the lab's nodes share this disk, and their kubelets evict every pod below %.0f%% free (%.1f GiB): free %.1f GiB more for a lab run",
			dir, free/gib, total/gib, kubeletEvictionFree*100, total*kubeletEvictionFree/gib, (need-free)/gib)
	}
	return nil
}

// minInotifyInstances is what the lab needs of the machine's per-user
// inotify instances: every body's systemd, journald, udev, containerd
// and kubelet hold some, all as root, and the default 128 runs out at
// about six bodies; then systemd in a new body cannot start, and
// anything else on the machine that needs one fails too. kind documents
// the same limit.
const minInotifyInstances = 1024

const inotifyInstancesFile = "/proc/sys/fs/inotify/max_user_instances"

func checkInotify() error {
	data, err := os.ReadFile(inotifyInstancesFile)
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return fmt.Errorf("lab: %s: %w", inotifyInstancesFile, err)
	}
	if n < minInotifyInstances {
		return fmt.Errorf("lab: fs.inotify.max_user_instances is %d; the bodies need at least %d (scripts/install-deps.sh raises it, or sysctl -w fs.inotify.max_user_instances=%d)",
			n, minInotifyInstances, minInotifyInstances)
	}
	return nil
}

// startServe starts `harmonyctl lab serve`, the lab's vCenter and its
// bodies, and waits until vCenter answers.
func startServe(ctx context.Context, cfg *Config, r *record) (ep vcsim.Endpoint, err error) {
	proc, err := startDetached([]string{filepath.Join(cfg.BinDir, "harmonyctl"), "lab", "serve", "--state", cfg.StateDir},
		filepath.Join(r.logsDir(), "serve.log"))
	if err != nil {
		return ep, fmt.Errorf("lab: %w", err)
	}
	proc.Name = "serve"
	r.Procs = append(r.Procs, proc)
	if err := r.save(); err != nil {
		return ep, err
	}
	err = poll(ctx, time.Minute, func() error {
		if !proc.Alive() {
			return errStop{errors.New("lab serve exited; see logs/serve.log")}
		}
		ep, err = readEndpoint(r)
		return err
	})
	if err != nil {
		return ep, fmt.Errorf("lab: vCenter: %w", err)
	}
	cfg.Log.Info("lab: vCenter simulator", "url", ep.URL)
	return ep, nil
}

func startController(ctx context.Context, cfg *Config, r *record, sum *Summary) (*client.Client, error) {
	listen := controllerListen(cfg.Subnet)
	cfg.Log.Info("lab: controller", "listen", listen)
	proc, err := launchController(r, cfg.BinDir, listen)
	if err != nil {
		return nil, err
	}
	sum.Controller = "https://" + listen.String()
	sum.AdminConfig = filepath.Join(r.controllerDir(), "admin.conf")
	return waitController(ctx, proc, sum.AdminConfig)
}

func controllerListen(subnet netip.Prefix) netip.AddrPort {
	return netip.AddrPortFrom(addr(subnet, 1), controllerPort)
}

// launchController starts the lab's controller, detached, and records it
// in place of any earlier one.
func launchController(r *record, binDir string, listen netip.AddrPort) (procRecord, error) {
	argv := append([]string{filepath.Join(binDir, "harmony-controller"), "serve",
		"--data-dir", r.controllerDir(), "--listen", listen.String()}, r.ControllerFlags...)
	proc, err := startDetached(argv, filepath.Join(r.logsDir(), "controller.log"))
	if err != nil {
		return proc, fmt.Errorf("lab: %w", err)
	}
	proc.Name = "controller"
	r.Procs = slices.DeleteFunc(r.Procs, func(p procRecord) bool { return p.Name == proc.Name })
	r.Procs = append(r.Procs, proc)
	return proc, r.save()
}

// waitController waits until the controller answers its health check.
func waitController(ctx context.Context, proc procRecord, adminConfig string) (*client.Client, error) {
	var c *client.Client
	err := poll(ctx, 30*time.Second, func() error {
		if !proc.Alive() {
			return errStop{errors.New("the controller exited; see logs/controller.log")}
		}
		conf, err := clientconfig.Load(adminConfig)
		if err != nil {
			return err
		}
		if c, err = client.New(conf, ""); err != nil {
			return err
		}
		return c.Health(ctx)
	})
	if err != nil {
		return nil, fmt.Errorf("lab: controller: %w", err)
	}
	return c, nil
}

// KillController kills the lab's controller with SIGKILL, as a crash
// would, and starts it again on the same data; it returns once the new
// one answers.
func KillController(ctx context.Context, stateDir string) error {
	r, err := openLab(stateDir)
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	subnet, err := netip.ParsePrefix(r.Subnet)
	if err != nil {
		return fmt.Errorf("lab record: subnet: %w", err)
	}
	for _, p := range r.Procs {
		if p.Name != "controller" {
			continue
		}
		killAll(ctx, []int{p.PID}, 0)
		if err := poll(ctx, 30*time.Second, func() error {
			if p.Alive() {
				return fmt.Errorf("controller pid %d still running", p.PID)
			}
			return nil
		}); err != nil {
			return fmt.Errorf("lab: %w", err)
		}
	}
	proc, err := launchController(r, r.BinDir, controllerListen(subnet))
	if err != nil {
		return err
	}
	_, err = waitController(ctx, proc, filepath.Join(r.controllerDir(), "admin.conf"))
	return err
}

// importImage imports a node OVA into the lab's provider, as
// `harmonyctl image import` does, and returns the image once Ready.
func importImage(ctx context.Context, ova string, log *slog.Logger, ctl *client.Client) (*v1.Image, error) {
	f, err := os.Open(ova)
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	log.Info("lab: import image", "ova", ova, "mib", fi.Size()>>20)
	h := sha256.New()
	op, _, err := ctl.ImportImage(ctx, ProviderName, io.TeeReader(ctxio.Reader(ctx, f), h), fi.Size())
	if err != nil {
		return nil, fmt.Errorf("lab: import %s: %w", ova, err)
	}
	if op != nil {
		done, err := ctl.WaitOperation(ctx, op.ID, nil)
		if err != nil {
			return nil, fmt.Errorf("lab: import %s: %w", ova, err)
		}
		if done.State != v1.OperationSucceeded {
			return nil, fmt.Errorf("lab: import %s: %s: %s", ova, done.State, done.Message)
		}
	}
	sum := hex.EncodeToString(h.Sum(nil))
	images, err := ctl.Images(ctx, ProviderName)
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	for _, img := range images {
		if img.SHA256 == sum && img.State == v1.ImageReady {
			return &img, nil
		}
	}
	return nil, fmt.Errorf("lab: import %s: no Ready image with its SHA-256 %s", ova, sum)
}

// clusterSpec is the lab's cluster: what a user would ask for, with every
// address inside 198.18.0.0/15.
func clusterSpec(cfg *Config, image string) v1.ClusterSpec {
	masters := cfg.Masters
	return v1.ClusterSpec{
		APIVersion: v1.APIVersion, Kind: "Cluster", Name: ClusterName, Provider: ProviderName, Image: image,
		Masters: &masters, Workers: cfg.Workers, KubernetesVersion: cfg.KubernetesVersion,
		VIP:     addr(cfg.Subnet, 10).String(),
		PodCIDR: podCIDR, ServiceCIDR: serviceCIDR,
		// This machine's kernel has no IPVS, the PRD's (and the spec's
		// default) mode: the lab asks for iptables, as a user with such a
		// kernel would.
		Network: &v1.NetworkSpec{KubeProxyMode: v1.KubeProxyIPTables},
		// The bodies share this machine: a data disk's size is only a
		// number in vCenter, but keep it plausible.
		MasterDataDiskGiB: 2,
	}
}

// waitReady waits until the controller calls the cluster Running with
// every node Ready, and /readyz answers through the VIP.
func waitReady(ctx context.Context, cfg *Config, ctl *client.Client, sum *Summary, kc []byte) error {
	conf, err := kubeconfig.Parse(kc)
	if err != nil {
		return err
	}
	tlsConf, err := conf.TLSConfig()
	if err != nil {
		return err
	}
	readyz := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConf}}
	var last []any
	for {
		c, cerr := ctl.Cluster(ctx, ClusterName)
		nodes, nerr := ctl.Nodes(ctx)
		err := errors.Join(cerr, nerr)
		if err == nil {
			now := time.Now()
			for _, n := range c.Status.Nodes {
				switch n.Phase {
				case "Ready":
					if _, ok := sum.Ready[n.Name]; !ok {
						sum.Ready[n.Name] = now
					}
					fallthrough
				case "Enrolled":
					if _, ok := sum.Enrolled[n.Name]; !ok {
						sum.Enrolled[n.Name] = now
					}
				}
			}
			if view := []any{c.Status, nodes}; cfg.Progress != nil && !reflect.DeepEqual(view, last) {
				cfg.Progress(c, nodes)
				last = view
			}
			err = clusterReady(c)
			if err == nil {
				err = readyzOK(ctx, readyz, sum.APIServer)
			}
			if err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Second):
		}
	}
}

func clusterReady(c *v1.Cluster) error {
	if c.Status.Phase != v1.PhaseRunning {
		return fmt.Errorf("cluster %s is %s", c.Spec.Name, c.Status.Phase)
	}
	for _, cond := range c.Status.Conditions {
		// Ready agents, and Ready Kubernetes Nodes: the lab ends with a
		// cluster that runs pods.
		if (cond.Type == v1.ConditionNodesReady || cond.Type == v1.ConditionKubernetesNodesReady) && cond.Status != "True" {
			return fmt.Errorf("cluster %s: %s", c.Spec.Name, cond.Message)
		}
	}
	return nil
}

func readyzOK(ctx context.Context, hc *http.Client, apiserver string) error {
	req, err := http.NewRequestWithContext(ctx, "GET", apiserver+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
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
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(path, data, perm)
}
