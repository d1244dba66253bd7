// Package lab builds the node-stack lab: every "VM" is a network namespace
// on a bridge, with addresses in 198.18.0.0/15 (reserved for network
// testing) and its own root directory. A real controller enrolls a real
// agent per host, and the agents drive real keepalived, HAProxy, etcd,
// kubeadm and kube-apiserver. A real Prometheus scrapes them over mutual
// TLS. `harmonyctl lab up` and `down` are thin wrappers around Up and Down.
//
// There is no kubelet and no container runtime in the lab: the agents run
// with --stand-in-for-kubelet, which runs the kube-apiserver static pod
// that kubeadm wrote as a plain process in the host's namespace.
package lab

import (
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"time"
)

// Config says what lab to build.
type Config struct {
	// StateDir holds everything the lab makes: per-host roots, logs,
	// credentials, the controller's data, Prometheus's storage, and
	// lab.json, the record Down works from. Required.
	StateDir string
	Masters  int
	Workers  int
	// Subnet is the lab's IPv4 /24, inside 198.18.0.0/15. The machine
	// gets .1 (the controller and Prometheus listen there), the VIP is
	// .10, masters .11 up, workers .31 up. Default 198.18.100.0/24.
	Subnet netip.Prefix
	// BinDir holds harmony-agent and harmony-controller.
	BinDir string
	// KubernetesBinDir holds kubeadm and kube-apiserver (and kubectl),
	// built by `make kubernetes`.
	KubernetesBinDir string
	// Timeout bounds the wait for a converged cluster; default 5m.
	Timeout time.Duration
	// Log receives progress.
	Log *slog.Logger
}

// Default sizes and addresses.
const (
	DefaultMasters = 3
	DefaultWorkers = 2
	MaxMasters     = 7
	MaxWorkers     = 16
	DefaultTimeout = 5 * time.Minute
)

// DefaultSubnet is the lab's network unless Config.Subnet says otherwise.
var DefaultSubnet = netip.MustParsePrefix("198.18.100.0/24")

// testRange is the only range the lab may use (RFC 2544).
var testRange = netip.MustParsePrefix("198.18.0.0/15")

// Summary is what `lab up` prints: everything needed to use the lab.
type Summary struct {
	Hosts      []HostSummary `json:"hosts"`
	VIP        string        `json:"vip"`
	APIServer  string        `json:"apiserver"`
	Kubeconfig string        `json:"kubeconfig"`
	Etcd       EtcdSummary   `json:"etcd"`
	Controller string        `json:"controller"`
	Prometheus string        `json:"prometheus"`
	StateDir   string        `json:"stateDir"`

	// AgentsStarted and Ready time the convergence, for make bench: when
	// the agents were started, and when each node was first seen Ready.
	AgentsStarted time.Time            `json:"-"`
	Ready         map[string]time.Time `json:"-"`
}

// HostSummary is one host of the lab.
type HostSummary struct {
	Name  string `json:"name"`
	Netns string `json:"netns"`
	IP    string `json:"ip"`
	Role  string `json:"role"`
	// Root is the host's root directory: its /etc, /var/lib and logs.
	Root string `json:"root"`
}

// EtcdSummary says how to reach the cluster's etcd.
type EtcdSummary struct {
	Endpoints []string `json:"endpoints"`
	CA        string   `json:"ca"`
	Cert      string   `json:"cert"`
	Key       string   `json:"key"`
}

func (c *Config) defaults() error {
	if c.StateDir == "" {
		return fmt.Errorf("state dir: required")
	}
	abs, err := filepath.Abs(c.StateDir)
	if err != nil {
		return fmt.Errorf("state dir %q: %w", c.StateDir, err)
	}
	c.StateDir = abs
	if c.Masters == 0 {
		c.Masters = DefaultMasters
	}
	if c.Masters < 1 || c.Masters > MaxMasters {
		return fmt.Errorf("masters: must be between 1 and %d, got %d", MaxMasters, c.Masters)
	}
	if c.Workers < 0 || c.Workers > MaxWorkers {
		return fmt.Errorf("workers: must be between 0 and %d, got %d", MaxWorkers, c.Workers)
	}
	if !c.Subnet.IsValid() {
		c.Subnet = DefaultSubnet
	}
	if c.Subnet.Bits() != 24 || !c.Subnet.Addr().Is4() || c.Subnet.Masked() != c.Subnet || !testRange.Contains(c.Subnet.Addr()) {
		return fmt.Errorf("subnet: must be an IPv4 /24 inside %s, got %s", testRange, c.Subnet)
	}
	if c.BinDir == "" {
		return fmt.Errorf("bin dir: required (the directory of harmony-agent and harmony-controller)")
	}
	if c.KubernetesBinDir == "" {
		return fmt.Errorf("kubernetes bin dir: required (run make kubernetes)")
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return nil
}

// addr returns the subnet's address ending in last.
func addr(subnet netip.Prefix, last byte) netip.Addr {
	a := subnet.Addr().As4()
	a[3] = last
	return netip.AddrFrom4(a)
}
