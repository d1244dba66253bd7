package haproxy

import (
	"bytes"
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"text/template"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// Defaults for the role's load balancer settings. Client and server
// timeouts are hours, not the usual seconds, so that `kubectl logs -f`,
// `exec` and watches are not cut while idle.
const (
	DefaultClientTimeout = 4 * time.Hour
	DefaultServerTimeout = 4 * time.Hour
	DefaultTunnelTimeout = 8 * time.Hour
	DefaultCheckInterval = 2 * time.Second
	// The apiservers are on the masters' own segment, where a connection
	// takes well under a millisecond: one not made in a quarter of a
	// second is to a server that is gone (its host powered off, before the
	// checks mark it DOWN), and the client is better served by the next
	// one. At a second, a client that gives up sooner than that (the
	// failover bench's /readyz tries for 500 ms) failed on each try that
	// round robin sent to the gone server, for the 6 s until the checks
	// marked it DOWN.
	connectTimeout = 250 * time.Millisecond
)

// verifyHost is the name HAProxy checks each apiserver certificate for.
// HAProxy 2.6 matches verifyhost (and the SNI) only against DNS SANs and
// the CN, never against IP SANs, so the master's IP cannot be used; every
// kubeadm apiserver certificate carries the DNS SAN "kubernetes".
const verifyHost = "kubernetes"

// paths are where the rendered config points, already under the host root.
type paths struct {
	RunDir string
	CAFile string // empty: no cluster CA, health checks do not verify
}

type server struct {
	Name    string
	Address string // host:port, IPv6 in brackets
}

type view struct {
	RunDir        string
	MaxConn       int
	Frontend      string
	Stats         string
	ClientTimeout string
	ServerTimeout string
	TunnelTimeout string
	Connect       string
	Inter         string
	CAFile        string
	VerifyHost    string
	Servers       []server
}

// render builds haproxy.cfg from the role. Its output depends only on its
// inputs, so the same role always gives the same bytes and files.Write
// leaves the live file, and the running HAProxy, alone.
func (c *Component) render(role *v1.Role, p paths) ([]byte, error) {
	if role.Cluster.VIP == "" {
		return nil, fmt.Errorf("role has no cluster.vip: HAProxy has nothing to serve the API on")
	}
	// A zone is kept: HAProxy refuses it, and its checker is the judge of
	// what it can bind.
	vip, err := netip.ParseAddr(role.Cluster.VIP)
	if err != nil {
		return nil, fmt.Errorf("cluster.vip %q is not an IP address", role.Cluster.VIP)
	}
	lb := role.Cluster.LoadBalancer
	var t [4]string
	for i, d := range []struct {
		field, value string
		def          time.Duration
	}{
		{"clientTimeout", lb.ClientTimeout, DefaultClientTimeout},
		{"serverTimeout", lb.ServerTimeout, DefaultServerTimeout},
		{"tunnelTimeout", lb.TunnelTimeout, DefaultTunnelTimeout},
		{"checkInterval", lb.CheckInterval, DefaultCheckInterval},
	} {
		if t[i], err = haproxyDuration(d.value, d.def); err != nil {
			return nil, fmt.Errorf("cluster.loadBalancer.%s: %w", d.field, err)
		}
	}
	servers, err := c.servers(role)
	if err != nil {
		return nil, err
	}
	v := view{
		RunDir:        p.RunDir,
		MaxConn:       c.cfg.MaxConn,
		Frontend:      netip.AddrPortFrom(vip, uint16(c.cfg.FrontendPort)).String(),
		Stats:         c.cfg.StatsAddr.String(),
		ClientTimeout: t[0],
		ServerTimeout: t[1],
		TunnelTimeout: t[2],
		Connect:       formatDuration(connectTimeout),
		Inter:         t[3],
		CAFile:        p.CAFile,
		VerifyHost:    verifyHost,
		Servers:       servers,
	}
	var b bytes.Buffer
	if err := configTemplate.Execute(&b, v); err != nil {
		return nil, fmt.Errorf("render haproxy.cfg: %w", err)
	}
	return b.Bytes(), nil
}

// servers are the role's peers of this node's own role (the masters of a
// tenant cluster, the appliances of the control plane), by rank then name
// so that the order, and the file, never depend on the order of the role.
func (c *Component) servers(role *v1.Role) ([]server, error) {
	var peers []v1.Peer
	for _, p := range role.Peers {
		if p.Role == role.Role {
			peers = append(peers, p)
		}
	}
	if len(peers) == 0 {
		return nil, fmt.Errorf("role lists no %s peers to balance over (peers must include this node)", role.Role)
	}
	slices.SortStableFunc(peers, func(a, b v1.Peer) int {
		return cmp.Or(cmp.Compare(a.Rank, b.Rank), cmp.Compare(a.Name, b.Name))
	})
	out := make([]server, 0, len(peers))
	for _, p := range peers {
		// Names and addresses go into the file verbatim: refuse anything
		// that could break out of its field even if the role skipped
		// validation.
		if err := v1.ValidateNodeName(p.Name); err != nil {
			return nil, fmt.Errorf("peer name %q: %v", p.Name, err)
		}
		addr, err := netip.ParseAddr(p.Address)
		if err != nil {
			return nil, fmt.Errorf("peer %s: address %q is not an IP address", p.Name, p.Address)
		}
		out = append(out, server{Name: p.Name, Address: netip.AddrPortFrom(addr, uint16(c.cfg.APIServerPort)).String()})
	}
	return out, nil
}

// haproxyDuration parses a role duration (Go syntax), empty meaning def.
func haproxyDuration(s string, def time.Duration) (string, error) {
	d := def
	if s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return "", fmt.Errorf("%q is not a duration", s)
		}
	}
	if d < time.Millisecond {
		return "", fmt.Errorf("%q is shorter than 1ms", s)
	}
	return formatDuration(d), nil
}

