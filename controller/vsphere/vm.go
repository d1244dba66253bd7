package vsphere

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
)

// ExtraConfig keys with which the controller tags the VMs it makes, so
// that a VM is recognised as Harmony's after a crash.
const (
	TagCluster = "harmony.cluster"
	TagNode    = "harmony.node"
	// TagImage names the image a VM was cloned from, for whoever needs
	// the image behind a VM (an upgrade, the lab's VM bodies).
	TagImage = "harmony.image"
)

// CloneSpec says what to clone and where.
type CloneSpec struct {
	// Template is the template's inventory path; Snapshot, if set, makes
	// the clone a linked clone of that snapshot.
	Template  string
	Snapshot  string
	Name      string
	Folder    *object.Folder
	Datastore string
	// Tags go into the clone's ExtraConfig.
	Tags map[string]string
	// UUID, when set, is the clone's BIOS UUID: a VM that replaces
	// another keeps its identity (the Kubernetes Node's providerID).
	UUID string
}

// Clone makes a VM from a template, powered off. It is idempotent: a VM of
// that name already in the folder (an earlier attempt that finished after
// a crash) is returned as it is.
func (s *Session) Clone(ctx context.Context, c CloneSpec) (types.ManagedObjectReference, error) {
	if vm, err := s.FindVM(ctx, c.Folder, c.Name); err != nil || vm != nil {
		if vm != nil {
			return vm.Reference(), nil
		}
		return types.ManagedObjectReference{}, err
	}
	tmpl, err := s.finder.VirtualMachine(ctx, c.Template)
	if err != nil {
		return types.ManagedObjectReference{}, fmt.Errorf("template %s: %w", c.Template, err)
	}
	ds, err := s.finder.Datastore(ctx, c.Datastore)
	if err != nil {
		return types.ManagedObjectReference{}, fmt.Errorf("datastore %s: %w", c.Datastore, err)
	}
	poolRef, dsRef := s.pool.Reference(), ds.Reference()
	spec := types.VirtualMachineCloneSpec{
		Location: types.VirtualMachineRelocateSpec{Pool: &poolRef, Datastore: &dsRef},
		Config:   &types.VirtualMachineConfigSpec{ExtraConfig: optionValues(c.Tags), Uuid: c.UUID},
	}
	if c.Snapshot != "" {
		snap, err := tmpl.FindSnapshot(ctx, c.Snapshot)
		if err != nil {
			return types.ManagedObjectReference{}, fmt.Errorf("template %s snapshot %s: %w", c.Template, c.Snapshot, err)
		}
		spec.Snapshot = snap
		spec.Location.DiskMoveType = string(types.VirtualMachineRelocateDiskMoveOptionsCreateNewChildDiskBacking)
	}
	s.files.RLock()
	task, err := tmpl.Clone(ctx, c.Folder, c.Name, spec)
	var info *types.TaskInfo
	if err == nil {
		info, err = task.WaitForResult(ctx)
	}
	s.files.RUnlock()
	if isFault[*types.DuplicateName](err) {
		// A clone from before a crash finished meanwhile.
		if vm, ferr := s.FindVM(ctx, c.Folder, c.Name); ferr == nil && vm != nil {
			return vm.Reference(), nil
		}
	}
	if err == nil {
		var ref types.ManagedObjectReference
		if ref, err = taskResult[types.ManagedObjectReference](info); err == nil {
			return ref, nil
		}
	}
	return types.ManagedObjectReference{}, fmt.Errorf("clone %s: %w", c.Name, err)
}

// FindVM returns the VM of that name in the folder, or nil.
func (s *Session) FindVM(ctx context.Context, folder *object.Folder, name string) (*object.VirtualMachine, error) {
	vm, err := s.finder.VirtualMachine(ctx, path.Join(folder.InventoryPath, name))
	var nf *find.NotFoundError
	if errors.As(err, &nf) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("find %s: %w", name, err)
	}
	return vm, nil
}

