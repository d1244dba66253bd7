package vsphere

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	"github.com/harmonykaas/harmony/images/components"
	"github.com/harmonykaas/harmony/ova/archive"
	"github.com/harmonykaas/harmony/ova/ovf"
)

// Upgrading the control-plane appliance by reimage, as tenant masters are
// upgraded: a VM of the newer OVA takes the old appliance's data disk
// (the controller's CA, store and backups, etcd's directory, the agent's
// identity), its settings and its name. The old VM stays, powered off and
// without the disk, for a rollback. Every step reads what vCenter has
// before it acts, so a run cut short anywhere is finished by the next.

// ExtraConfig keys of the appliance upgrade, on the new appliance VM.
const (
	// TagReplaces is the instance UUID of the appliance VM this one
	// replaces: what pairs the two across a crash and the renames.
	TagReplaces = "harmony.appliance.replaces"
	// TagDataDisk is the appliance's data disk, once it lives outside any
	// VM's folder.
	TagDataDisk = "harmony.appliance.dataDisk"
	// TagDataDiskFrom is where the data disk was before it moved: the old
	// VM's folder, for a run that stopped between detach and move.
	TagDataDiskFrom = "harmony.appliance.dataDiskFrom"
)

// ApplianceDataDir is the datastore folder appliance data disks move to
// on their first upgrade: outside every VM's folder, so that deleting an
// old appliance VM can never take the disk with it.
const ApplianceDataDir = "harmony-appliance"

// appliancePreviousSuffix names the old appliance VM after an upgrade.
const appliancePreviousSuffix = "-previous"

// ApplianceUpgrade says which appliance to move to which OVA.
type ApplianceUpgrade struct {
	// Name is the appliance VM's name in the provider's folder.
	Name string
	OVA  string
	// ShutdownTimeout bounds the guest's own shutdown; after it the VM is
	// powered off (the controller's store survives a power cut).
	ShutdownTimeout time.Duration
	Progress        func(uploaded int64)
	Log             *slog.Logger
}

// ApplianceUpgraded is what an upgrade did.
type ApplianceUpgraded struct {
	// Previous is the old VM's new name: powered off, without the data
	// disk, kept for a rollback.
	Previous string
	// DataDisk is the data disk's datastore path, now on the new VM.
	DataDisk    string
	FromVersion string
	ToVersion   string
}

// applianceVM is what the upgrade reads of one VM.
type applianceVM struct {
	ref     types.ManagedObjectReference
	name    string
	uuid    string
	power   types.VirtualMachinePowerState
	dir     string
	tags    map[string]string
	props   map[string]string // vApp property values, by id
	userSet map[string]bool   // vApp properties the user may set
	nic     string            // the first NIC's network name
	cpus    int32
	memMiB  int64
	disks   []*types.VirtualDisk // in bus order
	// snapshots: the VM's disks are delta files on their base disks,
	// which cannot move or change VMs alone.
	snapshots bool
}

func (v *applianceVM) role() string    { return v.props["harmony.image.role"] }
func (v *applianceVM) version() string { return v.props["harmony.image.version"] }

// ownDisks are the disks in the VM's own folder, in bus order.
func (v *applianceVM) ownDisks() []*types.VirtualDisk {
	var own []*types.VirtualDisk
	for _, d := range v.disks {
		if path.Dir(diskFile(d)) == v.dir {
			own = append(own, d)
		}
	}
	return own
}

func (v *applianceVM) hasDisk(file string) *types.VirtualDisk {
	for _, d := range v.disks {
		if diskFile(d) == file {
			return d
		}
	}
	return nil
}

