package vsphere

import (
	"context"
	"errors"
	"fmt"

	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
)

// What an upgrade by reimage does to VMs: the old VM gives up its data
// disk and its name, a new one of the same name takes the disk. These
// never create or delete a disk, and never attach one that another VM of
// the folder holds.

// ErrDiskMissing is a data disk whose file is not on its datastore: the
// disk cannot move, and only an explicit fresh-disk path may go on.
var ErrDiskMissing = errors.New("data disk file missing")

// DiskInUseError refuses to attach a disk another VM holds: a disk on two
// VMs at once would corrupt it.
type DiskInUseError struct {
	Path string
	VMs  []string
}

func (e *DiskInUseError) Error() string {
	return fmt.Sprintf("data disk %s is attached to %v", e.Path, e.VMs)
}

// AttachDataDisk attaches an existing data disk to a VM that lacks it.
// A missing file is ErrDiskMissing, and a disk attached to another VM in
// folder is a DiskInUseError; neither changes anything.
func (s *Session) AttachDataDisk(ctx context.Context, folder *object.Folder, ref types.ManagedObjectReference, d DataDisk) error {
	exists, err := s.diskExists(ctx, d)
	if err != nil {
		return err
	}
	if !exists {
		return fmt.Errorf("%s: %w", d.Path(), ErrDiskMissing)
	}
	users, err := s.DiskUsers(ctx, folder, d.Path())
	if err != nil {
		return err
	}
	var others []string
	for _, u := range users {
		if u.Ref != ref {
			others = append(others, u.Name)
		}
	}
	if len(others) > 0 {
		return &DiskInUseError{Path: d.Path(), VMs: others}
	}
	return s.attachDisk(ctx, ref, d)
}

// attachDisk adds the existing VMDK to the VM unless it has it.
func (s *Session) attachDisk(ctx context.Context, ref types.ManagedObjectReference, d DataDisk) error {
	vm := s.VM(ref)
	devices, err := vm.Device(ctx)
	if err != nil {
		return fmt.Errorf("devices of %s: %w", ref.Value, err)
	}
	for _, disk := range devices.SelectByType((*types.VirtualDisk)(nil)) {
		if diskFile(disk) == d.Path() {
			return nil
		}
	}
	ctrl, err := devices.FindSCSIController("")
	if err != nil {
		return fmt.Errorf("%s has no SCSI controller for its data disk: %w", ref.Value, err)
	}
	ds, err := s.finder.Datastore(ctx, d.Datastore)
	if err != nil {
		return fmt.Errorf("datastore %s: %w", d.Datastore, err)
	}
	disk := devices.CreateDisk(ctrl, ds.Reference(), d.Path())
	// Capacity 0 and no file operation: attach the existing VMDK.
	return s.reconfigure(ctx, vm, types.VirtualMachineConfigSpec{DeviceChange: []types.BaseVirtualDeviceConfigSpec{
		&types.VirtualDeviceConfigSpec{Operation: types.VirtualDeviceConfigSpecOperationAdd, Device: disk},
	}})
}

// DiskUsers are the VMs in folder that have the disk file attached.
func (s *Session) DiskUsers(ctx context.Context, folder *object.Folder, file string) ([]VMInfo, error) {
	refs, err := vmRefs(ctx, folder)
	if len(refs) == 0 || err != nil {
		return nil, err
	}
	var vms []mo.VirtualMachine
	if err := property.DefaultCollector(s.Client.Client).Retrieve(ctx, refs, []string{"name", "config.hardware.device"}, &vms); err != nil {
		return nil, fmt.Errorf("read disks of %s: %w", folder.InventoryPath, err)
	}
	var out []VMInfo
	for _, m := range vms {
		if m.Config == nil {
			continue
		}
		for _, dev := range object.VirtualDeviceList(m.Config.Hardware.Device).SelectByType((*types.VirtualDisk)(nil)) {
			if diskFile(dev) == file {
				out = append(out, VMInfo{Ref: m.Self, Name: m.Name})
				break
			}
		}
	}
	return out, nil
}

// Rename gives a VM another name, in its folder: the old VM of a swap
// steps aside, kept for a rollback, so the new one can take its name. A
// VM that has the name already is left alone, and so is one whose rename
// failed because it got the name meanwhile: a rename started by a
// controller that was stopped runs on in vCenter, and the one after it
// finds the name taken, by the VM itself.
func (s *Session) Rename(ctx context.Context, ref types.ManagedObjectReference, name string) error {
	vm := s.VM(ref)
	have, err := vm.ObjectName(ctx)
	if err != nil {
		return fmt.Errorf("name of %s: %w", ref.Value, err)
	}
	if have == name {
		return nil
	}
	task, err := vm.Rename(ctx, name)
	if err == nil {
		err = task.Wait(ctx)
	}
	if err != nil {
		if have, nameErr := vm.ObjectName(ctx); nameErr == nil && have == name {
			return nil
		}
		return fmt.Errorf("rename %s to %s: %w", ref.Value, name, err)
	}
	return nil
}