// Gone reports whether the VM no longer exists in vCenter: destroyed or
// unregistered, not merely moved out of its folder.
func (s *Session) Gone(ctx context.Context, ref types.ManagedObjectReference) (bool, error) {
	_, err := s.VM(ref).ObjectName(ctx)
	switch {
	case err == nil:
		return false, nil
	case IsNotFound(err):
		return true, nil
	}
	return false, fmt.Errorf("look up %s: %w", ref.Value, err)
}

// VM wraps a reference for this session's client.
func (s *Session) VM(ref types.ManagedObjectReference) *object.VirtualMachine {
	return object.NewVirtualMachine(s.Client.Client, ref)
}

// Hardware is what Configure sets after a clone.
type Hardware struct {
	CPUs      int
	MemoryMiB int
	// ExtraConfig is merged into the VM's: guestinfo and tags.
	ExtraConfig map[string]string
}

// Configure sets CPU, memory and ExtraConfig, and connects the first NIC
// to the provider's network (adding one if the template has none). It
// never touches disks: resizing happens here, after the clone, never in
// the clone spec.
func (s *Session) Configure(ctx context.Context, ref types.ManagedObjectReference, hw Hardware) error {
	vm := s.VM(ref)
	devices, err := vm.Device(ctx)
	if err != nil {
		return fmt.Errorf("devices of %s: %w", ref.Value, err)
	}
	backing, err := s.network.EthernetCardBackingInfo(ctx)
	if err != nil {
		return fmt.Errorf("network %s: %w", s.Provider.Network, err)
	}
	spec := types.VirtualMachineConfigSpec{
		NumCPUs:     int32(hw.CPUs),
		MemoryMB:    int64(hw.MemoryMiB),
		ExtraConfig: optionValues(hw.ExtraConfig),
	}
	nics := devices.SelectByType((*types.VirtualEthernetCard)(nil))
	if len(nics) == 0 {
		nic, err := object.EthernetCardTypes().CreateEthernetCard("vmxnet3", backing)
		if err != nil {
			return err
		}
		spec.DeviceChange = append(spec.DeviceChange, &types.VirtualDeviceConfigSpec{
			Operation: types.VirtualDeviceConfigSpecOperationAdd, Device: nic})
	} else {
		nic := nics[0]
		nic.GetVirtualDevice().Backing = backing
		spec.DeviceChange = append(spec.DeviceChange, &types.VirtualDeviceConfigSpec{
			Operation: types.VirtualDeviceConfigSpecOperationEdit, Device: nic})
	}
	return s.reconfigure(ctx, vm, spec)
}

// SetGuestinfo writes guestinfo keys of a VM, powered on or not, and
// changes nothing else: a running VM's guest reads them at once.
func (s *Session) SetGuestinfo(ctx context.Context, ref types.ManagedObjectReference, values map[string]string) error {
	for k := range values {
		if !strings.HasPrefix(k, "guestinfo.") {
			return fmt.Errorf("set guestinfo of %s: %q is not a guestinfo key", ref.Value, k)
		}
	}
	return s.reconfigure(ctx, s.VM(ref), types.VirtualMachineConfigSpec{ExtraConfig: optionValues(values)})
}

func (s *Session) reconfigure(ctx context.Context, vm *object.VirtualMachine, spec types.VirtualMachineConfigSpec) error {
	s.files.RLock()
	defer s.files.RUnlock()
	task, err := vm.Reconfigure(ctx, spec)
	if err == nil {
		err = task.Wait(ctx)
	}
	if err != nil {
		return fmt.Errorf("reconfigure %s: %w", vm.Reference().Value, err)
	}
	return nil
}

// DataDisk is a persistent disk: its own VMDK in a per-cluster folder on
// a data datastore, never in a VM's folder, so that it outlives VMs.
type DataDisk struct {
	Datastore string
	// Dir is the folder inside the datastore, e.g. harmony-data/prod.
	Dir     string
	Name    string
	SizeGiB int
}