func (s *Session) readApplianceVM(ctx context.Context, name string) (*applianceVM, error) {
	vm, err := s.FindVM(ctx, s.folder, name)
	if err != nil || vm == nil {
		return nil, err
	}
	var m mo.VirtualMachine
	if err := vm.Properties(ctx, vm.Reference(), []string{"name", "config", "runtime.powerState", "snapshot"}, &m); err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if m.Config == nil {
		return nil, fmt.Errorf("read %s: vCenter reports no configuration", name)
	}
	v := &applianceVM{ref: m.Self, name: m.Name, uuid: m.Config.InstanceUuid, power: m.Runtime.PowerState,
		dir: path.Dir(m.Config.Files.VmPathName), tags: map[string]string{}, props: map[string]string{},
		userSet: map[string]bool{}, cpus: m.Config.Hardware.NumCPU, memMiB: int64(m.Config.Hardware.MemoryMB),
		snapshots: m.Snapshot != nil && len(m.Snapshot.RootSnapshotList) > 0}
	for _, o := range m.Config.ExtraConfig {
		if o := o.GetOptionValue(); strings.HasPrefix(o.Key, "harmony.") || strings.HasPrefix(o.Key, "guestinfo.harmony.") {
			v.tags[o.Key], _ = o.Value.(string)
		}
	}
	if m.Config.VAppConfig != nil {
		for _, p := range m.Config.VAppConfig.GetVmConfigInfo().Property {
			v.props[p.Id] = cmp.Or(p.Value, p.DefaultValue)
			v.userSet[p.Id] = p.UserConfigurable != nil && *p.UserConfigurable
		}
	}
	devices := object.VirtualDeviceList(m.Config.Hardware.Device)
	for _, d := range devices.SelectByType((*types.VirtualDisk)(nil)) {
		v.disks = append(v.disks, d.(*types.VirtualDisk))
	}
	slices.SortFunc(v.disks, func(a, b *types.VirtualDisk) int {
		return cmp.Or(cmp.Compare(a.ControllerKey, b.ControllerKey), cmp.Compare(deref(a.UnitNumber), deref(b.UnitNumber)))
	})
	// The first NIC's standard network; another backing (a distributed
	// port group) leaves it to the provider's network.
	if nics := devices.SelectByType((*types.VirtualEthernetCard)(nil)); len(nics) > 0 {
		if b, ok := nics[0].GetVirtualDevice().Backing.(*types.VirtualEthernetCardNetworkBackingInfo); ok {
			v.nic = b.DeviceName
		}
	}
	return v, nil
}

func deref(p *int32) int32 {
	if p == nil {
		return -1
	}
	return *p
}

// UpgradeAppliance moves the appliance u.Name to u.OVA by reimage:
//
//  1. the OVA is imported as NAME-VERSION, with the old VM's settings (its
//     vApp properties, guestinfo, CPUs, memory and network), powered off;
//  2. the old appliance is shut down;
//  3. its data disk leaves the old VM's folder, the first time, for
//     [datastore] harmony-appliance/NAME.vmdk, and goes onto the new VM in
//     place of the new VM's blank one;
//  4. the old VM becomes NAME-previous, the new one NAME, and it is
//     powered on.
//
// The data disk is never deleted, and never on two VMs. A run stopped at
// any point is finished by running it again with the same OVA.
func (s *Session) UpgradeAppliance(ctx context.Context, u ApplianceUpgrade) (*ApplianceUpgraded, error) {
	log := cmp.Or(u.Log, slog.New(slog.DiscardHandler))
	if u.ShutdownTimeout <= 0 {
		u.ShutdownTimeout = 5 * time.Minute
	}
	if u.Name == "" || len(u.Name) > 60 || strings.ContainsAny(u.Name, "/\\%") {
		return nil, fmt.Errorf("appliance name %q: want 1-60 characters without '/', '\\' or '%%'", u.Name)
	}
	desc, err := readOVA(ctx, u.OVA)
	if err != nil {
		return nil, err
	}
	role, version := imageProperty(desc, "harmony.image.role"), imageProperty(desc, "harmony.image.version")
	if role != components.RoleControlPlane || version == "" {
		return nil, fmt.Errorf("%s: harmony.image.role %q, harmony.image.version %q: not a control-plane appliance's OVA", u.OVA, role, version)
	}

	old, next, err := s.applianceUpgradePair(ctx, u.Name, version)
	if err != nil {
		return nil, err
	}
	if err := refuseSnapshots(old, next); err != nil {
		return nil, err
	}
	if next == nil {
		if next, err = s.importNextAppliance(ctx, u, desc, old, log); err != nil {
			return nil, err
		}
	}
	done := &ApplianceUpgraded{Previous: u.Name + appliancePreviousSuffix, DataDisk: next.tags[TagDataDisk],
		FromVersion: old.version(), ToVersion: version}

	if err := s.shutDown(ctx, old, u.ShutdownTimeout, log); err != nil {
		return nil, err
	}
	if err := s.moveApplianceDisk(ctx, old, next, log); err != nil {
		return nil, err
	}
	if err := s.giveApplianceDisk(ctx, next, log); err != nil {
		return nil, err
	}
	if err := s.Rename(ctx, old.ref, u.Name+appliancePreviousSuffix); err != nil {
		return nil, err
	}
	if err := s.Rename(ctx, next.ref, u.Name); err != nil {
		return nil, err
	}
	if err := s.PowerOn(ctx, next.ref); err != nil {
		return nil, err
	}
	log.Info("appliance upgraded", "vm", u.Name, "from", done.FromVersion, "to", done.ToVersion,
		"data_disk", done.DataDisk, "previous", done.Previous)
	return done, nil
}

