// Package vcsim runs govmomi's vCenter simulator (github.com/vmware/govmomi
// v0.56.0, simulator package) for tests, benchmarks and the standalone
// `vcsim` dev command: a VPX model with one datacenter (DC0), one cluster
// (DC0_C0) of hosts sized for Harmony clusters, the datastore LocalDS_0
// and the port group "VM Network".
//
// It is the stand-in for a real vCenter, which cannot run here. Its traps
// are listed in DESIGN.md.
package vcsim

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/atomicfile"
	"github.com/harmonykaas/harmony/ova"
	"github.com/harmonykaas/harmony/ova/ovf"
)

// Options size the simulated inventory.
type Options struct {
	// Listen is host:port; empty means a random loopback port.
	Listen string
	// Username and Password are the only credentials accepted; defaults
	// administrator@vsphere.local and a random password.
	Username, Password string
	// Hosts in the cluster, each with HostThreads CPU threads and
	// HostMemoryGiB of memory. Defaults 3, 32 and 256.
	Hosts         int
	HostThreads   int
	HostMemoryGiB int
	// Datastores mounted on every host: LocalDS_0, LocalDS_1 and so on.
	// Default 1.
	Datastores int
	// MethodDelay slows methods down, in milliseconds, e.g.
	// {"CloneVM_Task": 200}: time for a test to kill a controller mid-way.
	MethodDelay map[string]int
}

// ParseMethodDelay reads MethodDelay from its command-line form,
// "Method=MS,Method=MS"; empty is none.
func ParseMethodDelay(s string) (map[string]int, error) {
	if s == "" {
		return nil, nil
	}
	out := map[string]int{}
	for _, item := range strings.Split(s, ",") {
		method, ms, ok := strings.Cut(item, "=")
		n, err := strconv.Atoi(ms)
		if !ok || method == "" || err != nil || n < 0 {
			return nil, fmt.Errorf("%q: want Method=milliseconds, such as CloneVM_Task=300", item)
		}
		out[method] = n
	}
	return out, nil
}

// FormatMethodDelay is ParseMethodDelay's input for d, methods in order.
func FormatMethodDelay(d map[string]int) string {
	var items []string
	for _, m := range slices.Sorted(maps.Keys(d)) {
		items = append(items, fmt.Sprintf("%s=%d", m, d[m]))
	}
	return strings.Join(items, ",")
}

// Endpoint is how a client reaches a simulator: what a process that did
// not start it (the lab's) needs to know.
type Endpoint struct {
	// URL has no credentials; Username and Password log in.
	URL        string `json:"url"`
	Username   string `json:"username"`
	Password   string `json:"password"`
	Thumbprint string `json:"thumbprint"`
}

// WriteFile writes the endpoint (its password included: 0600) for a
// process that did not start the simulator; it appears whole or not at
// all, so its presence says the simulator answers.
func (e Endpoint) WriteFile(path string) error {
	data, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(path, data, 0o600)
}

// ReadEndpoint reads an endpoint that WriteFile wrote.
func ReadEndpoint(path string) (Endpoint, error) {
	var ep Endpoint
	data, err := os.ReadFile(path)
	if err != nil {
		return ep, err
	}
	if err := json.Unmarshal(data, &ep); err != nil {
		return ep, fmt.Errorf("%s: %w", path, err)
	}
	if ep.URL == "" || ep.Username == "" || ep.Password == "" {
		return ep, fmt.Errorf("%s: url, username and password are required", path)
	}
	return ep, nil
}

// Sim is a running simulator.
type Sim struct {
	Model  *simulator.Model
	Server *simulator.Server
	Endpoint
}