// Path is the disk's datastore path, "[ds] dir/name.vmdk".
func (d DataDisk) Path() string {
	return DatastorePath(d.Datastore, d.Dir+"/"+d.Name+".vmdk")
}

// DatastorePath names a file or folder of a datastore as vCenter does,
// "[ds] dir/file".
func DatastorePath(datastore, path string) string {
	return (&object.DatastorePath{Datastore: datastore, Path: path}).String()
}

// EnsureDataDisk creates the disk if it does not exist yet (a disk that
// survived its VM is reused as it is) and attaches it if the VM lacks it.
func (s *Session) EnsureDataDisk(ctx context.Context, ref types.ManagedObjectReference, d DataDisk) error {
	if err := s.createDataDisk(ctx, d); err != nil {
		return err
	}
	return s.attachDisk(ctx, ref, d)
}

// createDataDisk makes the disk's folder and VMDK unless it exists.
func (s *Session) createDataDisk(ctx context.Context, d DataDisk) error {
	s.files.Lock()
	defer s.files.Unlock()
	exists, err := s.diskExists(ctx, d)
	if err != nil {
		return err
	}
	if !exists {
		fm := object.NewFileManager(s.Client.Client)
		dir := DatastorePath(d.Datastore, d.Dir)
		if err := fm.MakeDirectory(ctx, dir, s.datacenter, true); err != nil && !isFault[*types.FileAlreadyExists](err) {
			return fmt.Errorf("make %s: %w", dir, err)
		}
		vdm := object.NewVirtualDiskManager(s.Client.Client)
		task, err := vdm.CreateVirtualDisk(ctx, d.Path(), s.datacenter, &types.FileBackedVirtualDiskSpec{
			VirtualDiskSpec: types.VirtualDiskSpec{AdapterType: string(types.VirtualDiskAdapterTypeLsiLogic), DiskType: string(types.VirtualDiskTypeThin)},
			CapacityKb:      int64(d.SizeGiB) << 20,
		})
		if err == nil {
			err = task.Wait(ctx)
		}
		if err != nil && !isFault[*types.FileAlreadyExists](err) {
			return fmt.Errorf("create %s: %w", d.Path(), err)
		}
	}
	return nil
}

// diskExists reports whether the data disk's file is on its datastore.
func (s *Session) diskExists(ctx context.Context, d DataDisk) (bool, error) {
	ds, err := s.finder.Datastore(ctx, d.Datastore)
	if err != nil {
		return false, fmt.Errorf("datastore %s: %w", d.Datastore, err)
	}
	// A search of the folder rather than ds.Stat, which takes a task
	// without a result for one with an empty result, and panics.
	browser, err := ds.Browser(ctx)
	if err != nil {
		return false, fmt.Errorf("stat %s: %w", d.Path(), err)
	}
	task, err := browser.SearchDatastore(ctx, ds.Path(d.Dir), &types.HostDatastoreBrowserSearchSpec{MatchPattern: []string{d.Name + ".vmdk"}})
	if err != nil {
		return false, fmt.Errorf("stat %s: %w", d.Path(), err)
	}
	info, err := task.WaitForResult(ctx)
	switch {
	case types.IsFileNotFound(err):
		return false, nil // no folder
	case err != nil:
		return false, fmt.Errorf("stat %s: %w", d.Path(), err)
	}
	res, err := taskResult[types.HostDatastoreBrowserSearchResults](info)
	if err != nil {
		return false, fmt.Errorf("stat %s: %w", d.Path(), err)
	}
	return len(res.File) > 0, nil
}

// taskResult is a finished task's result. govmomi's wait answers no
// info and no error when the task vanished before it was seen to end.
func taskResult[T any](info *types.TaskInfo) (T, error) {
	var zero T
	if info == nil {
		return zero, errors.New("the task ended without an answer")
	}
	res, ok := info.Result.(T)
	if !ok {
		return zero, fmt.Errorf("the task answered %T, want %T", info.Result, zero)
	}
	return res, nil
}