// refuseSnapshots refuses VMs with snapshots: their data disk is a delta
// file on the base disk, and moving either alone would break the chain.
func refuseSnapshots(vms ...*applianceVM) error {
	for _, v := range vms {
		if v != nil && v.snapshots {
			return fmt.Errorf("%s has snapshots, so its disks are delta files that cannot move alone: delete its snapshots first", v.name)
		}
	}
	return nil
}

// readOVA checks the archive whole and returns its descriptor.
func readOVA(ctx context.Context, file string) (*ovf.Descriptor, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("ova: %w", err)
	}
	defer f.Close()
	contents, err := archive.Validate(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("ova %s: %w", file, err)
	}
	return contents.Descriptor, nil
}

// imageProperty is a fixed property's value, such as harmony.image.role.
func imageProperty(d *ovf.Descriptor, key string) string {
	for _, p := range d.Properties {
		if p.Key == key {
			return p.Default
		}
	}
	return ""
}

// applianceUpgradePair finds the appliance and the VM replacing it: a VM
// tagged as its replacement, or, after the renames, NAME replacing
// NAME-previous. next is nil when no upgrade is under way.
func (s *Session) applianceUpgradePair(ctx context.Context, name, version string) (old, next *applianceVM, err error) {
	cur, err := s.readApplianceVM(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	prev, err := s.readApplianceVM(ctx, name+appliancePreviousSuffix)
	if err != nil {
		return nil, nil, err
	}
	// After the renames: the steps left, if any, are the power-on; a
	// finished upgrade has none.
	if cur != nil && prev != nil && cur.tags[TagReplaces] == prev.uuid && cur.version() == version {
		return prev, cur, nil
	}
	if cur == nil {
		return nil, nil, fmt.Errorf("no VM %s in %s", name, s.folder.InventoryPath)
	}
	if cur.role() != components.RoleControlPlane {
		return nil, nil, fmt.Errorf("%s: harmony.image.role is %q: not a control-plane appliance", name, cur.role())
	}
	if prev != nil {
		return nil, nil, fmt.Errorf("%s exists, the appliance from before the last upgrade: delete it first (its data disk moved to %s)",
			prev.name, name)
	}

	// A run cut short before the renames.
	vms, err := s.VMs(ctx, s.folder)
	if err != nil {
		return nil, nil, err
	}
	for _, vm := range vms {
		if vm.Tags[TagReplaces] != cur.uuid || vm.Ref == cur.ref {
			continue
		}
		if next, err = s.readApplianceVM(ctx, vm.Name); err != nil {
			return nil, nil, err
		}
		if next.version() != version {
			return nil, nil, fmt.Errorf("%s is an upgrade of %s to %s under way: run it again with that OVA, or delete %s",
				next.name, name, next.version(), next.name)
		}
		return cur, next, nil
	}

	// An import cut short before the new VM was tagged: made by this
	// command, holding nothing of the old one's.
	half, err := s.readApplianceVM(ctx, nextApplianceName(name, version))
	if err != nil || half == nil {
		return cur, nil, err
	}
	if half.role() != components.RoleControlPlane || half.power != types.VirtualMachinePowerStatePoweredOff || len(half.ownDisks()) != len(half.disks) {
		return nil, nil, fmt.Errorf("%s exists and is not an upgrade of %s: rename or delete it", half.name, name)
	}
	if err := s.Destroy(ctx, half.ref); err != nil {
		return nil, nil, fmt.Errorf("remove the half-imported %s: %w", half.name, err)
	}
	return cur, nil, nil
}

// nextApplianceName is the new VM's name until it takes the old one's.
func nextApplianceName(name, version string) string { return name + "-" + version }

// importNextAppliance imports the OVA as NAME-next with the old VM's
// settings and tags it with what pairs it to the old one.
func (s *Session) importNextAppliance(ctx context.Context, u ApplianceUpgrade, desc *ovf.Descriptor, old *applianceVM, log *slog.Logger) (*applianceVM, error) {
	from, to, err := s.applianceDataDisk(old)
	if err != nil {
		return nil, err
	}
	props := map[string]string{}
	for _, p := range desc.Properties {
		if v := old.props[p.Key]; p.UserConfigurable && old.userSet[p.Key] && v != "" {
			props[p.Key] = v
		}
	}
	for k, v := range old.props {
		if _, kept := props[k]; !kept && old.userSet[k] && v != "" {
			log.Warn("the new OVA has no such setting; it is dropped", "property", k)
		}
	}
	network := cmp.Or(old.nic, s.Provider.Network)
	name := nextApplianceName(u.Name, imageProperty(desc, "harmony.image.version"))
	imported, err := ImportOVA(ctx, s.Client.Client, ImportOptions{
		OVA: u.OVA, Datacenter: s.datacenter.InventoryPath, Datastore: s.Provider.Datastores.OS[0],
		ResourcePool: s.poolPath(), Folder: s.folder.InventoryPath, Name: name,
		Networks: map[string]string{desc.Network: network}, Properties: props,
		Progress: u.Progress, Log: log,
	})
	if err != nil {
		return nil, err
	}
	extra := map[string]string{TagReplaces: old.uuid, TagDataDisk: to, TagDataDiskFrom: from}
	// Harmony's own guestinfo keys (the static network, a bootstrap
	// document); vCenter makes the OVF environment, and VMware Tools
	// reports its own.
	for k, v := range old.tags {
		if strings.HasPrefix(k, "guestinfo.harmony.") {
			extra[k] = v
		}
	}
	// Settings and tags in one change: a VM with the tag is complete.
	if err := s.reconfigure(ctx, s.VM(imported.VM), types.VirtualMachineConfigSpec{
		NumCPUs: old.cpus, MemoryMB: old.memMiB, ExtraConfig: optionValues(extra),
	}); err != nil {
		return nil, err
	}
	log.Info("imported the new appliance", "vm", name, "from_vm", old.name, "data_disk", to)
	return s.readApplianceVM(ctx, name)
}

// applianceDataDisk is where the old appliance's data disk is (from) and
// where it is to be (to): the disk it was deployed with is its second
// one, in its folder; after an upgrade it is the one its tag names.
func (s *Session) applianceDataDisk(old *applianceVM) (from, to string, err error) {
	if p := old.tags[TagDataDisk]; p != "" {
		if old.hasDisk(p) == nil {
			return "", "", fmt.Errorf("%s has not its data disk %s attached: attach it before upgrading", old.name, p)
		}
		return p, p, nil
	}
	own := old.ownDisks()
	if len(own) != 2 || len(old.disks) != 2 {
		return "", "", fmt.Errorf("%s has %d disks (%d in its folder): an appliance has its system disk and its data disk", old.name, len(old.disks), len(own))
	}
	data := DataDisk{Datastore: s.Provider.DataDatastores()[0], Dir: ApplianceDataDir, Name: old.name}
	return diskFile(own[1]), data.Path(), nil
}

// shutDown asks the guest to shut down and waits for it; a guest that
// cannot (no VMware Tools) or does not in time is powered off.
func (s *Session) shutDown(ctx context.Context, v *applianceVM, timeout time.Duration, log *slog.Logger) error {
	vm := s.VM(v.ref)
	state, err := vm.PowerState(ctx)
	if err != nil {
		return fmt.Errorf("power state of %s: %w", v.name, err)
	}
	if state == types.VirtualMachinePowerStatePoweredOff {
		return nil
	}
	log.Info("shutting the guest down", "vm", v.name)
	if err := vm.ShutdownGuest(ctx); err != nil {
		log.Warn("the guest cannot shut down; powering it off", "vm", v.name, "err", err)
		return s.PowerOff(ctx, v.ref)
	}
	waitCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := vm.WaitForPowerState(waitCtx, types.VirtualMachinePowerStatePoweredOff); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("shut %s down: %w", v.name, ctx.Err())
		}
		log.Warn("the guest did not shut down in time; powering it off", "vm", v.name, "timeout", timeout)
		return s.PowerOff(ctx, v.ref)
	}
	return nil
}