// Start creates the model and serves it over TLS.
func Start(o Options) (*Sim, error) {
	if o.Hosts == 0 {
		o.Hosts = 3
	}
	if o.HostThreads == 0 {
		o.HostThreads = 32
	}
	if o.HostMemoryGiB == 0 {
		o.HostMemoryGiB = 256
	}
	m := simulator.VPX()
	m.ClusterHost = o.Hosts
	m.Datastore = max(o.Datastores, 1)
	m.Machine = 0 // no sample VMs
	m.DelayConfig.MethodDelay = o.MethodDelay
	if err := m.Create(); err != nil {
		return nil, fmt.Errorf("vcsim model: %w", err)
	}
	if o.Username == "" {
		o.Username = "administrator@vsphere.local"
	}
	if o.Password == "" {
		b := make([]byte, 12)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		o.Password = hex.EncodeToString(b)
	}
	m.Service.Listen = &url.URL{Host: o.Listen, User: url.UserPassword(o.Username, o.Password)}
	m.Service.TLS = new(tls.Config)
	m.Service.RegisterEndpoints = true
	sim := &Sim{Model: m, Endpoint: Endpoint{Username: o.Username, Password: o.Password}}
	sim.resizeHosts(o)
	sim.Server = m.Service.NewServer()
	u := *sim.Server.URL
	u.User = nil
	sim.URL = u.String()
	sim.Thumbprint = soap.ThumbprintSHA1(sim.Server.Certificate())
	return sim, nil
}

// Close stops the server and removes the model's files.
func (s *Sim) Close() {
	s.Server.Close()
	s.Model.Remove()
}

// Provider is a provider document for the simulator: the cluster's root
// pool, LocalDS_0 for all disks, "VM Network", and the given pool.
func (e Endpoint) Provider(name string, pool *v1.IPPool) v1.Provider {
	return v1.Provider{
		APIVersion: v1.APIVersion, Kind: "Provider", Name: name,
		VCenter:    v1.VCenter{URL: e.URL, Username: e.Username, Password: e.Password, Thumbprint: e.Thumbprint},
		Datacenter: "DC0", ComputeCluster: "DC0_C0", Folder: "harmony",
		Datastores: v1.Datastores{OS: []string{"LocalDS_0"}}, Network: "VM Network", IPPool: pool,
	}
}

// resizeHosts gives every host the threads and memory asked for; the
// model's defaults (2 threads, 4 GiB) fit no Harmony cluster.
func (s *Sim) resizeHosts(o Options) {
	reg := s.Model.Map()
	for _, e := range reg.All("HostSystem") {
		h := e.(*simulator.HostSystem)
		hw := *h.Summary.Hardware
		hw.NumCpuThreads, hw.NumCpuCores = int16(o.HostThreads), int16(o.HostThreads)
		hw.MemorySize = int64(o.HostMemoryGiB) << 30
		h.Summary.Hardware = &hw
		if h.Hardware != nil {
			h.Hardware.MemorySize = hw.MemorySize
			h.Hardware.CpuInfo.NumCpuThreads, h.Hardware.CpuInfo.NumCpuCores = hw.NumCpuThreads, hw.NumCpuCores
		}
	}
}

// SetDatastoreFree makes a datastore report this much free space.
func (s *Sim) SetDatastoreFree(name string, free int64) error {
	for _, e := range s.Model.Map().All("Datastore") {
		ds := e.(*simulator.Datastore)
		if ds.Name != name {
			continue
		}
		s.Model.Map().WithLock(s.Model.Service.Context, ds.Self, func() {
			ds.Summary.FreeSpace = free
			ds.Info.GetDatastoreInfo().FreeSpace = free
		})
		return nil
	}
	return fmt.Errorf("no datastore %q", name)
}

// AddFault makes the next count calls of method fail with a vCenter
// fault (e.g. "CloneVM_Task", "PowerOnVM_Task").
func (s *Sim) AddFault(method string, count int) {
	s.Model.Service.AddFaultRule(&simulator.FaultInjectionRule{
		MethodName: method, ObjectType: "*", ObjectName: "*", Probability: 1, MaxCount: count,
		FaultType: simulator.FaultTypeCustom, Enabled: true,
		Fault:   &types.TaskInProgress{VimFault: types.VimFault{MethodFault: types.MethodFault{FaultCause: &types.LocalizedMethodFault{LocalizedMessage: "injected: " + method + " busy"}}}},
		Message: "injected fault: " + method + " is busy",
	})
}

