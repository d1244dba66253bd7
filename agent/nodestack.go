package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/harmonykaas/harmony/agent/components/cni"
	"github.com/harmonykaas/harmony/agent/components/etcd"
	"github.com/harmonykaas/harmony/agent/components/haproxy"
	"github.com/harmonykaas/harmony/agent/components/keepalived"
	"github.com/harmonykaas/harmony/agent/components/kubeadm"
	"github.com/harmonykaas/harmony/agent/components/kubeproxy"
	"github.com/harmonykaas/harmony/agent/components/network"
	"github.com/harmonykaas/harmony/agent/controlclient"
	"github.com/harmonykaas/harmony/agent/netinfo"
	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/agent/service"
	v1 "github.com/harmonykaas/harmony/api/v1"
	imagecomponents "github.com/harmonykaas/harmony/images/components"
)

// nodeStack acts on the role: it feeds each new role to the reconcile
// runner and keeps the components' latest statuses for the status report.
type nodeStack struct {
	root     string
	services service.Manager
	runner   *reconcile.Runner
	// members are the components that know the local etcd member.
	members []etcdMember
	// nodes are the components that observe the Kubernetes Node.
	nodes []interface {
		KubernetesNode() *v1.KubernetesNodeStatus
	}
	// inputs are files other programs on the node write that components
	// read, as host paths; a change kicks a pass.
	inputs []string
	roles  chan v1.Role
	// closeServices lets the units run on when the agent stops; nil for a
	// manager the caller owns.
	closeServices func() error

	mu       sync.Mutex
	statuses []reconcile.Status
	// leaving: the statuses are of the leave sequence (the role says
	// Leave).
	leaving bool
	// passStarted is when the running pass began; zero between passes.
	passStarted time.Time
}

// maxPass is longer than any pass may take (a kubeadm command is bounded
// at 5 minutes, etcd's promotion wait at 30 s).
const maxPass = 15 * time.Minute

// alive fails while one pass has run longer than maxPass.
func (ns *nodeStack) alive(now time.Time) error {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if !ns.passStarted.IsZero() && now.Sub(ns.passStarted) > maxPass {
		return fmt.Errorf("a reconcile pass has run since %s", ns.passStarted.Format(time.RFC3339))
	}
	return nil
}

// newNodeStack builds the host, the service manager and the components.
func (a *Agent) newNodeStack() (*nodeStack, error) {
	root := a.cfg.Root
	if root == "" {
		root = "/"
	}
	services := a.cfg.Services
	var closeServices func() error
	if services == nil {
		supCfg := service.SupervisorConfig{
			RunDir: filepath.Join(root, "run", "harmony", "services"),
			LogDir: filepath.Join(root, "var", "log", "harmony"),
			Logger: a.log.With("manager", "supervisor"),
		}
		if root != "/" {
			// A prefixed root is a lab host: its daemons belong to its
			// network namespace, never to the machine's systemd.
			sup, err := service.NewSupervisor(supCfg)
			if err != nil {
				return nil, fmt.Errorf("service supervisor: %w", err)
			}
			services, closeServices = sup, sup.Close
		} else {
			// Found while the agent enrolls; the first pass waits for it.
			pending := service.DetectInBackground(supCfg, a.log, 30*time.Second)
			services, closeServices = pending, pending.Close
		}
	}

	// A failure below releases the manager made above.
	built := false
	defer func() {
		if !built && closeServices != nil {
			closeServices()
		}
	}()

	facts := func(ctx context.Context) (reconcile.Facts, error) {
		link, err := netinfo.PrimaryLink(ctx)
		if err != nil {
			return reconcile.Facts{}, err
		}
		return reconcile.Facts{Interface: link.Name, Addresses: link.Addresses}, nil
	}
	initial, err := facts(context.Background())
	if err != nil {
		a.log.Warn("no primary interface yet; components that need one fail until it appears", "err", err)
	}
	components := a.cfg.Components
	var leavers []reconcile.Leaver // nil: the runner's default order
	if components == nil {
		if components, leavers, err = a.defaultComponents(root); err != nil {
			return nil, err
		}
	}
	ns := &nodeStack{root: root, services: services, roles: make(chan v1.Role, 1), closeServices: closeServices}
	for _, c := range components {
		if m, ok := c.(etcdMember); ok {
			ns.members = append(ns.members, m)
		}
		if n, ok := c.(interface {
			KubernetesNode() *v1.KubernetesNodeStatus
		}); ok {
			ns.nodes = append(ns.nodes, n)
		}
		if in, ok := c.(interface{ Inputs() []string }); ok {
			for _, p := range in.Inputs() {
				ns.inputs = append(ns.inputs, filepath.Join(root, p))
			}
		}
	}
	runner, err := reconcile.NewRunner(reconcile.RunnerConfig{
		Host:       &reconcile.Host{Root: root, Services: services, Facts: initial, Log: a.log},
		Components: components,
		Leavers:    leavers,
		Interval:   a.cfg.ReconcileInterval,
		Facts:      facts,
		Registerer: a.metrics.Registry,
		OnPass: func() {
			ns.mu.Lock()
			ns.passStarted = time.Now()
			ns.mu.Unlock()
		},
		OnStatus: func(role *v1.Role, statuses []reconcile.Status) {
			ns.mu.Lock()
			ns.statuses = statuses
			ns.leaving = role.Leave != nil
			ns.passStarted = time.Time{}
			ns.mu.Unlock()
			a.reportStatusSoon()
			a.ready("node stack reconciled")
		},
	})
	if err != nil {
		return nil, err
	}
	ns.runner = runner
	built = true
	return ns, nil
}