// formatDuration writes d in the largest HAProxy unit (d, h, m, s, ms)
// that holds it exactly, rounded to the millisecond HAProxy counts in.
func formatDuration(d time.Duration) string {
	ms := d.Round(time.Millisecond).Milliseconds()
	for _, u := range []struct {
		suffix string
		ms     int64
	}{{"d", 86400000}, {"h", 3600000}, {"m", 60000}, {"s", 1000}} {
		if ms%u.ms == 0 {
			return strconv.FormatInt(ms/u.ms, 10) + u.suffix
		}
	}
	return strconv.FormatInt(ms, 10) + "ms"
}

var configTemplate = template.Must(template.New("haproxy.cfg").Parse(`# Written by harmony-agent from the node's role; local edits are replaced.
global
    # The service manager supervises the master process in the foreground
    # (-W -db); SIGUSR2 makes it re-read this file and start new workers
    # while the old ones finish their connections.
    master-worker
    # Bound how many reloads an old worker, kept alive by a long exec or
    # logs -f session, may survive.
    mworker-max-reloads 3
    pidfile {{.RunDir}}/haproxy.pid
    stats socket {{.RunDir}}/admin.sock mode 600 level admin expose-fd listeners
{{- if .MaxConn}}
    maxconn {{.MaxConn}}
{{- else}}
    # No maxconn: HAProxy derives it from the hard file-descriptor limit
    # (about half of it). A fixed value the limit cannot hold makes it
    # refuse to start.
{{- end}}
    # notice keeps server state changes and errors, not one line per
    # connection.
    log stderr format raw local0 notice

defaults
    mode tcp
    log global
    # Each retry goes to another server: a refused or timed-out connect
    # means that server is stopping or gone.
    option redispatch 1
    retries 3
    timeout connect {{.Connect}}
    timeout client {{.ClientTimeout}}
    timeout server {{.ServerTimeout}}
    timeout tunnel {{.TunnelTimeout}}

# The API VIP. keepalived holds it on one master at a time; the host sets
# net.ipv4.ip_nonlocal_bind=1 so that the backups can bind it too and take
# over without a restart.
frontend apiserver
    bind {{.Frontend}}
    mode tcp
    option tcplog
    option dontlognull
    # Failed connections log at err, which passes the notice filter.
    option log-separate-errors
    default_backend apiservers

# TLS passes through to the apiservers; only the health checks speak TLS.
backend apiservers
    mode tcp
    balance roundrobin
    option httpchk GET /readyz
    http-check expect status 200
{{- if .CAFile}}
    # Checks verify each apiserver against the cluster CA, for the DNS
    # name every kubeadm apiserver certificate carries: HAProxy never
    # matches verifyhost against IP SANs.
{{- else}}
    # The role carries no cluster CA yet: checks cannot verify the
    # apiserver certificate, only that /readyz answers 200 over TLS.
{{- end}}
{{- range .Servers}}
    server {{.Name}} {{.Address}} check check-ssl {{if $.CAFile}}verify required ca-file {{$.CAFile}} verifyhost {{$.VerifyHost}}{{else}}verify none{{end}} inter {{$.Inter}} fall 3 rise 2
{{- end}}

# Local only: the Prometheus exporter and the stats page.
frontend stats
    mode http
    bind {{.Stats}}
    no log
    timeout client 30s
    timeout http-request 10s
    http-request use-service prometheus-exporter if { path /metrics }
    stats enable
    stats uri /stats
    stats refresh 10s
`))
