// Package keepalived holds the API VIP on the masters: unicast VRRP between
// the masters (vSphere networks often drop multicast), adverts taken from
// the other masters' addresses only, priorities by rank for the next holder
// but no preemption, and a track script that gives the VIP up when the
// local HAProxy or apiserver stops answering at L7. VRRPv2 adverts every
// second with PASS authentication; VRRPv3 (when the role says so) as often
// as the role asks, without authentication, which it does not have.
package keepalived

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/template"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/harmonykaas/harmony/agent/files"
	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/agent/service"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// Paths on the node (under reconcile.Host.Root).
const (
	ConfigPath = "/etc/keepalived/keepalived.conf"
	runDir     = "/run/keepalived"
	unitName   = "keepalived"
)

// Config is how the component runs keepalived.
type Config struct {
	// Binary is keepalived's path; default /usr/sbin/keepalived.
	Binary string
	// TrackScript is the argv keepalived runs to check the local HAProxy
	// and apiserver; exit 0 means healthy. Its first element must be an
	// absolute path that only root can write (keepalived's script
	// security). Normally `harmony-agent check apiserver ...`.
	TrackScript []string
	// Command builds the validator's command; exec.CommandContext when
	// nil. Tests use it to run the checker inside a network namespace.
	Command func(ctx context.Context, argv []string) *exec.Cmd
}

// Component is the keepalived reconciler. It is also a
// prometheus.Collector: harmony_agent_vip_held says, at scrape time,
// whether this node holds the VIP.
type Component struct {
	cfg     Config
	vipHeld *prometheus.Desc

	mu sync.Mutex
	// vip and iface are the last pass's; invalid when disabled.
	vip   netip.Addr
	iface string
}

// New returns the keepalived component.
func New(cfg Config) *Component {
	if cfg.Binary == "" {
		cfg.Binary = "/usr/sbin/keepalived"
	}
	if cfg.Command == nil {
		cfg.Command = func(ctx context.Context, argv []string) *exec.Cmd {
			return exec.CommandContext(ctx, argv[0], argv[1:]...)
		}
	}
	return &Component{cfg: cfg, vipHeld: prometheus.NewDesc("harmony_agent_vip_held",
		"1 if this node holds the cluster's API VIP, 0 if not; absent when the node has no part in VRRP.", []string{"vip"}, nil)}
}

// Describe implements prometheus.Collector.
func (c *Component) Describe(ch chan<- *prometheus.Desc) { ch <- c.vipHeld }

// Collect implements prometheus.Collector.
func (c *Component) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	vip, iface := c.vip, c.iface
	c.mu.Unlock()
	if !vip.IsValid() {
		return
	}
	held := 0.0
	if holds(iface, vip) {
		held = 1
	}
	ch <- prometheus.MustNewConstMetric(c.vipHeld, prometheus.GaugeValue, held, vip.String())
}

// holds reports whether the interface carries addr.
func holds(iface string, addr netip.Addr) bool {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return false
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr() == addr {
			return true
		}
	}
	return false
}

// remember records what the VIP metric reports.
func (c *Component) remember(vip netip.Addr, iface string) {
	c.mu.Lock()
	c.vip, c.iface = vip, iface
	c.mu.Unlock()
}

// Name implements reconcile.Component.
func (c *Component) Name() string { return "keepalived" }