// defaultComponents is the node stack, in the order a pass runs it: the
// network first (sysctls HAProxy needs), then the VIP, etcd before
// kubeadm (the apiserver's external etcd), kube-proxy where a kubelet runs,
// and the pod network last.
//
// The second list is the leave sequence, run instead when the role says
// Leave. Its order keeps the cluster's API up through the VIP on the
// remaining masters, whose roles already dropped this node (their HAProxy
// no longer routes to it, their etcd counts on it only until it is
// removed):
//
//  1. drain: the node's pods move while everything of it still runs, and
//     the API answers on the VIP wherever it is;
//  2. keepalived: a stopping MASTER sends a priority-0 advert, so the VIP
//     moves to a remaining master at once, not after the track script
//     notices a dead apiserver (which it would if the reset came first);
//  3. HAProxy: no client reaches this node's frontend any more;
//  4. kubeadm reset: the local apiserver (the stand-in unit in the lab)
//     stops, with nothing routed to it; it was the local etcd's last
//     client;
//  5. etcd last: leadership moves away and the member is removed while it
//     is still a healthy voter, so the quorum the others need never waits
//     on a member that went away without saying so.
//
// The network (sysctls) and the CNI have nothing to undo: the VM is
// powered off next.
func (a *Agent) defaultComponents(root string) ([]reconcile.Component, []reconcile.Leaver, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, fmt.Errorf("find the agent's own binary for keepalived's track script: %w", err)
	}
	// The track script checks the local apiserver against the cluster CA
	// kubeadm keeps, for the name on its serving certificate.
	track := []string{self, "check", "apiserver",
		"--haproxy-url=http://127.0.0.1:8404/metrics", "--readyz-url=https://127.0.0.1:6443/readyz",
		"--ca-file=" + filepath.Join(root, "etc", "kubernetes", "pki", "ca.crt"), "--server-name=kubernetes"}
	if a.cfg.StandInForKubelet {
		a.log.Info("no kubelet on this host: the agent runs the kube-apiserver static pod as a process, standing in for the kubelet")
	}
	ha := haproxy.New(haproxy.Config{})
	ka := keepalived.New(keepalived.Config{TrackScript: track})
	et := etcd.New(etcd.Config{Copies: snapshotCopies{a}})
	kcfg := kubeadm.Config{Binary: a.cfg.KubeadmBinary, APIServerBinary: a.cfg.APIServerBinary,
		StandInForKubelet: a.cfg.StandInForKubelet, Kubelet: !a.cfg.StandInForKubelet, EtcdRestored: et.Restored}
	if kcfg.Kubelet {
		// A node with a kubelet is a systemd host, and the agent runs in
		// its unit's sandbox: kubeadm reset goes through systemd.
		kcfg.Unconfined = func(argv []string, maxRuntime time.Duration) []string {
			return service.TransientCommand("kubeadm", maxRuntime, argv)
		}
		kcfg.ImagesDir, kcfg.ImagesImported = imagecomponents.ContainerImagesDir, imagecomponents.ContainerImagesImported
	}
	ku := kubeadm.New(kcfg)
	components := []reconcile.Component{network.New(network.Config{}), ha, ka, et, ku}
	if kcfg.Kubelet {
		components = append(components, kubeproxy.New(kubeproxy.Config{}))
	}
	components = append(components, cni.New(cni.Config{}))
	return components, []reconcile.Leaver{ku.Drain(), ka, ha, ku, et}, nil
}

// watchLinks kicks a pass whenever a link or an address changes.
func (ns *nodeStack) watchLinks(ctx context.Context, log interface{ Warn(string, ...any) }) {
	if err := netinfo.Watch(ctx, ns.runner.Kick); err != nil {
		log.Warn("link changes are not watched; the periodic pass still catches them", "err", err)
	}
}