// DeleteDataDisk removes a data disk's file (cluster delete --purge).
func (s *Session) DeleteDataDisk(ctx context.Context, d DataDisk) error {
	s.files.Lock()
	defer s.files.Unlock()
	exists, err := s.diskExists(ctx, d)
	if err != nil || !exists {
		return err
	}
	task, err := object.NewVirtualDiskManager(s.Client.Client).DeleteVirtualDisk(ctx, d.Path(), s.datacenter)
	if err == nil {
		err = task.Wait(ctx)
	}
	if err != nil && !isFault[*types.FileNotFound](err) {
		return fmt.Errorf("delete %s: %w", d.Path(), err)
	}
	return nil
}

func diskFile(disk types.BaseVirtualDevice) string {
	if b, ok := disk.GetVirtualDevice().Backing.(types.BaseVirtualDeviceFileBackingInfo); ok {
		return b.GetVirtualDeviceFileBackingInfo().FileName
	}
	return ""
}

// BIOSUUID is the VM's BIOS UUID (config.uuid): what the guest sees as
// its product UUID, and what the vSphere cloud provider finds a
// Kubernetes Node's VM by.
func (s *Session) BIOSUUID(ctx context.Context, ref types.ManagedObjectReference) (string, error) {
	var vm mo.VirtualMachine
	if err := s.VM(ref).Properties(ctx, ref, []string{"config.uuid"}, &vm); err != nil {
		return "", fmt.Errorf("uuid of %s: %w", ref.Value, err)
	}
	if vm.Config == nil || vm.Config.Uuid == "" {
		return "", fmt.Errorf("uuid of %s: vCenter reports none", ref.Value)
	}
	return vm.Config.Uuid, nil
}

// PowerOn powers the VM on unless it is on already.
func (s *Session) PowerOn(ctx context.Context, ref types.ManagedObjectReference) error {
	vm := s.VM(ref)
	state, err := vm.PowerState(ctx)
	if err != nil {
		return fmt.Errorf("power state of %s: %w", ref.Value, err)
	}
	if state == types.VirtualMachinePowerStatePoweredOn {
		return nil
	}
	task, err := vm.PowerOn(ctx)
	if err == nil {
		err = task.Wait(ctx)
	}
	if err != nil && !isFault[*types.InvalidPowerState](err) {
		return fmt.Errorf("power on %s: %w", ref.Value, err)
	}
	return nil
}

// PowerOff powers the VM off unless it is off already.
func (s *Session) PowerOff(ctx context.Context, ref types.ManagedObjectReference) error {
	vm := s.VM(ref)
	state, err := vm.PowerState(ctx)
	if err != nil {
		return fmt.Errorf("power state of %s: %w", ref.Value, err)
	}
	if state == types.VirtualMachinePowerStatePoweredOff {
		return nil
	}
	task, err := vm.PowerOff(ctx)
	if err == nil {
		err = task.Wait(ctx)
	}
	if err != nil && !isFault[*types.InvalidPowerState](err) {
		return fmt.Errorf("power off %s: %w", ref.Value, err)
	}
	return nil
}

// DetachPersistentDisks removes from the VM, keeping their files, every
// disk that does not live in the VM's own folder: the persistent disks.
// It returns their paths.
func (s *Session) DetachPersistentDisks(ctx context.Context, ref types.ManagedObjectReference) ([]string, error) {
	vm := s.VM(ref)
	var m mo.VirtualMachine
	if err := vm.Properties(ctx, ref, []string{"config.files", "config.hardware"}, &m); err != nil {
		return nil, fmt.Errorf("read %s: %w", ref.Value, err)
	}
	vmDir := path.Dir(m.Config.Files.VmPathName)
	var detach []types.BaseVirtualDevice
	var paths []string
	for _, dev := range object.VirtualDeviceList(m.Config.Hardware.Device).SelectByType((*types.VirtualDisk)(nil)) {
		file := diskFile(dev)
		if file != "" && path.Dir(file) != vmDir {
			detach = append(detach, dev)
			paths = append(paths, file)
		}
	}
	if len(detach) == 0 {
		return nil, nil
	}
	spec := types.VirtualMachineConfigSpec{}
	for _, dev := range detach {
		// No file operation: the VMDK stays on the datastore.
		spec.DeviceChange = append(spec.DeviceChange, &types.VirtualDeviceConfigSpec{
			Operation: types.VirtualDeviceConfigSpecOperationRemove, Device: dev})
	}
	return paths, s.reconfigure(ctx, vm, spec)
}