// Reconcile implements reconcile.Component.
func (c *Component) Reconcile(ctx context.Context, host *reconcile.Host, role *v1.Role) reconcile.Status {
	st := reconcile.Status{Component: c.Name()}
	if role.Role != v1.RoleMaster && role.Role != v1.RoleAppliance {
		c.remember(netip.Addr{}, "")
		st.Phase, st.Healthy = reconcile.PhaseDisabled, true
		actions, err := host.StopUnit(ctx, unitName)
		if err != nil {
			return failed(st, "%v", err)
		}
		st.Actions = actions
		return st
	}
	st.Units = []string{unitName}
	params, err := c.params(host, role)
	if err != nil {
		return failed(st, "%v", err)
	}
	c.remember(netip.MustParseAddr(params.VIP), params.Interface)
	conf, err := Render(params)
	if err != nil {
		return failed(st, "%v", err)
	}
	path := host.Path(ConfigPath)
	// The config holds the VRRP password.
	written, err := files.WriteOwing(path, conf, 0o600, c.validate(ctx), host.OweReload(unitName))
	if err != nil {
		return failed(st, "%v", err)
	}
	if written {
		st.Actions = append(st.Actions, "wrote "+ConfigPath)
	}
	if err := os.MkdirAll(host.Path(runDir), 0o755); err != nil {
		return failed(st, "create %s: %v", runDir, err)
	}
	unit := service.Unit{
		Name: unitName,
		Command: []string{c.cfg.Binary, "--dont-fork", "--log-console", "--log-detail",
			"--use-file", path,
			"--pid", host.Path(runDir + "/keepalived.pid"),
			"--vrrp_pid", host.Path(runDir + "/vrrp.pid"),
			"--checkers_pid", host.Path(runDir + "/checkers.pid")},
		ReloadSignal: syscall.SIGHUP,
	}
	// A reload owed for the new config was recorded before it replaced
	// the old (files.WriteOwing), so that a failure since cannot lose it.
	actions, err := host.RunUnit(ctx, unit, false)
	if err != nil {
		return failed(st, "%v", err)
	}
	st.Actions = append(st.Actions, actions...)
	state, err := host.Services.State(ctx, unitName)
	st.Phase, st.Healthy = reconcile.PhaseConverged, err == nil && state.Running
	if !st.Healthy {
		st.Message = "keepalived is not running"
		if state.LastExit != "" {
			st.Message += " (last exit: " + state.LastExit + ")"
		}
	}
	return st
}

func failed(st reconcile.Status, format string, args ...any) reconcile.Status {
	st.Phase, st.Healthy, st.Message = reconcile.PhaseFailed, false, fmt.Sprintf(format, args...)
	return st
}

// validate runs keepalived's own config test on a candidate.
func (c *Component) validate(ctx context.Context) files.Validator {
	return func(path string) error {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		out, err := c.cfg.Command(ctx, []string{c.cfg.Binary, "--config-test", "--use-file", path}).CombinedOutput()
		if err != nil {
			return fmt.Errorf("keepalived --config-test: %w: %s", err, strings.TrimSpace(string(out)))
		}
		return nil
	}
}

// Params are the inputs of the rendered configuration.
type Params struct {
	RouterID    string
	Instance    string
	Interface   string
	VRID        int
	Priority    int
	SourceIP    string
	Peers       []string
	Password    string
	VIP         string
	VIPPrefix   int
	TrackScript string
	// Version is VRRP's, 2 or 3; Advert the interval between adverts in
	// seconds, as keepalived reads it ("1", "0.3").
	Version int
	Advert  string
}

