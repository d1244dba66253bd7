package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/harmonykaas/harmony/agent/components/haproxy"
	"github.com/harmonykaas/harmony/agent/components/keepalived"
	"github.com/harmonykaas/harmony/agent/netinfo"
	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/agent/service"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// nodeStack acts on the role: it feeds each new role to the reconcile
// runner and keeps the components' latest statuses for the status report.
type nodeStack struct {
	runner *reconcile.Runner
	roles  chan v1.Role
	// closeServices lets the units run on when the agent stops; nil for a
	// manager the caller owns.
	closeServices func() error

	mu       sync.Mutex
	statuses []reconcile.Status
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
		// systemd over D-Bus comes with the image; until then every host
		// uses the supervisor, which also runs fine on a VM.
		sup, err := service.NewSupervisor(service.SupervisorConfig{
			RunDir: filepath.Join(root, "run", "harmony", "services"),
			LogDir: filepath.Join(root, "var", "log", "harmony"),
			Logger: a.log.With("manager", "supervisor"),
		})
		if err != nil {
			return nil, fmt.Errorf("service supervisor: %w", err)
		}
		services = sup
		closeServices = sup.Close
	}
	a.log.Info("node stack enabled", "root", root, "service_manager", services.Kind())

	facts := reconcile.Facts{}
	if iface, addrs, err := netinfo.Primary(); err == nil {
		facts = reconcile.Facts{Interface: iface, Addresses: addrs}
	} else {
		a.log.Warn("no primary interface; components that need one will fail", "err", err)
	}
	components := a.cfg.Components
	if components == nil {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find the agent's own binary for keepalived's track script: %w", err)
		}
		components = []reconcile.Component{
			haproxy.New(haproxy.Config{}),
			keepalived.New(keepalived.Config{TrackScript: []string{self, "check", "apiserver",
				"--haproxy-url=http://127.0.0.1:8404/metrics", "--readyz-url=https://127.0.0.1:6443/readyz"}}),
		}
	}
	ns := &nodeStack{roles: make(chan v1.Role, 1), closeServices: closeServices}
	runner, err := reconcile.NewRunner(reconcile.RunnerConfig{
		Host:       &reconcile.Host{Root: root, Services: services, Facts: facts, Log: a.log},
		Components: components,
		Registerer: a.metrics.Registry,
		OnStatus: func(_ *v1.Role, statuses []reconcile.Status) {
			ns.mu.Lock()
			ns.statuses = statuses
			ns.mu.Unlock()
			a.reportStatusSoon()
		},
	})
	if err != nil {
		return nil, err
	}
	ns.runner = runner
	return ns, nil
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
// keep running, and the next agent adopts them.
func (ns *nodeStack) run(ctx context.Context) {
	ns.runner.Run(ctx, ns.roles)
	if ns.closeServices != nil {
		ns.closeServices()
	}
}

// report fills the status's phase and components.
func (ns *nodeStack) report(st *v1.Status) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ns.statuses == nil {
		return
	}
	st.Phase = v1.PhaseReady
	for _, s := range ns.statuses {
		st.Components = append(st.Components, v1.ComponentStatus{
			Name: s.Component, Healthy: s.Healthy, Phase: s.Phase, Message: truncate(s.Message, 1024),
		})
		if !s.Healthy || s.Phase == reconcile.PhaseFailed {
			st.Phase = v1.PhaseDegraded
		}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
