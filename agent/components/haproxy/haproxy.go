// Package haproxy is the reconcile.Component that runs HAProxy on the
// control-plane nodes: VIP:8443 balanced over every master's apiserver on
// 6443, with L7 health checks (/readyz over TLS, verified against the
// cluster CA) and timeouts long enough for kubectl logs -f and exec.
// keepalived, another component, moves the VIP between the nodes.
package haproxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/harmonykaas/harmony/agent/files"
	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/agent/service"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// Name names the component and its service unit.
const Name = "haproxy"

// Paths on the node; the component writes them under reconcile.Host.Path.
const (
	ConfigFile = "/etc/haproxy/haproxy.cfg"
	CAFile     = "/etc/haproxy/cluster-ca.crt"
	RunDir     = "/run/haproxy"
)

// Config is how the agent, or the lab, sets the component up. Zero fields
// take the defaults.
type Config struct {
	// Binary is the haproxy executable; default /usr/sbin/haproxy.
	Binary string
	// FrontendPort is where the API is served on the VIP; default 8443.
	FrontendPort int
	// APIServerPort is where each master's kube-apiserver listens; default
	// 6443.
	APIServerPort int
	// StatsAddr serves /metrics (Prometheus) and /stats; default
	// 127.0.0.1:8404.
	StatsAddr netip.AddrPort
	// MaxConn is the global connection limit. Zero leaves it to HAProxy,
	// which derives it from the hard file-descriptor limit it runs under
	// (each connection needs two descriptors; asking for more than the
	// limit allows is fatal at start, not at `haproxy -c`).
	MaxConn int
	// CheckTimeout bounds one `haproxy -c`; default 30s.
	CheckTimeout time.Duration
	// NoStatsProbe makes health the unit's state alone, without asking the
	// stats endpoint (for a manager that runs no real process).
	NoStatsProbe bool
}

// Component converges HAProxy.
type Component struct {
	cfg Config
	// http asks the local stats endpoint, never through a proxy.
	http *http.Client

	// mu serializes passes: two at once would race on the files.
	mu sync.Mutex
}

var _ reconcile.Component = (*Component)(nil)

// New returns the component, with defaults filled into cfg.
func New(cfg Config) *Component {
	if cfg.Binary == "" {
		cfg.Binary = "/usr/sbin/haproxy"
	}
	if cfg.FrontendPort == 0 {
		cfg.FrontendPort = v1.APIServerPort
	}
	if cfg.APIServerPort == 0 {
		cfg.APIServerPort = 6443
	}
	if !cfg.StatsAddr.IsValid() {
		cfg.StatsAddr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), 8404)
	}
	if cfg.CheckTimeout == 0 {
		cfg.CheckTimeout = 30 * time.Second
	}
	return &Component{cfg: cfg, http: &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}}
}

// Name implements reconcile.Component.
func (c *Component) Name() string { return Name }

// Unit is the service unit the component ensures on host.
func (c *Component) Unit(host *reconcile.Host) service.Unit {
	return service.Unit{
		Name: Name,
		// -W -db: master-worker in the foreground; the manager is the
		// supervisor, and SIGUSR2 to the master reloads without dropping
		// established connections.
		Command:      []string{c.cfg.Binary, "-W", "-db", "-f", host.Path(ConfigFile)},
		ReloadSignal: syscall.SIGUSR2,
	}
}

