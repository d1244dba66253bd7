package vsphere

import (
	"context"
	"errors"
	"testing"

	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/types"

	"github.com/harmonykaas/harmony/internal/vcsim"
)

// simSession is a session on a vcsim of the test's, as provider name.
func simSession(t *testing.T, name string) (*vcsim.Sim, *Session) {
	t.Helper()
	sim, err := vcsim.Start(vcsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	s, err := Connect(context.Background(), sim.Provider(name, nil))
	if err != nil {
		t.Fatal(err)
	}
	return sim, s
}

// newSwapFixture is a session on vcsim with a cluster folder and a small
// VM with a SCSI controller to clone from.
func newSwapFixture(t *testing.T) (context.Context, *Session, *object.Folder, string) {
	t.Helper()
	ctx := context.Background()
	_, s := simSession(t, "swap")
	folder, err := s.ClusterFolder(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	scsi, err := object.SCSIControllerTypes().CreateSCSIController("lsilogic")
	if err != nil {
		t.Fatal(err)
	}
	task, err := folder.CreateVM(ctx, types.VirtualMachineConfigSpec{
		Name: "template", GuestId: "debian12_64Guest", NumCPUs: 1, MemoryMB: 512,
		Files:        &types.VirtualMachineFileInfo{VmPathName: "[LocalDS_0]"},
		DeviceChange: []types.BaseVirtualDeviceConfigSpec{&types.VirtualDeviceConfigSpec{Operation: types.VirtualDeviceConfigSpecOperationAdd, Device: scsi}},
	}, s.pool, nil)
	if err == nil {
		err = task.Wait(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	return ctx, s, folder, folder.InventoryPath + "/template"
}

// A master swap at the vSphere level: the old VM powers off, gives up its
// disk and its name; a clone of the same name and BIOS UUID takes the
// disk. The disk never sits on two VMs, and a missing disk is said so.
func TestSwapMovesTheDataDisk(t *testing.T) {
	ctx, s, folder, template := newSwapFixture(t)
	const uuid = "4213a7c6-2f0e-4b1d-9a3e-5c1b2d3e4f50"
	clone := func(name string) types.ManagedObjectReference {
		t.Helper()
		ref, err := s.Clone(ctx, CloneSpec{Template: template, Name: name, Folder: folder, Datastore: "LocalDS_0", UUID: uuid})
		if err != nil {
			t.Fatal(err)
		}
		return ref
	}
	old := clone("c-m1")
	if got, _ := s.BIOSUUID(ctx, old); got != uuid {
		t.Errorf("clone's BIOS UUID %q, want %q", got, uuid)
	}
	disk := DataDisk{Datastore: "LocalDS_0", Dir: "harmony-data/c", Name: "c-m1", SizeGiB: 1}
	if err := s.EnsureDataDisk(ctx, old, disk); err != nil {
		t.Fatal(err)
	}
	if err := s.PowerOn(ctx, old); err != nil {
		t.Fatal(err)
	}

	// The swap.
	if err := s.PowerOff(ctx, old); err != nil {
		t.Fatal(err)
	}
	if paths, err := s.DetachPersistentDisks(ctx, old); err != nil || len(paths) != 1 || paths[0] != disk.Path() {
		t.Fatalf("detach: %v, %v", paths, err)
	}
	// A rename from a controller stopped meanwhile may still be running:
	// the one after it must not fail on the name the VM took itself.
	if _, err := s.VM(old).Rename(ctx, "c-m1-old"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := s.Rename(ctx, old, "c-m1-old"); err != nil {
			t.Fatal(err)
		}
	}
	fresh := clone("c-m1")
	if fresh == old {
		t.Fatal("the clone is the old VM: the name was not freed")
	}
	if got, _ := s.BIOSUUID(ctx, fresh); got != uuid {
		t.Errorf("the new VM's BIOS UUID %q, want the old one's %q", got, uuid)
	}
	if err := s.AttachDataDisk(ctx, folder, fresh, disk); err != nil {
		t.Fatal(err)
	}
	// Again: nothing to do.
	if err := s.AttachDataDisk(ctx, folder, fresh, disk); err != nil {
		t.Fatalf("attach again: %v", err)
	}
	// A rollback must detach it from the new VM first.
	var inUse *DiskInUseError
	if err := s.AttachDataDisk(ctx, folder, old, disk); !errors.As(err, &inUse) || len(inUse.VMs) != 1 || inUse.VMs[0] != "c-m1" {
		t.Errorf("attach to the old VM while the new one holds it: %v", err)
	}
	users, err := s.DiskUsers(ctx, folder, disk.Path())
	if err != nil || len(users) != 1 || users[0].Ref != fresh {
		t.Errorf("disk users %+v, %v; want the new VM only", users, err)
	}
	// The old VM's destruction keeps the disk on the new one.
	if err := s.Destroy(ctx, old); err != nil {
		t.Fatal(err)
	}
	if users, _ := s.DiskUsers(ctx, folder, disk.Path()); len(users) != 1 || users[0].Ref != fresh {
		t.Errorf("after destroying the old VM the disk is on %+v", users)
	}

	// A disk that is not there cannot move, and nothing makes one.
	gone := DataDisk{Datastore: "LocalDS_0", Dir: "harmony-data/c", Name: "c-m9", SizeGiB: 1}
	if err := s.AttachDataDisk(ctx, folder, fresh, gone); !errors.Is(err, ErrDiskMissing) {
		t.Errorf("attach a missing disk: %v, want ErrDiskMissing", err)
	}
	if exists, _ := s.diskExists(ctx, gone); exists {
		t.Error("attaching a missing disk made one")
	}
}
