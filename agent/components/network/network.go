//go:build linux

// Package network is the reconcile.Component that prepares the node's
// network for the stack: the sysctls it needs, and the state of the
// primary link, which it reports and exports.
//
// Sysctls under /proc/sys/net belong to a network namespace: a write
// lands in the namespace of the writing thread. On a VM that is the
// node's; in the lab each host's agent runs inside its own namespace and
// so sets its own.
package network

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/harmonykaas/harmony/agent/netinfo"
	"github.com/harmonykaas/harmony/agent/reconcile"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// Name names the component.
const Name = "network"

// Config is how the agent, or a test, sets the component up.
type Config struct {
	// ProcSys is the sysctl tree; default /proc/sys. Tests point it at a
	// temporary directory for the file logic alone.
	ProcSys string
}

// Component converges the node's sysctls and observes its primary link.
type Component struct {
	cfg Config

	// mu serializes passes and guards what the metrics report.
	mu     sync.Mutex
	link   *netinfo.Link // the primary link at the last pass; nil if not found
	values map[string]float64

	linkUp, sysctlValue *prometheus.Desc
	corrections         *prometheus.CounterVec
}

var (
	_ reconcile.Component  = (*Component)(nil)
	_ prometheus.Collector = (*Component)(nil)
)

// New returns the component, with defaults filled into cfg.
func New(cfg Config) *Component {
	if cfg.ProcSys == "" {
		cfg.ProcSys = "/proc/sys"
	}
	return &Component{
		cfg: cfg,
		linkUp: prometheus.NewDesc("harmony_agent_network_link_up",
			"1 if the node's primary interface is up (admin up, and operationally up or unknown), 0 if not.",
			[]string{"interface"}, nil),
		sysctlValue: prometheus.NewDesc("harmony_agent_network_sysctl_value",
			"Value of a sysctl the agent manages, as read at the last pass.",
			[]string{"sysctl"}, nil),
		corrections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "harmony_agent_network_sysctl_writes_total",
			Help: "Times the agent found a sysctl it manages at another value and set it (the first setting, then any drift).",
		}, []string{"sysctl"}),
	}
}

// Name implements reconcile.Component.
func (c *Component) Name() string { return Name }

// Setting is one sysctl the node needs.
type Setting struct {
	// Name is the dotted name, such as net.ipv4.ip_forward.
	Name  string
	Value string
	// Optional settings are skipped when the kernel does not have them
	// (net.bridge.* exists only once br_netfilter is loaded).
	Optional bool
	Why      string
}

// Settings returns the sysctls a node with role needs.
func Settings(role *v1.Role) []Setting {
	s := []Setting{
		{Name: "net.ipv4.ip_forward", Value: "1", Why: "pods' traffic is routed through the node"},
		{Name: "net.bridge.bridge-nf-call-iptables", Value: "1", Optional: true, Why: "bridged pod traffic must pass kube-proxy's iptables rules"},
		{Name: "net.bridge.bridge-nf-call-ip6tables", Value: "1", Optional: true, Why: "bridged pod traffic must pass kube-proxy's ip6tables rules"},
	}
	if role.Role == v1.RoleMaster || role.Role == v1.RoleAppliance {
		s = append(s, Setting{Name: "net.ipv4.ip_nonlocal_bind", Value: "1", Why: "HAProxy binds the VIP on every master, holding it or not"})
		if vip, err := netip.ParseAddr(role.Cluster.VIP); err == nil && vip.Is6() {
			s = append(s, Setting{Name: "net.ipv6.ip_nonlocal_bind", Value: "1", Why: "HAProxy binds the IPv6 VIP on every master, holding it or not"})
		}
	}
	return s
}