// Destroy powers the VM off, detaches its persistent disks and destroys
// it. A VM already gone is not an error.
func (s *Session) Destroy(ctx context.Context, ref types.ManagedObjectReference) error {
	if err := s.PowerOff(ctx, ref); err != nil {
		if isFault[*types.ManagedObjectNotFound](err) {
			return nil
		}
		return err
	}
	if _, err := s.DetachPersistentDisks(ctx, ref); err != nil {
		return err
	}
	// Exclusive: the simulator's destroy writes the datastore's list of
	// VMs, which its reconfigure reads unlocked.
	s.files.Lock()
	task, err := s.VM(ref).Destroy(ctx)
	if err == nil {
		err = task.Wait(ctx)
	}
	s.files.Unlock()
	if err != nil && !isFault[*types.ManagedObjectNotFound](err) {
		return fmt.Errorf("destroy %s: %w", ref.Value, err)
	}
	return nil
}

// VMInfo is what vCenter says about one VM.
type VMInfo struct {
	Ref     types.ManagedObjectReference
	Name    string
	Power   string
	GuestIP string
	CPUs    int
	MemMiB  int
	Tags    map[string]string
}

// VMs lists the VMs in a folder, with their power state, guest IP and
// Harmony tags.
func (s *Session) VMs(ctx context.Context, folder *object.Folder) ([]VMInfo, error) {
	refs, err := vmRefs(ctx, folder)
	if len(refs) == 0 || err != nil {
		return nil, err
	}
	var vms []mo.VirtualMachine
	pc := property.DefaultCollector(s.Client.Client)
	if err := pc.Retrieve(ctx, refs, []string{"name", "runtime.powerState", "guest.ipAddress", "config.hardware.numCPU", "config.hardware.memoryMB", "config.extraConfig"}, &vms); err != nil {
		return nil, fmt.Errorf("read VMs of %s: %w", folder.InventoryPath, err)
	}
	out := make([]VMInfo, 0, len(vms))
	for _, m := range vms {
		info := VMInfo{Ref: m.Self, Name: m.Name, Power: string(m.Runtime.PowerState), Tags: map[string]string{}}
		if m.Guest != nil {
			info.GuestIP = m.Guest.IpAddress
		}
		if m.Config != nil {
			info.CPUs, info.MemMiB = int(m.Config.Hardware.NumCPU), int(m.Config.Hardware.MemoryMB)
			for _, o := range m.Config.ExtraConfig {
				if v := o.GetOptionValue(); strings.HasPrefix(v.Key, "harmony.") {
					info.Tags[v.Key], _ = v.Value.(string)
				}
			}
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b VMInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// vmRefs are the VMs directly in a folder.
func vmRefs(ctx context.Context, folder *object.Folder) ([]types.ManagedObjectReference, error) {
	children, err := folder.Children(ctx)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", folder.InventoryPath, err)
	}
	var refs []types.ManagedObjectReference
	for _, c := range children {
		if c.Reference().Type == "VirtualMachine" {
			refs = append(refs, c.Reference())
		}
	}
	return refs, nil
}

// EnsureAntiAffinity keeps a DRS anti-affinity rule over exactly these
// VMs: added, edited or, with fewer than two VMs, removed. It reports
// false when the pool has no compute cluster to hold a rule.
func (s *Session) EnsureAntiAffinity(ctx context.Context, name string, vms []types.ManagedObjectReference) (bool, error) {
	if s.cluster == nil {
		return false, nil
	}
	var ccr mo.ClusterComputeResource
	if err := s.cluster.Properties(ctx, s.cluster.Reference(), []string{"configurationEx"}, &ccr); err != nil {
		return false, fmt.Errorf("read cluster rules: %w", err)
	}
	var existing *types.ClusterAntiAffinityRuleSpec
	for _, r := range ccr.ConfigurationEx.(*types.ClusterConfigInfoEx).Rule {
		if rule, ok := r.(*types.ClusterAntiAffinityRuleSpec); ok && rule.Name == name {
			existing = rule
		}
	}
	want := slices.Clone(vms)
	sortRefs(want)
	spec := &types.ClusterConfigSpecEx{}
	enabled := true
	switch {
	case len(want) < 2 && existing == nil:
		return true, nil
	case len(want) < 2:
		spec.RulesSpec = []types.ClusterRuleSpec{{ArrayUpdateSpec: types.ArrayUpdateSpec{
			Operation: types.ArrayUpdateOperationRemove, RemoveKey: existing.Key}}}
	case existing == nil:
		spec.RulesSpec = []types.ClusterRuleSpec{{ArrayUpdateSpec: types.ArrayUpdateSpec{Operation: types.ArrayUpdateOperationAdd},
			Info: &types.ClusterAntiAffinityRuleSpec{ClusterRuleInfo: types.ClusterRuleInfo{Name: name, Enabled: &enabled}, Vm: want}}}
	default:
		have := slices.Clone(existing.Vm)
		sortRefs(have)
		if slices.Equal(have, want) {
			return true, nil
		}
		rule := *existing
		rule.Vm = want
		spec.RulesSpec = []types.ClusterRuleSpec{{ArrayUpdateSpec: types.ArrayUpdateSpec{Operation: types.ArrayUpdateOperationEdit}, Info: &rule}}
	}
	task, err := s.cluster.Reconfigure(ctx, spec, true)
	if err == nil {
		err = task.Wait(ctx)
	}
	if err != nil {
		return true, fmt.Errorf("anti-affinity rule %s: %w", name, err)
	}
	return true, nil
}

func sortRefs(refs []types.ManagedObjectReference) {
	slices.SortFunc(refs, func(a, b types.ManagedObjectReference) int { return strings.Compare(a.Value, b.Value) })
}

func optionValues(m map[string]string) []types.BaseOptionValue {
	var out []types.BaseOptionValue
	for _, k := range sortedKeys(m) {
		out = append(out, &types.OptionValue{Key: k, Value: m[k]})
	}
	return out
}

// DeleteDatastoreDir removes a folder of a datastore with what it holds
// (cluster delete --purge: the cluster's data disks). A missing folder is
// not an error.
func (s *Session) DeleteDatastoreDir(ctx context.Context, datastore, dir string) error {
	p := DatastorePath(datastore, dir)
	s.files.Lock()
	defer s.files.Unlock()
	task, err := object.NewFileManager(s.Client.Client).DeleteDatastoreFile(ctx, p, s.datacenter)
	if err == nil {
		err = task.Wait(ctx)
	}
	if err != nil && !isFault[*types.FileNotFound](err) {
		return fmt.Errorf("delete %s: %w", p, err)
	}
	return nil
}

// DeleteFolderIfEmpty removes a VM folder that holds nothing.
func (s *Session) DeleteFolderIfEmpty(ctx context.Context, folder *object.Folder) error {
	children, err := folder.Children(ctx)
	if err != nil {
		if isFault[*types.ManagedObjectNotFound](err) {
			return nil
		}
		return fmt.Errorf("list %s: %w", folder.InventoryPath, err)
	}
	if len(children) > 0 {
		return nil
	}
	task, err := folder.Destroy(ctx)
	if err == nil {
		err = task.Wait(ctx)
	}
	if err != nil && !isFault[*types.ManagedObjectNotFound](err) {
		return fmt.Errorf("delete folder %s: %w", folder.InventoryPath, err)
	}
	return nil
}

// IsNotFound reports whether err says a managed object is gone.
func IsNotFound(err error) bool { return isFault[*types.ManagedObjectNotFound](err) }