// moveApplianceDisk takes the data disk off the old VM and, the first
// time, moves its file out of the old VM's folder.
func (s *Session) moveApplianceDisk(ctx context.Context, old, next *applianceVM, log *slog.Logger) error {
	from, to := next.tags[TagDataDiskFrom], next.tags[TagDataDisk]
	if from == "" || to == "" {
		return fmt.Errorf("%s lacks its %s or %s tag", next.name, TagDataDiskFrom, TagDataDisk)
	}
	if d := old.hasDisk(from); d != nil {
		// No file operation: the VMDK stays on the datastore.
		if err := s.reconfigure(ctx, s.VM(old.ref), types.VirtualMachineConfigSpec{DeviceChange: []types.BaseVirtualDeviceConfigSpec{
			&types.VirtualDeviceConfigSpec{Operation: types.VirtualDeviceConfigSpecOperationRemove, Device: d}}}); err != nil {
			return fmt.Errorf("detach the data disk from %s: %w", old.name, err)
		}
		log.Info("detached the data disk", "vm", old.name, "disk", from)
	}
	if from == to {
		return nil
	}
	at, err := s.dataDiskLocation(ctx, from, to)
	if err != nil || at == to {
		return err
	}
	dest, err := dataDiskAt(to)
	if err != nil {
		return err
	}
	if err := s.moveDisk(ctx, from, dest); err != nil {
		return err
	}
	log.Info("moved the data disk out of the old VM's folder", "from", from, "to", to)
	return nil
}