// Reconcile implements reconcile.Component. It must run in the node's
// network namespace, on a thread that stays there for the whole call.
func (c *Component) Reconcile(ctx context.Context, host *reconcile.Host, role *v1.Role) reconcile.Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := reconcile.Status{Component: Name}
	if role == nil {
		st.Phase, st.Message = reconcile.PhaseFailed, "no role"
		return st
	}
	if !filepath.IsAbs(c.cfg.ProcSys) {
		st.Phase, st.Message = reconcile.PhaseFailed, fmt.Sprintf("network component: ProcSys %q is not an absolute path", c.cfg.ProcSys)
		return st
	}

	values := map[string]float64{}
	var problems []string
	for _, s := range Settings(role) {
		if err := ctx.Err(); err != nil {
			problems = append(problems, err.Error())
			break
		}
		present, old, changed, err := c.apply(s)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if !present {
			continue
		}
		if changed {
			c.corrections.WithLabelValues(s.Name).Inc()
			st.Actions = append(st.Actions, fmt.Sprintf("set %s=%s (was %s)", s.Name, s.Value, old))
		}
		if v, err := strconv.ParseFloat(s.Value, 64); err == nil {
			values[s.Name] = v
		}
	}
	c.values = values

	link, linkErr := c.primary(ctx, host)
	c.link = nil
	if linkErr == nil {
		c.link = &link
	}

	st.Phase = reconcile.PhaseConverged
	if len(problems) > 0 {
		st.Phase = reconcile.PhaseFailed
	}
	switch {
	case linkErr != nil:
		problems = append(problems, linkErr.Error())
	case !link.Up:
		problems = append(problems, "primary link is not up")
	}
	st.Healthy = linkErr == nil && link.Up && st.Phase == reconcile.PhaseConverged
	var msg []string
	if linkErr == nil {
		msg = append(msg, "primary "+link.String())
	}
	st.Message = strings.Join(append(msg, problems...), "; ")
	return st
}

// primary observes the interface the agent found at start (the one
// keepalived uses), or finds one if it found none.
func (c *Component) primary(ctx context.Context, host *reconcile.Host) (netinfo.Link, error) {
	if host.Facts.Interface != "" {
		return netinfo.LinkState(ctx, host.Facts.Interface)
	}
	return netinfo.PrimaryLink(ctx)
}

var sysctlName = regexp.MustCompile(`^[a-z0-9_-]+(\.[a-z0-9_-]+)+$`)

// apply makes sysctl s hold its value, writing only when it differs. It
// returns whether the kernel has the sysctl (an optional one may be
// missing), the value found, and whether it wrote. /proc/sys files cannot be written by
// rename, so files.Write does not apply; each holds one small value,
// which the kernel sets in one write.
func (c *Component) apply(s Setting) (present bool, old string, changed bool, err error) {
	if !sysctlName.MatchString(s.Name) {
		return false, "", false, fmt.Errorf("sysctl name %q is not valid", s.Name)
	}
	path := filepath.Join(c.cfg.ProcSys, strings.ReplaceAll(s.Name, ".", "/"))
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist) && s.Optional:
		return false, "", false, nil
	case errors.Is(err, os.ErrNotExist):
		return false, "", false, fmt.Errorf("sysctl %s does not exist (%s), and %s", s.Name, path, s.Why)
	case err != nil:
		return false, "", false, fmt.Errorf("read sysctl %s: %w", s.Name, err)
	}
	old = strings.TrimSpace(string(b))
	if old == s.Value {
		return true, old, false, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return true, old, false, fmt.Errorf("set sysctl %s=%s (%s): %w", s.Name, s.Value, s.Why, err)
	}
	_, werr := f.WriteString(s.Value + "\n")
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return true, old, false, fmt.Errorf("set sysctl %s=%s (%s): %w", s.Name, s.Value, s.Why, werr)
	}
	// The kernel may clamp or ignore a value without an error.
	if b, err := os.ReadFile(path); err != nil || strings.TrimSpace(string(b)) != s.Value {
		return true, old, true, fmt.Errorf("set sysctl %s=%s, but it then read %q (%v)", s.Name, s.Value, strings.TrimSpace(string(b)), err)
	}
	return true, old, true, nil
}

// Describe implements prometheus.Collector.
func (c *Component) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.linkUp
	ch <- c.sysctlValue
	c.corrections.Describe(ch)
}

// Collect implements prometheus.Collector: what the last pass saw.
func (c *Component) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	link, values := c.link, c.values
	c.mu.Unlock()
	if link != nil {
		up := 0.0
		if link.Up {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(c.linkUp, prometheus.GaugeValue, up, link.Name)
	}
	for name, v := range values {
		ch <- prometheus.MustNewConstMetric(c.sysctlValue, prometheus.GaugeValue, v, name)
	}
	c.corrections.Collect(ch)
}