// params derives the configuration from the role and the host's facts.
func (c *Component) params(host *reconcile.Host, role *v1.Role) (Params, error) {
	lb := role.Cluster.LoadBalancer
	p := Params{RouterID: role.NodeName, Instance: "harmony_" + role.Cluster.Name, Interface: host.Facts.Interface,
		VRID: role.Cluster.VRID, Password: lb.VRRPPassword, Version: 2,
		Advert: strconv.FormatFloat(lb.Advert().Seconds(), 'f', -1, 64)}
	if lb.VRRPVersion == 3 {
		p.Version = 3
	}
	vip, err := netip.ParseAddr(role.Cluster.VIP)
	if err != nil {
		return p, fmt.Errorf("the role has no valid cluster.vip (%q)", role.Cluster.VIP)
	}
	p.VIP, p.VIPPrefix = vip.String(), vip.BitLen()
	switch {
	case p.VRID < 1 || p.VRID > 255:
		return p, fmt.Errorf("the role has no cluster.vrid (1 to 255)")
	case p.Password == "" && p.Version == 2:
		return p, fmt.Errorf("the role has no cluster.loadBalancer.vrrpPassword")
	case p.Interface == "":
		return p, fmt.Errorf("no primary interface found for VRRP")
	case len(c.cfg.TrackScript) == 0:
		return p, fmt.Errorf("no track script configured")
	}
	masters := slices.DeleteFunc(slices.Clone(role.Peers), func(peer v1.Peer) bool { return peer.Role != role.Role })
	slices.SortFunc(masters, func(a, b v1.Peer) int {
		if a.Rank != b.Rank {
			return a.Rank - b.Rank
		}
		return strings.Compare(a.Name, b.Name)
	})
	found := false
	for _, peer := range masters {
		if peer.Name == role.NodeName {
			found = true
			p.SourceIP = peer.Address
			// Rank 0 is the preferred holder; priorities stay in 1..254.
			p.Priority = max(200-10*peer.Rank, 1)
			continue
		}
		p.Peers = append(p.Peers, peer.Address)
	}
	if !found {
		return p, fmt.Errorf("node %s is not among the role's peers", role.NodeName)
	}
	if p.TrackScript, err = joinArgv(c.cfg.TrackScript); err != nil {
		return p, err
	}
	return p, nil
}

// joinArgv joins an argv for keepalived's script keyword, which splits on
// white space. Rather than trust its quoting rules, arguments that would
// need quoting are refused (write "--flag=" for an empty value).
func joinArgv(argv []string) (string, error) {
	for _, a := range argv {
		if a == "" || strings.ContainsAny(a, " \t\n\"'\\") {
			return "", fmt.Errorf("track script argument %q cannot be passed to keepalived; use --flag=value without spaces or quotes", a)
		}
	}
	return strings.Join(argv, " "), nil
}

var confTemplate = template.Must(template.New("keepalived.conf").Parse(`# Written by harmony-agent from the node's role. Local edits are replaced.
global_defs {
    router_id {{.RouterID}}
    vrrp_version {{.Version}}
    enable_script_security
    script_user root
    vrrp_garp_master_refresh 60
}

# Hysteresis: two failed checks (about 4 s) give the VIP up, five passing
# ones in a row (about 10 s) make the node eligible again, so a flapping
# apiserver does not keep taking the VIP back.
vrrp_script chk_apiserver {
    script "{{.TrackScript}}"
    interval 2
    timeout 3
    fall 2
    rise 5
}

vrrp_instance {{.Instance}} {
    state BACKUP
    interface {{.Interface}}
    virtual_router_id {{.VRID}}
    priority {{.Priority}}
    # Priority picks the next holder when the holder fails; a node that
    # recovers, or a new one cloned in an upgrade, does not take the VIP
    # back, as every move drops the connections through it.
    nopreempt
    advert_int {{.Advert}}
{{- if .Peers}}
    unicast_src_ip {{.SourceIP}}
    unicast_peer {
{{- range .Peers}}
        {{.}}
{{- end}}
    }
    # Adverts from any other address are dropped: with VRRPv3 there is no
    # password, and anyone on the segment could claim the VIP.
    check_unicast_src
{{- else}}
    # A single master has no peer to advertise to; keepalived refuses an
    # empty unicast_peer list, so it runs alone on plain VRRP.
{{- end}}
{{- if eq .Version 2}}
    authentication {
        auth_type PASS
        auth_pass {{.Password}}
    }
{{- end}}
    virtual_ipaddress {
        {{.VIP}}/{{.VIPPrefix}} dev {{.Interface}}
    }
    track_script {
        chk_apiserver
    }
}
`))

// Render returns keepalived.conf for p. Same input, same bytes.
func Render(p Params) ([]byte, error) {
	var buf bytes.Buffer
	if err := confTemplate.Execute(&buf, p); err != nil {
		return nil, fmt.Errorf("render keepalived.conf: %w", err)
	}
	return buf.Bytes(), nil
}