// offer hands the runner the newest role, replacing one not yet taken.
func (ns *nodeStack) offer(role v1.Role) {
	for {
		select {
		case ns.roles <- role:
			return
		default:
		}
		select {
		case <-ns.roles:
		default:
		}
	}
}

// run reconciles until ctx is done, then stops supervising; the daemons
// keep running, and the next agent adopts them. It fails only when no
// service manager can be had (systemd runs the machine but does not
// answer): the agent then exits, and systemd starts it again.
func (ns *nodeStack) run(ctx context.Context, log *slog.Logger) error {
	if ns.closeServices != nil {
		defer ns.closeServices()
	}
	if p, ok := ns.services.(*service.Pending); ok {
		if _, err := p.Wait(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("service manager: %w", err)
		}
	}
	log.Info("node stack enabled", "root", ns.root, "service_manager", ns.services.Kind())
	go ns.watchLinks(ctx, log)
	go watchInputs(ctx, ns.inputs, ns.runner.Kick, log)
	ns.runner.Run(ctx, ns.roles)
	return nil
}

// snapshotCopies sends etcd snapshots to the controller through the
// session's client.
type snapshotCopies struct{ a *Agent }

func (s snapshotCopies) client() (*controlclient.Client, error) {
	c := s.a.controller.Load()
	if c == nil {
		return nil, errors.New("no session with the controller yet")
	}
	return c, nil
}

func (s snapshotCopies) List(ctx context.Context) (v1.EtcdSnapshotCopyList, error) {
	var list v1.EtcdSnapshotCopyList
	c, err := s.client()
	if err != nil {
		return list, err
	}
	_, err = c.Do(ctx, http.MethodGet, v1.PathNodeEtcdSnapshots, nil, nil, &list)
	return list, err
}

func (s snapshotCopies) Put(ctx context.Context, takenAt time.Time, path string) (bool, error) {
	c, err := s.client()
	if err != nil {
		return false, err
	}
	_, err = c.Upload(ctx, http.MethodPut, v1.EtcdSnapshotCopyPath(takenAt), path, nil)
	var refused *controlclient.RefusedError
	if errors.As(err, &refused) && refused.Status == http.StatusConflict {
		return false, nil // another master's copy came first
	}
	return err == nil, err
}

func (s snapshotCopies) Get(ctx context.Context, takenAt time.Time, w io.Writer, limit int64) error {
	c, err := s.client()
	if err != nil {
		return err
	}
	_, err = c.Download(ctx, v1.EtcdSnapshotCopyPath(takenAt), w, limit)
	return err
}

// etcdMember is a component that runs the local etcd member.
type etcdMember interface {
	MemberID() string
	Snapshots() []time.Time
	Restored() string
}

// report fills the status's phase and components.
func (ns *nodeStack) report(st *v1.Status) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ns.statuses == nil {
		return
	}
	if ns.leaving {
		ns.reportLeave(st)
		return
	}
	st.Phase = v1.PhaseReady
	st.EtcdMemberID = ns.etcdMemberID()
	for _, m := range ns.members {
		if taken := m.Snapshots(); len(taken) > 0 {
			newest := taken[len(taken)-1]
			st.EtcdSnapshots, st.EtcdSnapshotAt = taken, &newest
		}
		if id := m.Restored(); id != "" {
			st.EtcdRestored = id
		}
	}
	for _, n := range ns.nodes {
		if obs := n.KubernetesNode(); obs != nil {
			st.KubernetesNode = obs
		}
	}
	for _, s := range ns.statuses {
		st.Components = append(st.Components, v1.ComponentStatus{
			Name: s.Component, Healthy: s.Healthy, Phase: s.Phase, Message: v1.ClipMessage(s.Message),
		})
		if !s.Healthy || s.Phase == reconcile.PhaseFailed {
			st.Phase = v1.PhaseDegraded
		}
	}
}

// etcdMemberID is the local etcd member's ID; empty when this node runs
// none. Called with mu held.
func (ns *nodeStack) etcdMemberID() string {
	id := ""
	for _, m := range ns.members {
		if mid := m.MemberID(); mid != "" {
			id = mid
		}
	}
	return id
}

// reportLeave reports the leave sequence: Left once every step has left,
// Leaving with each step's progress until then; and the etcd member while
// the node still is one, so that the controller can have the other
// masters remove it should the node never finish. Called with mu held.
func (ns *nodeStack) reportLeave(st *v1.Status) {
	st.Phase = v1.PhaseLeft
	st.EtcdMemberID = ns.etcdMemberID()
	for _, s := range ns.statuses {
		st.Components = append(st.Components, v1.ComponentStatus{
			Name: s.Component, Healthy: s.Healthy, Phase: s.Phase, Message: v1.ClipMessage(s.Message),
		})
		if s.Phase != reconcile.PhaseLeft {
			st.Phase = v1.PhaseLeaving
		}
	}
}
