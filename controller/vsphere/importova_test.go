package vsphere

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	"github.com/harmonykaas/harmony/internal/vcsim"
	"github.com/harmonykaas/harmony/ova/ovf"
)

// applianceOVA is vcsim's appliance-shaped OVA of the given version, in
// a directory of the test's.
func applianceOVA(t *testing.T, version string) (string, *ovf.Descriptor) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "harmony-control-plane.ova")
	desc, err := vcsim.ApplianceOVA(context.Background(), out, version)
	if err != nil {
		t.Fatal(err)
	}
	return out, desc
}

func baseOptions(path string) ImportOptions {
	return ImportOptions{
		OVA:          path,
		Datastore:    "LocalDS_0",
		ResourcePool: "DC0_C0/Resources",
		Name:         "harmony-cp-template",
		Networks:     map[string]string{"nic0": "VM Network"},
		Properties: map[string]string{
			"harmony.hostname":       "harmony-cp-1",
			"harmony.gateway":        "198.18.0.1",
			"harmony.controller_vip": "198.18.0.10",
		},
	}
}

// vmCount is how many VMs the inventory holds.
func vmCount(ctx context.Context, t *testing.T, c *vim25.Client) int {
	t.Helper()
	vms, err := find.NewFinder(c).VirtualMachineList(ctx, "*")
	var notFound *find.NotFoundError
	if errors.As(err, &notFound) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return len(vms)
}

func TestImportOVAIntoVcsim(t *testing.T) {
	path, desc := applianceOVA(t, "1.0.0")
	simulator.Test(func(ctx context.Context, c *vim25.Client) {
		var progress atomic.Int64
		o := baseOptions(path)
		o.MarkAsTemplate = true
		o.Progress = func(n int64) { progress.Store(n) }
		imported, err := ImportOVA(ctx, c, o)
		if err != nil {
			t.Fatal(err)
		}
		// Every disk went through the NFC upload, streamed from the tar.
		want := desc.Disks[0].FileSize + desc.Disks[1].FileSize
		if imported.Uploaded != want || progress.Load() != want {
			t.Errorf("uploaded %d bytes (progress %d), the disks are %d", imported.Uploaded, progress.Load(), want)
		}

		var vm mo.VirtualMachine
		if err := object.NewVirtualMachine(c, imported.VM).Properties(ctx, imported.VM, []string{"name", "config"}, &vm); err != nil {
			t.Fatal(err)
		}
		cfg := vm.Config
		if vm.Name != "harmony-cp-template" || !cfg.Template {
			t.Errorf("name %q template %v, want harmony-cp-template as a template", vm.Name, cfg.Template)
		}
		if cfg.Hardware.NumCPU != 4 || cfg.Hardware.MemoryMB != 8192 {
			t.Errorf("hardware: %d CPUs, %d MiB, want 4 and 8192", cfg.Hardware.NumCPU, cfg.Hardware.MemoryMB)
		}
		if cfg.Firmware != string(types.GuestOsDescriptorFirmwareTypeEfi) {
			t.Errorf("firmware %q, want efi", cfg.Firmware)
		}
		var pvscsi, vmxnet3 int
		var capacities []int64
		for _, d := range cfg.Hardware.Device {
			switch d := d.(type) {
			case *types.ParaVirtualSCSIController:
				pvscsi++
			case *types.VirtualVmxnet3:
				vmxnet3++
				if b, ok := d.Backing.(*types.VirtualEthernetCardNetworkBackingInfo); !ok || b.DeviceName != "VM Network" {
					t.Errorf("NIC backing %#v, want the mapped network VM Network", d.Backing)
				}
			case *types.VirtualDisk:
				capacities = append(capacities, d.CapacityInBytes)
			}
		}
		if pvscsi != 1 || vmxnet3 != 1 {
			t.Errorf("%d pvscsi controllers and %d vmxnet3 NICs, want one of each", pvscsi, vmxnet3)
		}
		if len(capacities) != 2 || capacities[0] != 16<<20 || capacities[1] != 64<<20 {
			t.Errorf("disk capacities %v, want 16 MiB and 64 MiB", capacities)
		}

		if cfg.VAppConfig == nil {
			t.Fatal("no vApp config: the properties did not map")
		}
		vapp := cfg.VAppConfig.GetVmConfigInfo()
		got := map[string]types.VAppPropertyInfo{}
		for _, p := range vapp.Property {
			got[p.Id] = p
		}
		for key, value := range map[string]string{
			"harmony.hostname": "harmony-cp-1", "harmony.gateway": "198.18.0.1", "harmony.controller_vip": "198.18.0.10",
			"harmony.image.role": "control-plane", "harmony.version.kubernetes": "v1.34.2",
		} {
			p, ok := got[key]
			value2 := p.Value
			if value2 == "" {
				value2 = p.DefaultValue
			}
			if !ok || value2 != value {
				t.Errorf("vApp property %s = %q (%+v), want %q", key, value2, p, value)
			}
		}
		if p := got["harmony.version.kubernetes"]; p.UserConfigurable != nil && *p.UserConfigurable {
			t.Error("a fixed property became user-configurable")
		}
		// The OVF environment transport is not checked here: vcsim keeps
		// no ovfEnvironmentTransport, neither from the import spec nor
		// from a reconfigure (ova/ovf's tests check the descriptor
		// carries it; vCenter applies it at import).
	})
}

