package lab

import (
	"context"
	"net/url"
	"slices"
	"testing"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/types"

	"github.com/harmonykaas/harmony/controller/vsphere"
	"github.com/harmonykaas/harmony/internal/vcsim"
)

// TestVCenterView: the lab sees a VM's power, image tag and data disks,
// and reads and writes its guestinfo, as vcsim holds them.
func TestVCenterView(t *testing.T) {
	ctx := context.Background()
	sim, err := vcsim.Start(vcsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	u, _ := url.Parse(sim.URL)
	u.User = url.UserPassword(sim.Username, sim.Password)
	c, err := govmomi.NewClient(ctx, u, true)
	if err != nil {
		t.Fatal(err)
	}
	f := find.NewFinder(c.Client)
	dc, err := f.Datacenter(ctx, "DC0")
	if err != nil {
		t.Fatal(err)
	}
	f.SetDatacenter(dc)
	folders, err := dc.Folders(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := f.ResourcePool(ctx, "DC0_C0/Resources")
	if err != nil {
		t.Fatal(err)
	}
	disk := func(key int32, file string, unit int32) types.BaseVirtualDeviceConfigSpec {
		return &types.VirtualDeviceConfigSpec{Operation: types.VirtualDeviceConfigSpecOperationAdd,
			FileOperation: types.VirtualDeviceConfigSpecFileOperationCreate,
			Device: &types.VirtualDisk{CapacityInKB: 1024, VirtualDevice: types.VirtualDevice{Key: key, ControllerKey: 1000, UnitNumber: &unit,
				Backing: &types.VirtualDiskFlatVer2BackingInfo{VirtualDeviceFileBackingInfo: types.VirtualDeviceFileBackingInfo{FileName: file}}}}}
	}
	spec := types.VirtualMachineConfigSpec{Name: "lab-m1", GuestId: "otherGuest64",
		Files:       &types.VirtualMachineFileInfo{VmPathName: "[LocalDS_0]"},
		ExtraConfig: []types.BaseOptionValue{&types.OptionValue{Key: vsphere.TagImage, Value: "harmony-node-1"}},
		DeviceChange: []types.BaseVirtualDeviceConfigSpec{
			&types.VirtualDeviceConfigSpec{Operation: types.VirtualDeviceConfigSpecOperationAdd, Device: &types.ParaVirtualSCSIController{
				VirtualSCSIController: types.VirtualSCSIController{VirtualController: types.VirtualController{VirtualDevice: types.VirtualDevice{Key: 1000}, BusNumber: 0}}}},
			disk(2000, "[LocalDS_0] lab-m1/lab-m1.vmdk", 0),
			disk(2001, "[LocalDS_0] lab-m1/data.vmdk", 1),
		}}
	task, err := folders.VmFolder.CreateVM(ctx, spec, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	info, err := task.WaitForResult(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ref := info.Result.(types.ManagedObjectReference)

	vms, err := listVMs(ctx, c.Client)
	if err != nil {
		t.Fatal(err)
	}
	if len(vms) != 1 || vms[0].Name != "lab-m1" || vms[0].On || vms[0].Image != "harmony-node-1" ||
		!slices.Equal(vms[0].DataDisks, []string{"[LocalDS_0] lab-m1/data.vmdk"}) {
		t.Fatalf("listVMs = %+v", vms)
	}
	ptask, err := object.NewVirtualMachine(c.Client, ref).PowerOn(ctx)
	if err != nil || ptask.Wait(ctx) != nil {
		t.Fatalf("power on: %v", err)
	}
	if vms, err = listVMs(ctx, c.Client); err != nil || !vms[0].On {
		t.Fatalf("after power on: %+v, %v", vms, err)
	}

	g := vmGuestinfo{c: c.Client, ref: ref}
	if _, found, err := g.Get(ctx, "guestinfo.harmony.bootstrap"); found || err != nil {
		t.Fatalf("a missing key: found=%v err=%v", found, err)
	}
	if err := g.Set(ctx, "guestinfo.harmony.bootstrap", "abc"); err != nil {
		t.Fatal(err)
	}
	if v, found, err := g.Get(ctx, "guestinfo.harmony.bootstrap"); v != "abc" || !found || err != nil {
		t.Fatalf("after set: %q %v %v", v, found, err)
	}
}