// Reconcile implements reconcile.Component.
func (c *Component) Reconcile(ctx context.Context, host *reconcile.Host, role *v1.Role) reconcile.Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := reconcile.Status{Component: Name}
	if role == nil || (role.Role != v1.RoleMaster && role.Role != v1.RoleAppliance) {
		return c.disable(ctx, host, st)
	}
	st.Units = []string{Name}
	if err := c.checkConfig(); err != nil {
		return st.Failed(err)
	}
	fail := func(err error) reconcile.Status {
		st = st.Failed(err)
		// What ran before keeps running; say whether it does.
		if s, err := host.Services.State(ctx, Name); err == nil {
			st.Healthy = s.Running
		}
		return st
	}

	caPEM, err := clusterCA(role)
	if err != nil {
		return fail(err)
	}
	p := paths{RunDir: host.Path(RunDir)}
	if caPEM != nil {
		p.CAFile = host.Path(CAFile)
	}
	cfg, err := c.render(role, p)
	if err != nil {
		return fail(err)
	}
	if err := os.MkdirAll(p.RunDir, 0o755); err != nil {
		return fail(fmt.Errorf("create %s: %w", p.RunDir, err))
	}

	unit := c.Unit(host)
	owe := host.OweReload(unit.Name)
	if caPEM != nil {
		// The CA is checked with the config that will use it, so that a
		// CA HAProxy cannot load never replaces one it can.
		changed, err := files.WriteOwing(p.CAFile, caPEM, 0o644, func(candidate string) error {
			q := p
			q.CAFile = candidate
			body, err := c.render(role, q)
			if err != nil {
				return err
			}
			return c.checkConfigBytes(ctx, host.Path(ConfigFile), body)
		}, owe)
		if err != nil {
			return fail(writeErr(CAFile, err))
		}
		if changed {
			st.Actions = append(st.Actions, "wrote "+CAFile)
		}
	}
	changed, err := files.WriteOwing(host.Path(ConfigFile), cfg, 0o644, func(candidate string) error {
		return c.check(ctx, candidate)
	}, owe)
	if err != nil {
		return fail(writeErr(ConfigFile, err))
	}
	if changed {
		st.Actions = append(st.Actions, "wrote "+ConfigFile)
	}
	if caPEM == nil {
		// Only now is no accepted config pointing at it.
		if err := os.Remove(host.Path(CAFile)); err == nil {
			st.Actions = append(st.Actions, "removed "+CAFile)
		} else if !errors.Is(err, os.ErrNotExist) {
			return fail(fmt.Errorf("remove stale %s: %w", CAFile, err))
		}
	}
	// Reloads owed for the files written above were recorded before they
	// replaced the old ones (files.WriteOwing).
	actions, err := host.RunUnit(ctx, unit, false)
	if err != nil {
		return fail(err)
	}
	st.Actions = append(st.Actions, actions...)
	st.Phase = reconcile.PhaseConverged
	st.Healthy, st.Message = c.observe(ctx, host, len(st.Actions) > 0)
	return st
}

// disable stops a unit this node no longer needs. Asking the manager, not
// remembering what this process ensured, also catches a unit left by an
// agent that ran before a role change.
func (c *Component) disable(ctx context.Context, host *reconcile.Host, st reconcile.Status) reconcile.Status {
	st.Phase = reconcile.PhaseDisabled
	st.Healthy = true
	st.Message = "not a control-plane node"
	actions, err := host.StopUnit(ctx, Name)
	if err != nil {
		return st.Failed(err)
	}
	st.Actions = actions
	return st
}

var _ reconcile.Leaver = (*Component)(nil)

// Leave stops HAProxy. It runs after keepalived has given the VIP up, so
// no client reaches this node's frontend any more; the remaining masters'
// HAProxies already route to the remaining apiservers only.
func (c *Component) Leave(ctx context.Context, host *reconcile.Host, role *v1.Role) reconcile.Status {
	st := reconcile.Status{Component: Name, Phase: reconcile.PhaseLeft, Healthy: true, Message: "HAProxy stopped"}
	actions, err := host.StopUnit(ctx, Name)
	if err != nil {
		return st.Failed(err)
	}
	st.Actions = actions
	return st
}

func (c *Component) checkConfig() error {
	for _, p := range []struct {
		name string
		port int
	}{{"FrontendPort", c.cfg.FrontendPort}, {"APIServerPort", c.cfg.APIServerPort}} {
		if p.port < 1 || p.port > 65535 {
			return fmt.Errorf("haproxy component: %s %d is not a TCP port", p.name, p.port)
		}
	}
	if c.cfg.StatsAddr.Port() == 0 {
		return fmt.Errorf("haproxy component: StatsAddr %s has no port", c.cfg.StatsAddr)
	}
	return nil
}

// clusterCA returns the cluster CA certificate (never its key), or nil
// when the role carries none.
func clusterCA(role *v1.Role) ([]byte, error) {
	if role.PKI == nil || role.PKI.ClusterCA == nil || role.PKI.ClusterCA.Certificate == "" {
		return nil, nil
	}
	pem := []byte(role.PKI.ClusterCA.Certificate)
	if _, err := v1.ParseCertificatesPEM(pem); err != nil {
		return nil, fmt.Errorf("pki.clusterCA.certificate: %w", err)
	}
	return pem, nil
}

// writeErr says which node file failed; a refused candidate is reported
// with the checker's own words.
func writeErr(nodePath string, err error) error {
	var ve *files.ValidationError
	if errors.As(err, &ve) {
		return fmt.Errorf("new %s refused, the old one stays: %w", nodePath, ve.Err)
	}
	return fmt.Errorf("write %s: %w", nodePath, err)
}
