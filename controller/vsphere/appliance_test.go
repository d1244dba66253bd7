package vsphere

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	"github.com/harmonykaas/harmony/internal/vcsim"
)

// applianceFixture is a session on vcsim and a deployed, running appliance
// "harmony" of image 1.0.0, as an operator deploys it from the OVA: the
// deploy wizard's properties, a guestinfo key, more CPUs than the OVF's.
type applianceFixture struct {
	ctx context.Context
	s   *Session
	sim *vcsim.Sim
	// uuid is the deployed appliance's instance UUID; dataDisk its data
	// disk as deployed, in its folder.
	uuid, dataDisk string
}

func newApplianceFixture(t *testing.T) *applianceFixture {
	t.Helper()
	ctx := context.Background()
	sim, s := simSession(t, "appliance")
	f := &applianceFixture{ctx: ctx, s: s, sim: sim}
	ova, _ := applianceOVA(t, "1.0.0")
	ref := f.deploy(t, "harmony", ova)
	if err := s.reconfigure(ctx, s.VM(ref), types.VirtualMachineConfigSpec{NumCPUs: 6,
		ExtraConfig: optionValues(map[string]string{"guestinfo.harmony.network": "static", "guestinfo.vmtools.versionString": "12.1.5"})}); err != nil {
		t.Fatal(err)
	}
	if err := s.PowerOn(ctx, ref); err != nil {
		t.Fatal(err)
	}
	v := f.vm(t, "harmony")
	f.uuid, f.dataDisk = v.uuid, diskFile(v.disks[1])
	return f
}