func TestImportOVARefusesBadInput(t *testing.T) {
	path, _ := applianceOVA(t, "1.0.0")
	corrupt := filepath.Join(t.TempDir(), "corrupt.ova")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(corrupt, data, 0o644); err != nil {
		t.Fatal(err)
	}
	simulator.Test(func(ctx context.Context, c *vim25.Client) {
		before := vmCount(ctx, t, c)
		for name, tc := range map[string]struct {
			edit func(*ImportOptions)
			want string
		}{
			"invalid IP property":   {func(o *ImportOptions) { o.Properties["harmony.gateway"] = "not-an-ip" }, `properties.harmony.gateway: "not-an-ip" is not an IP address`},
			"fixed property":        {func(o *ImportOptions) { o.Properties["harmony.image.role"] = "node" }, "properties.harmony.image.role: fixed in the OVF"},
			"unknown property":      {func(o *ImportOptions) { o.Properties["harmony.colour"] = "blue" }, "properties.harmony.colour: the OVF has no such property"},
			"missing network":       {func(o *ImportOptions) { o.Networks = nil }, `networks: the OVF's network "nic0" has no mapping`},
			"unknown vSphere net":   {func(o *ImportOptions) { o.Networks["nic0"] = "No Such Network" }, `networks.nic0: vSphere network "No Such Network"`},
			"corrupted OVA":         {func(o *ImportOptions) { o.OVA = corrupt }, "digest mismatch"},
			"no name":               {func(o *ImportOptions) { o.Name = "" }, "name"},
			"no datastore":          {func(o *ImportOptions) { o.Datastore = "" }, "datastore: required"},
			"unknown resource pool": {func(o *ImportOptions) { o.ResourcePool = "nowhere" }, `resourcePool "nowhere"`},
		} {
			t.Run(name, func(t *testing.T) {
				o := baseOptions(path)
				tc.edit(&o)
				_, err := ImportOVA(ctx, c, o)
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err %v, want one containing %q", err, tc.want)
				}
				if n := vmCount(ctx, t, c); n != before {
					t.Fatalf("a refused import changed the VM count from %d to %d", before, n)
				}
			})
		}

		// Cancelled during the upload: the lease is aborted and the VM the
		// import made is removed.
		t.Run("cancelled mid-upload", func(t *testing.T) {
			uploadCtx, cancel := context.WithCancel(ctx)
			o := baseOptions(path)
			o.Progress = func(n int64) {
				if n > 64<<10 {
					cancel()
				}
			}
			_, err := ImportOVA(uploadCtx, c, o)
			if err == nil {
				t.Fatal("a cancelled import succeeded")
			}
			if n := vmCount(ctx, t, c); n != before {
				t.Fatalf("a cancelled import left a VM: count %d, was %d", n, before)
			}
		})
	})
}