// dataDiskLocation is where the data disk's file is: from, before its
// move, or to, after it.
func (s *Session) dataDiskLocation(ctx context.Context, from, to string) (string, error) {
	var there [2]bool
	for i, file := range []string{from, to} {
		d, err := dataDiskAt(file)
		if err != nil {
			return "", err
		}
		if there[i], err = s.diskExists(ctx, d); err != nil {
			return "", err
		}
	}
	switch {
	case there[0] && (!there[1] || from == to):
		return from, nil
	case there[1] && !there[0]:
		return to, nil
	case there[1]:
		// A move between datastores copies, then deletes the source: both
		// there is a move still running in vCenter, or one that failed
		// midway, and which copy is whole only vCenter's task can say.
		return "", fmt.Errorf("the data disk is at both %s and %s: a move is still running in vCenter or failed midway; "+
			"run this again once vCenter's task has ended, after deleting %s if it failed", from, to, to)
	}
	return "", fmt.Errorf("%s: %w (and %s is not there either)", from, ErrDiskMissing, to)
}

// dataDiskAt parses "[ds] dir/name.vmdk".
func dataDiskAt(file string) (DataDisk, error) {
	var p object.DatastorePath
	if !p.FromString(file) || !strings.HasSuffix(p.Path, ".vmdk") || path.Dir(p.Path) == "." {
		return DataDisk{}, fmt.Errorf("%q is not a disk's datastore path", file)
	}
	return DataDisk{Datastore: p.Datastore, Dir: path.Dir(p.Path), Name: strings.TrimSuffix(path.Base(p.Path), ".vmdk")}, nil
}