// deploy imports an appliance OVA as the operator's wizard does.
func (f *applianceFixture) deploy(t *testing.T, name, ova string) types.ManagedObjectReference {
	t.Helper()
	imported, err := ImportOVA(f.ctx, f.s.Client.Client, ImportOptions{
		OVA: ova, Datacenter: f.s.datacenter.InventoryPath, Datastore: "LocalDS_0", ResourcePool: f.s.poolPath(),
		Folder: f.s.folder.InventoryPath, Name: name, Networks: map[string]string{"nic0": "VM Network"},
		Properties: map[string]string{"harmony.hostname": "harmony-cp-1", "harmony.gateway": "198.18.0.1", "harmony.controller_vip": "198.18.0.10"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return imported.VM
}

func (f *applianceFixture) vm(t *testing.T, name string) *applianceVM {
	t.Helper()
	v, err := f.s.readApplianceVM(f.ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// snapshot takes a snapshot of the VM, and returns what removes it.
func (f *applianceFixture) snapshot(t *testing.T, name string) func() {
	t.Helper()
	vm := f.s.VM(f.vm(t, name).ref)
	task, err := vm.CreateSnapshot(f.ctx, "by the test", "", false, false)
	if err == nil {
		err = task.Wait(f.ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	return func() {
		task, err := vm.RemoveAllSnapshot(f.ctx, nil)
		if err == nil {
			err = task.Wait(f.ctx)
		}
		if err != nil {
			t.Error(err)
		}
	}
}

func (f *applianceFixture) diskThere(t *testing.T, file string) bool {
	t.Helper()
	d, err := dataDiskAt(file)
	if err != nil {
		t.Fatal(err)
	}
	there, err := f.s.diskExists(f.ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	return there
}

func (f *applianceFixture) upgrade(ova string) (*ApplianceUpgraded, error) {
	return f.s.UpgradeAppliance(f.ctx, ApplianceUpgrade{Name: "harmony", OVA: ova})
}

// checkUpgraded requires the state a finished upgrade leaves: the new VM
// is "harmony", running the version with the old one's settings and the
// data disk; the old one is "harmony-previous", off, with its system disk
// only.
func (f *applianceFixture) checkUpgraded(t *testing.T, version, oldUUID, dataDisk string) *applianceVM {
	t.Helper()
	cur, prev := f.vm(t, "harmony"), f.vm(t, "harmony-previous")
	if cur == nil || prev == nil {
		t.Fatalf("after the upgrade: harmony %v, harmony-previous %v; want both", cur != nil, prev != nil)
	}
	if cur.version() != version || cur.power != types.VirtualMachinePowerStatePoweredOn {
		t.Errorf("harmony: version %q, %s; want %s, powered on", cur.version(), cur.power, version)
	}
	if cur.tags[TagReplaces] != oldUUID || prev.uuid != oldUUID {
		t.Errorf("harmony replaces %q, harmony-previous is %q; want both %q", cur.tags[TagReplaces], prev.uuid, oldUUID)
	}
	if len(cur.disks) != 2 || diskFile(cur.disks[1]) != dataDisk || len(cur.ownDisks()) != 1 {
		t.Errorf("harmony's disks %v, want its system disk and %s", diskFiles(cur), dataDisk)
	}
	if prev.power != types.VirtualMachinePowerStatePoweredOff || len(prev.disks) != 1 || prev.hasDisk(dataDisk) != nil {
		t.Errorf("harmony-previous: %s, disks %v; want powered off with its system disk only", prev.power, diskFiles(prev))
	}
	if !f.diskThere(t, dataDisk) {
		t.Errorf("the data disk %s is not on the datastore", dataDisk)
	}
	for k, want := range map[string]string{"harmony.hostname": "harmony-cp-1", "harmony.gateway": "198.18.0.1", "harmony.controller_vip": "198.18.0.10"} {
		if cur.props[k] != want {
			t.Errorf("harmony's %s = %q, want %q, the old appliance's", k, cur.props[k], want)
		}
	}
	if cur.tags["guestinfo.harmony.network"] != "static" || cur.cpus != 6 {
		t.Errorf("harmony: guestinfo.harmony.network %q, %d CPUs; want the old one's static and 6", cur.tags["guestinfo.harmony.network"], cur.cpus)
	}
	var tools mo.VirtualMachine
	if err := f.s.VM(cur.ref).Properties(f.ctx, cur.ref, []string{"config.extraConfig"}, &tools); err != nil {
		t.Fatal(err)
	}
	for _, o := range tools.Config.ExtraConfig {
		if o.GetOptionValue().Key == "guestinfo.vmtools.versionString" {
			t.Error("VMware Tools' own guestinfo key was copied to the new VM")
		}
	}
	return cur
}

func diskFiles(v *applianceVM) []string {
	var out []string
	for _, d := range v.disks {
		out = append(out, diskFile(d))
	}
	return out
}

func TestUpgradeApplianceMovesItsDataDisk(t *testing.T) {
	f := newApplianceFixture(t)
	next, _ := applianceOVA(t, "1.1.0")
	done, err := f.upgrade(next)
	if err != nil {
		t.Fatal(err)
	}
	const moved = "[LocalDS_0] harmony-appliance/harmony.vmdk"
	if done.DataDisk != moved || done.FromVersion != "1.0.0" || done.ToVersion != "1.1.0" || done.Previous != "harmony-previous" {
		t.Errorf("upgrade said %+v", done)
	}
	cur := f.checkUpgraded(t, "1.1.0", f.uuid, moved)
	if f.diskThere(t, f.dataDisk) {
		t.Errorf("the data disk is still at %s as well as at %s", f.dataDisk, moved)
	}
	if strings.HasPrefix(moved, cur.dir) || strings.Contains(f.dataDisk, ApplianceDataDir) {
		t.Fatalf("test assumption: the new VM's folder %s, the deployed data disk %s", cur.dir, f.dataDisk)
	}
	blank := filepath.Join(cur.dir, "disk-1.vmdk")
	if f.diskThere(t, blank) {
		t.Errorf("the new VM's blank data disk %s is still on the datastore", blank)
	}

	// Run again with the same OVA: it is done, and nothing changes.
	if _, err := f.upgrade(next); err != nil {
		t.Fatalf("a finished upgrade run again: %v", err)
	}
	if again := f.vm(t, "harmony"); again.ref != cur.ref || len(again.disks) != 2 {
		t.Errorf("the second run changed the appliance: %s %v, was %s", again.ref.Value, diskFiles(again), cur.ref.Value)
	}

	// Another upgrade waits until the operator has deleted the previous VM.
	third, _ := applianceOVA(t, "1.2.0")
	if _, err := f.upgrade(third); err == nil || !strings.Contains(err.Error(), "harmony-previous exists") {
		t.Fatalf("an upgrade beside harmony-previous: %v, want a refusal naming it", err)
	}
	// Deleting the old VM, as an operator does, cannot take the disk.
	if err := f.s.Destroy(f.ctx, f.vm(t, "harmony-previous").ref); err != nil {
		t.Fatal(err)
	}
	if !f.diskThere(t, moved) {
		t.Fatal("destroying harmony-previous deleted the data disk")
	}
	if _, err := f.upgrade(third); err != nil {
		t.Fatal(err)
	}
	// The disk is outside every VM's folder already: it stays where it is.
	f.checkUpgraded(t, "1.2.0", cur.uuid, moved)
}

// A run stopped at any step is finished by the next one.
func TestUpgradeApplianceResumes(t *testing.T) {
	f := newApplianceFixture(t)
	next, _ := applianceOVA(t, "1.1.0")

	// An import cut short before the new VM was tagged: it is made again.
	f.deploy(t, "harmony-1.1.0", next)
	// Each fault stops a run at a later step; a guest that cannot shut
	// down is powered off, so that step needs both to fail.
	for _, methods := range [][]string{{"ShutdownGuest", "PowerOffVM_Task"}, {"MoveVirtualDisk_Task"}, {"ReconfigVM_Task"}, {"Rename_Task"}, {"PowerOnVM_Task"}} {
		for _, m := range methods {
			f.sim.AddFault(m, 1)
		}
		if _, err := f.upgrade(next); err == nil {
			t.Fatalf("the upgrade passed a fault in %v", methods)
		}
	}
	if _, err := f.upgrade(next); err != nil {
		t.Fatalf("the run after the faults: %v", err)
	}
	f.checkUpgraded(t, "1.1.0", f.uuid, "[LocalDS_0] harmony-appliance/harmony.vmdk")
}

func TestUpgradeApplianceRefuses(t *testing.T) {
	f := newApplianceFixture(t)
	next, _ := applianceOVA(t, "1.1.0")
	node := filepath.Join(t.TempDir(), "node.ova")
	if err := vcsim.NodeOVA(f.ctx, node, "1.1.0"); err != nil {
		t.Fatal(err)
	}
	other, _ := applianceOVA(t, "1.0.0")
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T)
		u     ApplianceUpgrade
		want  string
	}{
		{name: "a node OVA", u: ApplianceUpgrade{Name: "harmony", OVA: node}, want: `harmony.image.role "node"`},
		{name: "no such VM", u: ApplianceUpgrade{Name: "nowhere", OVA: next}, want: "no VM nowhere in"},
		{name: "a bad name", u: ApplianceUpgrade{Name: "a/b", OVA: next}, want: `appliance name "a/b"`},
		{name: "not an appliance", setup: func(t *testing.T) {
			if _, err := ImportOVA(f.ctx, f.s.Client.Client, ImportOptions{OVA: node, Datastore: "LocalDS_0", ResourcePool: f.s.poolPath(),
				Folder: f.s.folder.InventoryPath, Name: "worker-1", Networks: map[string]string{"nic0": "VM Network"}}); err != nil {
				t.Fatal(err)
			}
		}, u: ApplianceUpgrade{Name: "worker-1", OVA: next}, want: `worker-1: harmony.image.role is "node"`},
		{name: "a snapshot of the appliance", setup: func(t *testing.T) {
			t.Cleanup(f.snapshot(t, "harmony"))
		}, u: ApplianceUpgrade{Name: "harmony", OVA: next}, want: "harmony has snapshots"},
		// Someone else's VM of the name the upgrade needs: left alone.
		{name: "a foreign NAME-VERSION", setup: func(t *testing.T) {
			if err := f.s.PowerOn(f.ctx, f.deploy(t, "harmony-1.1.0", other)); err != nil {
				t.Fatal(err)
			}
		}, u: ApplianceUpgrade{Name: "harmony", OVA: next}, want: "harmony-1.1.0 exists and is not an upgrade of harmony"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != nil {
				tc.setup(t)
			}
			_, err := f.s.UpgradeAppliance(f.ctx, tc.u)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
			// The appliance is as it was: running, with its own data disk.
			v := f.vm(t, "harmony")
			if v.power != types.VirtualMachinePowerStatePoweredOn || v.hasDisk(f.dataDisk) == nil || v.tags[TagReplaces] != "" {
				t.Errorf("a refused upgrade changed the appliance: %s, disks %v", v.power, diskFiles(v))
			}
			if f.vm(t, "harmony-previous") != nil {
				t.Error("a refused upgrade renamed a VM to harmony-previous")
			}
		})
	}
}

func (f *applianceFixture) rollBack() (*ApplianceRolledBack, error) {
	return f.s.RollBackAppliance(f.ctx, "harmony", 0, nil)
}

// checkRolledBack requires the state a finished rollback leaves: the old
// VM is "harmony" again, running with the data disk; the new one is off,
// without it, untagged, under another name.
func (f *applianceFixture) checkRolledBack(t *testing.T, dataDisk, replacement string) {
	t.Helper()
	cur, repl := f.vm(t, "harmony"), f.vm(t, replacement)
	if cur == nil || repl == nil || f.vm(t, "harmony-previous") != nil {
		t.Fatalf("after the rollback: harmony %v, %s %v, harmony-previous %v; want the first two only",
			cur != nil, replacement, repl != nil, f.vm(t, "harmony-previous") != nil)
	}
	if cur.uuid != f.uuid || cur.power != types.VirtualMachinePowerStatePoweredOn || cur.hasDisk(dataDisk) == nil || len(cur.disks) != 2 {
		t.Errorf("harmony: %s (want %s), %s, disks %v; want the old VM running with %s", cur.uuid, f.uuid, cur.power, diskFiles(cur), dataDisk)
	}
	if repl.power != types.VirtualMachinePowerStatePoweredOff || repl.hasDisk(dataDisk) != nil || repl.tags[TagReplaces] != "" || repl.tags[TagDataDisk] != "" {
		t.Errorf("%s: %s, disks %v, tags %v; want it off, without the data disk, untagged", replacement, repl.power, diskFiles(repl), repl.tags)
	}
	if !f.diskThere(t, dataDisk) {
		t.Errorf("the data disk %s is not on the datastore", dataDisk)
	}
}

func TestRollBackAppliance(t *testing.T) {
	f := newApplianceFixture(t)
	next, _ := applianceOVA(t, "1.1.0")
	if _, err := f.upgrade(next); err != nil {
		t.Fatal(err)
	}
	const moved = "[LocalDS_0] harmony-appliance/harmony.vmdk"
	// A snapshot of the new VM makes its data disk a delta file: refused
	// until it is gone.
	removeSnapshot := f.snapshot(t, "harmony")
	if _, err := f.rollBack(); err == nil || !strings.Contains(err.Error(), "harmony has snapshots") {
		t.Fatalf("a rollback of a VM with snapshots: %v, want a refusal", err)
	}
	removeSnapshot()
	// Each fault stops a run at a later step; the run after them finishes.
	for _, method := range []string{"ReconfigVM_Task", "Rename_Task", "PowerOnVM_Task"} {
		f.sim.AddFault(method, 1)
		if _, err := f.rollBack(); err == nil {
			t.Fatalf("the rollback passed a fault in %s", method)
		}
	}
	done, err := f.rollBack()
	if err != nil {
		t.Fatal(err)
	}
	if done.Replacement != "harmony-1.1.0-rolled-back" || done.DataDisk != moved || done.Version != "1.0.0" {
		t.Errorf("rollback said %+v", done)
	}
	f.checkRolledBack(t, moved, "harmony-1.1.0-rolled-back")
	if cur := f.vm(t, "harmony"); cur.tags[TagDataDisk] != moved {
		t.Errorf("harmony's %s = %q, want %s: its next upgrade finds the disk by it", TagDataDisk, cur.tags[TagDataDisk], moved)
	}
	if _, err := f.rollBack(); err == nil || !strings.Contains(err.Error(), "nothing to roll back") {
		t.Errorf("a second rollback: %v, want nothing to roll back", err)
	}

	// The operator deletes the rolled-back VM and upgrades again: the disk,
	// outside the old VM's folder now, goes across as it is.
	if err := f.s.Destroy(f.ctx, f.vm(t, "harmony-1.1.0-rolled-back").ref); err != nil {
		t.Fatal(err)
	}
	if _, err := f.upgrade(next); err != nil {
		t.Fatal(err)
	}
	f.checkUpgraded(t, "1.1.0", f.uuid, moved)
}

// A rollback of an upgrade stopped after the old VM gave up its disk and
// before the disk moved: the disk goes back where it was, in the old VM's
// folder.
func TestRollBackApplianceUpgradeCutShort(t *testing.T) {
	f := newApplianceFixture(t)
	next, _ := applianceOVA(t, "1.1.0")
	f.sim.AddFault("MoveVirtualDisk_Task", 1)
	if _, err := f.upgrade(next); err == nil {
		t.Fatal("the upgrade passed a fault in MoveVirtualDisk_Task")
	}
	if old := f.vm(t, "harmony"); old.hasDisk(f.dataDisk) != nil || old.power != types.VirtualMachinePowerStatePoweredOff {
		t.Fatalf("test assumption: the cut-short upgrade left harmony %s with %v", old.power, diskFiles(old))
	}
	if _, err := f.rollBack(); err != nil {
		t.Fatal(err)
	}
	f.checkRolledBack(t, f.dataDisk, "harmony-1.1.0-rolled-back")
	if cur := f.vm(t, "harmony"); cur.tags[TagDataDisk] != "" || len(cur.ownDisks()) != 2 {
		t.Errorf("harmony: %s %q, disks %v; want both disks in its folder, untagged", TagDataDisk, cur.tags[TagDataDisk], diskFiles(cur))
	}
}

// A disk at both places is a move still running or failed midway: the
// upgrade stops and deletes neither; once the partial copy is gone, it
// goes on.
func TestUpgradeApplianceStopsAtAHalfMovedDisk(t *testing.T) {
	f := newApplianceFixture(t)
	next, _ := applianceOVA(t, "1.1.0")
	f.sim.AddFault("MoveVirtualDisk_Task", 1)
	if _, err := f.upgrade(next); err == nil {
		t.Fatal("the upgrade passed a fault in MoveVirtualDisk_Task")
	}
	const moved = "[LocalDS_0] harmony-appliance/harmony.vmdk"
	partial, err := dataDiskAt(moved)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.s.createDataDisk(f.ctx, DataDisk{Datastore: partial.Datastore, Dir: partial.Dir, Name: partial.Name, SizeGiB: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.upgrade(next); err == nil || !strings.Contains(err.Error(), "at both") {
		t.Fatalf("an upgrade with the disk at both places: %v, want a refusal", err)
	}
	if !f.diskThere(t, f.dataDisk) || !f.diskThere(t, moved) {
		t.Fatal("the refused upgrade deleted a copy of the disk")
	}
	if err := f.s.DeleteDataDisk(f.ctx, partial); err != nil {
		t.Fatal(err)
	}
	if _, err := f.upgrade(next); err != nil {
		t.Fatal(err)
	}
	f.checkUpgraded(t, "1.1.0", f.uuid, moved)
}
