package vsphere

import (
	"context"
	"fmt"
	"slices"

	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
)

// CPUOvercommit is how many vCPUs the pre-check lets a cluster's powered-on
// VMs have per physical thread. Memory is not overcommitted.
const CPUOvercommit = 4

// Capacity is what a provider has free.
type Capacity struct {
	// DatastoreFree is free bytes per datastore name.
	DatastoreFree map[string]int64
	// MemoryBytes is the compute resource's memory; MemoryUsedBytes is
	// what its powered-on VMs are configured with.
	MemoryBytes     int64
	MemoryUsedBytes int64
	// CPUThreads of all hosts; MaxHostThreads of the largest, which bounds
	// one VM's vCPUs; VCPUsUsed by powered-on VMs.
	CPUThreads     int
	MaxHostThreads int
	VCPUsUsed      int
}

// Capacity reads free datastore space and the compute resource's memory,
// threads and what its powered-on VMs use.
func (s *Session) Capacity(ctx context.Context) (*Capacity, error) {
	c := &Capacity{DatastoreFree: map[string]int64{}}
	pc := property.DefaultCollector(s.Client.Client)
	for _, name := range append(append([]string{}, s.Provider.Datastores.OS...), s.Provider.Datastores.Data...) {
		if _, ok := c.DatastoreFree[name]; ok {
			continue
		}
		ds, err := s.finder.Datastore(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("datastore %s: %w", name, err)
		}
		var m mo.Datastore
		if err := ds.Properties(ctx, ds.Reference(), []string{"summary"}, &m); err != nil {
			return nil, fmt.Errorf("datastore %s: %w", name, err)
		}
		c.DatastoreFree[name] = m.Summary.FreeSpace
	}
	var rp mo.ResourcePool
	if err := s.pool.Properties(ctx, s.pool.Reference(), []string{"owner"}, &rp); err != nil {
		return nil, fmt.Errorf("resource pool: %w", err)
	}
	var cr mo.ComputeResource
	if err := pc.RetrieveOne(ctx, rp.Owner, []string{"host"}, &cr); err != nil {
		return nil, fmt.Errorf("compute resource: %w", err)
	}
	if len(cr.Host) == 0 {
		return c, nil
	}
	var hosts []mo.HostSystem
	if err := pc.Retrieve(ctx, cr.Host, []string{"summary.hardware", "vm", "runtime.connectionState"}, &hosts); err != nil {
		return nil, fmt.Errorf("hosts: %w", err)
	}
	var vmRefs []types.ManagedObjectReference
	for _, h := range hosts {
		if h.Runtime.ConnectionState != types.HostSystemConnectionStateConnected || h.Summary.Hardware == nil {
			continue
		}
		threads := int(h.Summary.Hardware.NumCpuThreads)
		c.CPUThreads += threads
		c.MaxHostThreads = max(c.MaxHostThreads, threads)
		c.MemoryBytes += h.Summary.Hardware.MemorySize
		vmRefs = append(vmRefs, h.Vm...)
	}
	if len(vmRefs) == 0 {
		return c, nil
	}
	var vms []mo.VirtualMachine
	if err := pc.Retrieve(ctx, vmRefs, []string{"runtime.powerState", "config.hardware.numCPU", "config.hardware.memoryMB"}, &vms); err != nil {
		return nil, fmt.Errorf("VMs on the hosts: %w", err)
	}
	for _, vm := range vms {
		if vm.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOn || vm.Config == nil {
			continue
		}
		c.VCPUsUsed += int(vm.Config.Hardware.NumCPU)
		c.MemoryUsedBytes += int64(vm.Config.Hardware.MemoryMB) << 20
	}
	return c, nil
}

// DiskRequest is one disk to place: its size and the datastores it may
// go to.
type DiskRequest struct {
	ID         string
	Bytes      int64
	Datastores []string
}

// ShortfallError says a pre-check found too little of something.
type ShortfallError struct {
	Field   string
	Message string
}

func (e *ShortfallError) Error() string { return e.Field + ": " + e.Message }

// Place assigns each disk the allowed datastore with the most free space
// left, in order, and fails naming the first disk that fits nowhere.
func (c *Capacity) Place(reqs []DiskRequest, field func(DiskRequest) string) (map[string]string, error) {
	free := make(map[string]int64, len(c.DatastoreFree))
	for k, v := range c.DatastoreFree {
		free[k] = v
	}
	out := make(map[string]string, len(reqs))
	for _, r := range reqs {
		best := ""
		for _, ds := range r.Datastores {
			if best == "" || free[ds] > free[best] {
				best = ds
			}
		}
		if best == "" || free[best] < r.Bytes {
			need := int64(0)
			for _, later := range reqs {
				if slices.Equal(later.Datastores, r.Datastores) {
					need += later.Bytes
				}
			}
			return nil, &ShortfallError{Field: field(r), Message: fmt.Sprintf(
				"not enough free space for %s (%s): %s needed on %v in all, the most free is %s",
				r.ID, gib(r.Bytes), gib(need), r.Datastores, gib(free[best]))}
		}
		free[best] -= r.Bytes
		out[r.ID] = best
	}
	return out, nil
}

// CheckCompute fails when the VMs to add would not fit: memory without
// overcommit, vCPUs within CPUOvercommit per thread and per host.
func (c *Capacity) CheckCompute(vcpus []int, memoryMiB []int) error {
	if c.CPUThreads == 0 {
		return &ShortfallError{Field: "provider", Message: "the resource pool's compute resource has no connected host"}
	}
	total, mem := 0, int64(0)
	for i, n := range vcpus {
		if n > c.MaxHostThreads {
			return &ShortfallError{Field: "size", Message: fmt.Sprintf("a VM with %d vCPUs does not fit on a host with %d threads", n, c.MaxHostThreads)}
		}
		total += n
		mem += int64(memoryMiB[i]) << 20
	}
	if free := c.MemoryBytes - c.MemoryUsedBytes; mem > free {
		return &ShortfallError{Field: "provider", Message: fmt.Sprintf(
			"not enough memory: the new VMs need %s, the compute resource has %s free of %s", gib(mem), gib(free), gib(c.MemoryBytes))}
	}
	if limit := c.CPUThreads*CPUOvercommit - c.VCPUsUsed; total > limit {
		return &ShortfallError{Field: "provider", Message: fmt.Sprintf(
			"not enough CPU: the new VMs need %d vCPUs, %d are left (%d threads × %d, %d in use)", total, limit, c.CPUThreads, CPUOvercommit, c.VCPUsUsed)}
	}
	return nil
}

func gib(b int64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }

// DatastoreSpace reads a datastore's capacity and free space in bytes.
func (s *Session) DatastoreSpace(ctx context.Context, name string) (capacity, free int64, err error) {
	ds, err := s.finder.Datastore(ctx, name)
	if err != nil {
		return 0, 0, fmt.Errorf("datastore %s: %w", name, err)
	}
	var m mo.Datastore
	if err := ds.Properties(ctx, ds.Reference(), []string{"summary"}, &m); err != nil {
		return 0, 0, fmt.Errorf("datastore %s: %w", name, err)
	}
	return m.Summary.Capacity, m.Summary.FreeSpace, nil
}