func (s *Session) moveDisk(ctx context.Context, from string, to DataDisk) error {
	s.files.Lock()
	defer s.files.Unlock()
	dir := DatastorePath(to.Datastore, to.Dir)
	if err := object.NewFileManager(s.Client.Client).MakeDirectory(ctx, dir, s.datacenter, true); err != nil && !isFault[*types.FileAlreadyExists](err) {
		return fmt.Errorf("make %s: %w", dir, err)
	}
	task, err := object.NewVirtualDiskManager(s.Client.Client).MoveVirtualDisk(ctx, from, s.datacenter, to.Path(), s.datacenter, false)
	if err == nil {
		err = task.Wait(ctx)
	}
	if err != nil {
		return fmt.Errorf("move %s to %s: %w", from, to.Path(), err)
	}
	return nil
}

// giveApplianceDisk puts the data disk on the new VM in place of the
// blank one its OVA gave it, which is deleted: it holds nothing yet.
func (s *Session) giveApplianceDisk(ctx context.Context, next *applianceVM, log *slog.Logger) error {
	to := next.tags[TagDataDisk]
	if next.hasDisk(to) != nil {
		return nil
	}
	disk, err := dataDiskAt(to)
	if err != nil {
		return err
	}
	if own := next.ownDisks(); len(own) == 2 {
		blank := own[1]
		if err := s.reconfigure(ctx, s.VM(next.ref), types.VirtualMachineConfigSpec{DeviceChange: []types.BaseVirtualDeviceConfigSpec{
			&types.VirtualDeviceConfigSpec{Operation: types.VirtualDeviceConfigSpecOperationRemove,
				FileOperation: types.VirtualDeviceConfigSpecFileOperationDestroy, Device: blank}}}); err != nil {
			return fmt.Errorf("remove the blank data disk of %s: %w", next.name, err)
		}
		log.Info("removed the new appliance's blank data disk", "vm", next.name, "disk", diskFile(blank))
	} else if len(own) != 1 {
		return fmt.Errorf("%s has %d disks in its folder, want its system disk and a blank data disk", next.name, len(own))
	}
	if err := s.AttachDataDisk(ctx, s.folder, next.ref, disk); err != nil {
		return fmt.Errorf("give %s its data disk: %w", next.name, err)
	}
	log.Info("attached the data disk", "vm", next.name, "disk", to)
	return nil
}

// poolPath is the resource pool's inventory path for an import.
func (s *Session) poolPath() string {
	if s.Provider.ResourcePool != "" {
		return s.Provider.ResourcePool
	}
	return path.Join(s.Provider.ComputeCluster, "Resources")
}

// ApplianceRolledBack is what a rollback did.
type ApplianceRolledBack struct {
	// Replacement is the new VM's name now: powered off, without the data
	// disk, to be deleted.
	Replacement string
	DataDisk    string
	Version     string
}

