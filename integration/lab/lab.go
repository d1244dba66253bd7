// Package lab runs Harmony on one machine as a user runs it on vSphere.
// govmomi's vCenter simulator (vcsim) is the vCenter; a real controller
// imports the node OVA into it and creates a cluster through its normal
// API; and every VM the controller powers on gets a body: the node
// image's own root file system booted by systemd-nspawn (package body)
// in a network namespace on the lab's bridge. The image's systemd, its
// units and its harmony-agent run as on a VM; the agent reads its
// bootstrap from guestinfo through a stand-in vmware-rpctool, the one
// part that is not the image's (the real tool talks to the hypervisor).
// A real Prometheus scrapes every agent and the controller.
//
// Nothing in the lab makes a role, a CA or a token: the controller does.
// The controller runs on the machine, not in an appliance body.
//
// Up builds a lab and returns once the cluster is ready; the lab runs on
// in detached processes (the controller, Prometheus, and `harmonyctl lab
// serve`, which runs vcsim and the bodies) until Down.
package lab

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// Config says what lab to build.
type Config struct {
	// StateDir holds everything the lab makes: the bodies, logs,
	// credentials, the controller's data, Prometheus's storage, and
	// lab.json, the record Down works from. Required.
	StateDir string
	Masters  int
	Workers  int
	// Subnet is the lab's IPv4 /24, inside 198.18.0.0/15. The machine
	// gets .1 (vCenter, the controller and Prometheus listen there);
	// nodes and the VIP come from the provider's pool, .10 to .99.
	// Default 198.18.100.0/24.
	Subnet netip.Prefix
	// BinDir holds harmony-controller, harmonyctl and vmware-rpctool
	// (make build).
	BinDir string
	// OVA is the node image; default the newest harmony-node-*.ova in
	// ImagesDir.
	OVA string
	// ImagesDir is where make images puts the OVAs; default
	// BinDir/../out/images.
	ImagesDir string
	// VCenterLatency is how long the lab's vCenter takes to answer each
	// call that starts a task on a VM (clone, power, reconfigure, rename,
	// destroy); zero, the default, is the simulator's at once. A real
	// vCenter takes seconds, and a test that kills the controller needs
	// time to land inside each call.
	VCenterLatency time.Duration
	// KubernetesVersion is the cluster's: one of the versions the image
	// carries (n or n-1); default the image's n.
	KubernetesVersion string
	// UpgradeNodeTimeout is how long a VM that replaces another in an
	// upgrade has to get Ready before it is rolled back; zero is the
	// controller's default.
	UpgradeNodeTimeout time.Duration
	// Timeout bounds the wait for a ready cluster; default 10m.
	Timeout time.Duration
	// Log receives progress.
	Log *slog.Logger
	// Progress, if set, receives the cluster's view each time it changes
	// while Up waits for it, for a status table.
	Progress func(*v1.Cluster, []v1.Node)
}

// Default sizes and addresses.
const (
	DefaultMasters = 3
	DefaultWorkers = 2
	MaxWorkers     = 16
	DefaultTimeout = 10 * time.Minute
)

// DefaultSubnet is the lab's network unless Config.Subnet says otherwise.
var DefaultSubnet = netip.MustParsePrefix("198.18.100.0/24")

// testRange is the only range the lab may use (RFC 2544).
var testRange = netip.MustParsePrefix("198.18.0.0/15")

// The lab's names and the cluster's networks. The pod and service
// networks sit inside 198.18.0.0/15 too, like every address the lab uses.
const (
	ClusterName  = "lab"
	ProviderName = "lab"
	podCIDR      = "198.19.0.0/17"
	serviceCIDR  = "198.19.128.0/20"
)

// Summary is what `lab up` prints: everything needed to use the lab.
type Summary struct {
	Cluster    string        `json:"cluster"`
	Image      string        `json:"image"`
	Nodes      []NodeSummary `json:"nodes"`
	VIP        string        `json:"vip"`
	APIServer  string        `json:"apiserver"`
	Kubeconfig string        `json:"kubeconfig"`
	Controller string        `json:"controller"`
	// AdminConfig is harmonyctl's configuration for the controller:
	// harmonyctl --config ADMINCONFIG cluster get lab.
	AdminConfig string `json:"adminConfig"`
	// VCenter is the simulator's URL; VCenterCredentials the file with
	// its user, password and thumbprint (0600).
	VCenter            string `json:"vcenter"`
	VCenterCredentials string `json:"vcenterCredentials"`
	Prometheus         string `json:"prometheus"`
	StateDir           string `json:"stateDir"`

	// Timings for make bench: when Up started, when the cluster was
	// created, and when each node was first seen enrolled and Ready.
	Started  time.Time            `json:"-"`
	Created  time.Time            `json:"-"`
	Enrolled map[string]time.Time `json:"-"`
	Ready    map[string]time.Time `json:"-"`
}

// NodeSummary is one VM of the lab.
type NodeSummary struct {
	Name string `json:"name"`
	Role string `json:"role"`
	IP   string `json:"ip"`
	// Netns is the body's network namespace: ip netns exec NETNS ...
	Netns string `json:"netns"`
	// Body is the body's state directory: its console log, its upper
	// layer (everything the VM wrote).
	Body string `json:"body"`
}

func (c *Config) defaults() error {
	if c.StateDir == "" {
		return errors.New("state dir: required")
	}
	abs, err := filepath.Abs(c.StateDir)
	if err != nil {
		return fmt.Errorf("state dir %q: %w", c.StateDir, err)
	}
	c.StateDir = abs
	if c.Masters == 0 {
		c.Masters = DefaultMasters
	}
	if c.Masters < 1 || c.Masters > v1.MaxMasters || c.Masters%2 == 0 {
		return fmt.Errorf("masters: must be odd, between 1 and %d, got %d", v1.MaxMasters, c.Masters)
	}
	if c.Workers < 0 || c.Workers > MaxWorkers {
		return fmt.Errorf("workers: must be between 0 and %d, got %d", MaxWorkers, c.Workers)
	}
	if !c.Subnet.IsValid() {
		c.Subnet = DefaultSubnet
	}
	if err := checkSubnet(c.Subnet); err != nil {
		return err
	}
	if c.BinDir == "" {
		return errors.New("bin dir: required (the directory of harmony-controller, harmonyctl and vmware-rpctool)")
	}
	if c.ImagesDir == "" {
		c.ImagesDir = filepath.Join(c.BinDir, "..", "out", "images")
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return nil
}

func checkSubnet(s netip.Prefix) error {
	if s.Bits() != 24 || !s.Addr().Is4() || s.Masked() != s || !testRange.Contains(s.Addr()) {
		return fmt.Errorf("subnet: must be an IPv4 /24 inside %s, got %s", testRange, s)
	}
	return nil
}

// addr returns the subnet's address ending in last.
func addr(subnet netip.Prefix, last byte) netip.Addr {
	a := subnet.Addr().As4()
	a[3] = last
	return netip.AddrFrom4(a)
}

// ipPool is the provider's pool: every node address and the VIP.
func ipPool(subnet netip.Prefix) *v1.IPPool {
	return &v1.IPPool{
		Network: subnet.String(),
		Ranges:  []string{addr(subnet, 10).String() + "-" + addr(subnet, 99).String()},
		Gateway: addr(subnet, 1).String(),
		// Every node needs a resolver, as on a real network: CoreDNS
		// forwards what is not a cluster name to the node's, and refuses
		// to start without one. Nothing answers on the lab's gateway, so
		// names outside the cluster do not resolve in the lab; cluster
		// names do.
		DNS: []string{addr(subnet, 1).String()},
	}
}