// NodeOVA writes a small OVA shaped like the node image (an 8 MiB system
// disk, the harmony.image.* and harmony.version.* properties a real build
// records, Kubernetes v1.34.2 and v1.33.4), imported as image
// "harmony-node-<version>".
func NodeOVA(ctx context.Context, out, version string) error {
	raw := out + ".system.raw"
	data := make([]byte, 8<<20)
	copy(data[1<<20:], strings.Repeat("harmony node ", 10000))
	if err := os.WriteFile(raw, data, 0o600); err != nil {
		return err
	}
	defer os.Remove(raw)
	_, err := ova.Assemble(ctx, ova.Options{
		Output: out,
		Descriptor: ovf.Descriptor{Name: "harmony-node", CPUs: 2, MemoryMiB: 4096, OSType: "debian12_64Guest", Network: "nic0",
			Properties: []ovf.Property{
				{Key: "harmony.image.role", Type: ovf.TypeString, Label: "Image role", Default: "node"},
				{Key: "harmony.image.version", Type: ovf.TypeString, Label: "Image version", Default: version},
				{Key: "harmony.version.kubernetes", Type: ovf.TypeString, Label: "kubernetes version", Default: "v1.34.2"},
				{Key: "harmony.version.kubernetes-previous", Type: ovf.TypeString, Label: "kubernetes-previous version", Default: "v1.33.4"},
				{Key: "harmony.version.etcd-server", Type: ovf.TypeString, Label: "etcd-server version", Default: "3.4.23-4+b4"},
			}},
		Disks:   []ova.SourceDisk{{ID: "system", RawPath: raw}},
		ModTime: time.Unix(1700000000, 0),
	})
	return err
}

// ApplianceOVA writes a small OVA shaped like the control-plane
// appliance's: a 16 MiB system disk with data, a 64 MiB empty data disk,
// the deploy wizard's user-configurable properties (harmony.hostname,
// harmony.gateway, harmony.controller_vip) and the fixed ones a real
// build records, of image version version.
func ApplianceOVA(ctx context.Context, out, version string) (*ovf.Descriptor, error) {
	raw := out + ".system.raw"
	data := make([]byte, 16<<20)
	copy(data[4<<20:], strings.Repeat("harmony appliance ", 50000))
	if err := os.WriteFile(raw, data, 0o600); err != nil {
		return nil, err
	}
	defer os.Remove(raw)
	return ova.Assemble(ctx, ova.Options{
		Output: out,
		Descriptor: ovf.Descriptor{
			Name: "harmony-control-plane", CPUs: 4, MemoryMiB: 8192, OSType: "debian12_64Guest", Network: "nic0",
			Properties: []ovf.Property{
				{Key: "harmony.hostname", Type: ovf.TypeString, UserConfigurable: true, Label: "Hostname"},
				{Key: "harmony.gateway", Type: ovf.TypeIP, UserConfigurable: true, Label: "Default gateway"},
				{Key: "harmony.controller_vip", Type: ovf.TypeIP, UserConfigurable: true, Label: "Controller VIP"},
				{Key: "harmony.image.role", Type: ovf.TypeString, Label: "Image role", Default: "control-plane"},
				{Key: "harmony.image.version", Type: ovf.TypeString, Label: "Image version", Default: version},
				{Key: "harmony.version.kubernetes", Type: ovf.TypeString, Label: "kubernetes version", Default: "v1.34.2"},
			},
		},
		Disks:   []ova.SourceDisk{{ID: "system", RawPath: raw}, {ID: "data", Capacity: 64 << 20}},
		ModTime: time.Unix(1700000000, 0),
	})
}