// RollBackAppliance undoes an upgrade, finished or cut short: the new VM
// is shut down and gives the data disk back to the old one, which takes
// its name again and is powered on. The new VM is kept, powered off and
// untagged, as NAME-VERSION-rolled-back. Like the upgrade, a rollback cut
// short is finished by running it again.
func (s *Session) RollBackAppliance(ctx context.Context, name string, shutdownTimeout time.Duration, log *slog.Logger) (*ApplianceRolledBack, error) {
	log = cmp.Or(log, slog.New(slog.DiscardHandler))
	if shutdownTimeout <= 0 {
		shutdownTimeout = 5 * time.Minute
	}
	old, next, err := s.rollbackPair(ctx, name)
	if err != nil {
		return nil, err
	}
	if err := refuseSnapshots(old, next); err != nil {
		return nil, err
	}
	disk, from := next.tags[TagDataDisk], next.tags[TagDataDiskFrom]
	if disk == "" || from == "" {
		return nil, fmt.Errorf("%s lacks its %s or %s tag", next.name, TagDataDisk, TagDataDiskFrom)
	}
	if err := s.shutDown(ctx, next, shutdownTimeout, log); err != nil {
		return nil, err
	}
	if d := next.hasDisk(disk); d != nil {
		if err := s.reconfigure(ctx, s.VM(next.ref), types.VirtualMachineConfigSpec{DeviceChange: []types.BaseVirtualDeviceConfigSpec{
			&types.VirtualDeviceConfigSpec{Operation: types.VirtualDeviceConfigSpecOperationRemove, Device: d}}}); err != nil {
			return nil, fmt.Errorf("detach the data disk from %s: %w", next.name, err)
		}
		log.Info("detached the data disk", "vm", next.name, "disk", disk)
	}
	// The disk is where the upgrade left it: still on the old VM, in the
	// old VM's folder (detached, not moved yet), or moved.
	at := disk
	switch {
	case old.hasDisk(disk) != nil:
	case old.hasDisk(from) != nil:
		at = from
	default:
		if at, err = s.dataDiskLocation(ctx, from, disk); err != nil {
			return nil, err
		}
		d, err := dataDiskAt(at)
		if err != nil {
			return nil, err
		}
		if err := s.AttachDataDisk(ctx, s.folder, old.ref, d); err != nil {
			return nil, fmt.Errorf("give %s its data disk back: %w", old.name, err)
		}
		log.Info("attached the data disk", "vm", old.name, "disk", at)
	}
	// A disk outside the VM's folder is found by the tag at the next
	// upgrade; one in it, as deployed.
	tag := ""
	if path.Dir(at) != old.dir {
		tag = at
	}
	if old.tags[TagDataDisk] != tag {
		if err := s.reconfigure(ctx, s.VM(old.ref), types.VirtualMachineConfigSpec{ExtraConfig: optionValues(map[string]string{TagDataDisk: tag})}); err != nil {
			return nil, err
		}
	}
	rolledBack := nextApplianceName(name, next.version()) + "-rolled-back"
	if err := s.Rename(ctx, next.ref, rolledBack); err != nil {
		return nil, err
	}
	if err := s.Rename(ctx, old.ref, name); err != nil {
		return nil, err
	}
	if err := s.PowerOn(ctx, old.ref); err != nil {
		return nil, err
	}
	// Untagged last: until here, the tag is what finds the pair again.
	if err := s.reconfigure(ctx, s.VM(next.ref), types.VirtualMachineConfigSpec{ExtraConfig: optionValues(map[string]string{
		TagReplaces: "", TagDataDisk: "", TagDataDiskFrom: ""})}); err != nil {
		return nil, err
	}
	log.Info("appliance rolled back", "vm", name, "version", old.version(), "replacement", rolledBack)
	return &ApplianceRolledBack{Replacement: rolledBack, DataDisk: at, Version: old.version()}, nil
}

// rollbackPair finds the appliance an upgrade replaced (old) and the VM
// that replaces it: NAME replacing NAME-previous after the upgrade's
// renames, else a VM tagged as NAME's replacement (an upgrade cut short
// before its renames, or a rollback after its own).
func (s *Session) rollbackPair(ctx context.Context, name string) (old, next *applianceVM, err error) {
	cur, err := s.readApplianceVM(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	if cur == nil {
		return nil, nil, fmt.Errorf("no VM %s in %s", name, s.folder.InventoryPath)
	}
	prev, err := s.readApplianceVM(ctx, name+appliancePreviousSuffix)
	if err != nil {
		return nil, nil, err
	}
	if prev != nil && cur.tags[TagReplaces] == prev.uuid {
		return prev, cur, nil
	}
	vms, err := s.VMs(ctx, s.folder)
	if err != nil {
		return nil, nil, err
	}
	for _, vm := range vms {
		if vm.Tags[TagReplaces] == cur.uuid && vm.Ref != cur.ref {
			next, err := s.readApplianceVM(ctx, vm.Name)
			return cur, next, err
		}
	}
	return nil, nil, fmt.Errorf("nothing to roll back: no VM in %s replaces %s", s.folder.InventoryPath, name)
}
