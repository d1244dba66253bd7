package lab

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/view"
	"github.com/vmware/govmomi/vim25"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	"github.com/harmonykaas/harmony/controller/vsphere"
)

// vmState is what the lab reads of a VM in the simulated vCenter: enough
// to give it a body, or take it away.
type vmState struct {
	Ref  types.ManagedObjectReference
	Name string
	// UUID is the VM's BIOS UUID: the body's machine ID derives from it.
	UUID string
	On   bool
	// Image is the image the controller cloned it from (its tag).
	Image string
	// DataDisks are the datastore paths of its disks after the first
	// (the OS disk), in device order: "[LocalDS_0] harmony-data/c/n.vmdk".
	DataDisks []string
}

// listVMs reads every VM that is not a template.
func listVMs(ctx context.Context, c *vim25.Client) ([]vmState, error) {
	m := view.NewManager(c)
	v, err := m.CreateContainerView(ctx, c.ServiceContent.RootFolder, []string{"VirtualMachine"}, true)
	if err != nil {
		return nil, fmt.Errorf("vCenter view: %w", err)
	}
	defer v.Destroy(context.WithoutCancel(ctx))
	var vms []mo.VirtualMachine
	err = v.Retrieve(ctx, []string{"VirtualMachine"}, []string{"name", "runtime.powerState", "config.template", "config.uuid", "config.extraConfig", "config.hardware.device"}, &vms)
	if err != nil {
		return nil, fmt.Errorf("read VMs: %w", err)
	}
	var out []vmState
	for _, vm := range vms {
		if vm.Config == nil || vm.Config.Template {
			continue
		}
		s := vmState{Ref: vm.Self, Name: vm.Name, UUID: vm.Config.Uuid, On: vm.Runtime.PowerState == types.VirtualMachinePowerStatePoweredOn}
		for _, o := range vm.Config.ExtraConfig {
			if ov := o.GetOptionValue(); ov.Key == vsphere.TagImage {
				s.Image, _ = ov.Value.(string)
			}
		}
		var disks []*types.VirtualDisk
		for _, d := range vm.Config.Hardware.Device {
			if disk, ok := d.(*types.VirtualDisk); ok {
				disks = append(disks, disk)
			}
		}
		slices.SortFunc(disks, func(a, b *types.VirtualDisk) int { return int(a.Key - b.Key) })
		for i, d := range disks {
			if b, ok := d.Backing.(types.BaseVirtualDeviceFileBackingInfo); ok && i > 0 {
				s.DataDisks = append(s.DataDisks, b.GetVirtualDeviceFileBackingInfo().FileName)
			}
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b vmState) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// vmGuestinfo reads and writes one VM's guestinfo.* keys in its
// ExtraConfig, where the controller writes them: what the hypervisor's
// backdoor gives a real VM's guest.
type vmGuestinfo struct {
	c   *vim25.Client
	ref types.ManagedObjectReference
}

func (g vmGuestinfo) Get(ctx context.Context, key string) (string, bool, error) {
	var vm mo.VirtualMachine
	if err := property.DefaultCollector(g.c).RetrieveOne(ctx, g.ref, []string{"config.extraConfig"}, &vm); err != nil {
		return "", false, fmt.Errorf("read guestinfo of %s: %w", g.ref.Value, err)
	}
	if vm.Config == nil {
		return "", false, nil
	}
	for _, o := range vm.Config.ExtraConfig {
		if ov := o.GetOptionValue(); ov.Key == key {
			s, _ := ov.Value.(string)
			return s, true, nil
		}
	}
	return "", false, nil
}

func (g vmGuestinfo) Set(ctx context.Context, key, value string) error {
	task, err := object.NewVirtualMachine(g.c, g.ref).Reconfigure(ctx, types.VirtualMachineConfigSpec{
		ExtraConfig: []types.BaseOptionValue{&types.OptionValue{Key: key, Value: value}},
	})
	if err != nil {
		return fmt.Errorf("write guestinfo %s of %s: %w", key, g.ref.Value, err)
	}
	if err := task.Wait(ctx); err != nil {
		return fmt.Errorf("write guestinfo %s of %s: %w", key, g.ref.Value, err)
	}
	return nil
}
