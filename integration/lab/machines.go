package lab

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/vmware/govmomi/vim25"

	"github.com/harmonykaas/harmony/agent/components/etcd"
	"github.com/harmonykaas/harmony/integration/lab/body"
)

// syncInterval is how often the machines follow vCenter's power states.
const syncInterval = 500 * time.Millisecond

// machines keeps one body per powered-on VM of the simulated vCenter, as
// a hypervisor runs one guest per powered-on VM: power on boots the VM's
// image, power off or destroy ends it at once.
type machines struct {
	vc  *vim25.Client
	r   *record
	log *slog.Logger
	// images are the prepared node images by name, the name the
	// controller tags its clones with; filled from images.json.
	images  map[string]*body.Image
	rpcTool string

	mu      sync.Mutex
	running map[string]*machine // by VM reference
}

// machine is a running body and what serves it.
type machine struct {
	vm        vmState
	body      *body.Body
	guestinfo *body.GuestinfoServer
	netns     string
}

// run follows vCenter until ctx ends, then stops every body.
func (ms *machines) run(ctx context.Context) error {
	t := time.NewTicker(syncInterval)
	defer t.Stop()
	for {
		if err := ms.sync(ctx); err != nil && ctx.Err() == nil {
			ms.log.Warn("lab machines: sync", "err", err)
		}
		select {
		case <-ctx.Done():
			return ms.stopAll(context.WithoutCancel(ctx))
		case <-t.C:
		}
	}
}

// sync starts a body for each powered-on VM without one and kills the
// body of each VM that is off or gone.
func (ms *machines) sync(ctx context.Context) error {
	vms, err := listVMs(ctx, ms.vc)
	if err != nil {
		return err
	}
	on := map[string]vmState{}
	for _, vm := range vms {
		if vm.On {
			on[vm.Ref.Value] = vm
		}
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	var errs []error
	for ref, m := range ms.running {
		if _, ok := on[ref]; !ok || !m.body.Running() {
			ms.log.Info("lab: VM powered off; its body stops", "vm", m.vm.Name)
			errs = append(errs, ms.powerOff(ctx, m))
			delete(ms.running, ref)
		}
	}
	for ref, vm := range on {
		if _, ok := ms.running[ref]; ok {
			continue
		}
		m, err := ms.powerOn(ctx, vm, vms)
		if err != nil {
			errs = append(errs, fmt.Errorf("boot %s: %w", vm.Name, err))
			continue
		}
		ms.running[ref] = m
	}
	errs = append(errs, sweepDirs(ms.r.vmsDir(), vms, ms.log))
	return errors.Join(errs...)
}

// vmName is what a body, its namespace and its link may be named after.
var vmName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,30}$`)

// powerOn gives a VM its body: a network namespace on the lab's switch,
// its guestinfo socket, its data disks, and its image booted.
func (ms *machines) powerOn(ctx context.Context, vm vmState, all []vmState) (*machine, error) {
	if !vmName.MatchString(vm.Name) {
		return nil, fmt.Errorf("VM name %q: the lab runs VMs named [a-z0-9-], at most 31", vm.Name)
	}
	img, err := ms.image(ctx, vm.Image)
	if err != nil {
		return nil, fmt.Errorf("VM %s: %w", vm.Name, err)
	}
	m := &machine{vm: vm, netns: vmNetns(ms.r.ID, vm.Name)}
	if err := ms.plugVM(ctx, vm.Name, m.netns); err != nil {
		return nil, err
	}
	dir := ms.r.vmDir(vm.Name)
	if err := ownDir(ms.r.vmsDir(), vm, all, ms.log); err != nil {
		return nil, fmt.Errorf("VM %s: %w", vm.Name, err)
	}
	giDir := filepath.Join(dir, "guestinfo")
	gi, err := body.ListenGuestinfo(filepath.Join(giDir, body.GuestinfoSocketName), vmGuestinfo{c: ms.vc, ref: vm.Ref}, ms.log)
	if err != nil {
		return nil, err
	}
	m.guestinfo = gi
	go gi.Serve(context.WithoutCancel(ctx))
	var binds []body.Bind
	// A real VM mounts its data disk where etcd keeps its data; here the
	// disk is a directory named for its datastore path, so that it
	// follows the disk from VM to VM.
	for i, disk := range vm.DataDisks {
		host, err := ms.diskDir(disk)
		if err != nil {
			gi.Close()
			return nil, err
		}
		if i == 0 {
			binds = append(binds, body.Bind{Host: host, Body: etcd.DefaultDataDir})
		}
	}
	// containerd's snapshots are overlayfs mounts, which cannot sit on
	// the body's own overlay root: its store is a directory of the VM's,
	// as on a VM it is a directory of the VM's disk.
	containerd := filepath.Join(dir, "containerd")
	if err := os.MkdirAll(containerd, 0o700); err != nil {
		gi.Close()
		return nil, err
	}
	binds = append(binds, body.Bind{Host: containerd, Body: "/var/lib/containerd"})
	m.body, err = body.Start(ctx, body.Spec{
		Name: vm.Name, UUID: vm.UUID, ImageRoot: img.Root, StateDir: filepath.Join(dir, bodyDirName), Netns: m.netns,
		GuestinfoDir: giDir, RPCTool: ms.rpcTool, Binds: binds, Log: ms.log,
	})
	if err != nil {
		gi.Close()
		return nil, err
	}
	ms.log.Info("lab: VM powered on; its body boots", "vm", vm.Name, "image", vm.Image, "netns", m.netns)
	return m, nil
}

// vmOwnerFile, in a VM's directory, names the VM (its reference) whose OS
// disk the directory is.
const vmOwnerFile = "vm"

// ownDir makes vmsDir/NAME the OS disk of vm. A VM's directory is named
// for the VM but follows the VM, not the name: an upgrade renames the VM
// it replaces (kept, powered off, for a rollback) and clones a new one of
// the same name, which boots its image fresh; a rollback gives the old VM
// its name and its own disk back. A directory whose VM still exists moves
// to that VM's name; one whose VM is gone is wiped. all is every VM
// vCenter has.
func ownDir(vmsDir string, vm vmState, all []vmState, log *slog.Logger) error {
	if vm.Ref.Value == "" {
		return errors.New("no VM reference")
	}
	dir := filepath.Join(vmsDir, vm.Name)
	owner, err := dirOwner(dir)
	switch {
	case err != nil:
		return err
	case owner == vm.Ref.Value:
		return nil
	case owner != "":
		// The name's directory is another VM's: it goes with that VM.
		if err := moveAside(vmsDir, dir, owner, all, log); err != nil {
			return err
		}
	case dirExists(dir):
		// A lab from before owners were recorded: the VM of the name
		// keeps it.
		return os.WriteFile(filepath.Join(dir, vmOwnerFile), []byte(vm.Ref.Value+"\n"), 0o644)
	}
	entries, err := os.ReadDir(vmsDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, e := range entries {
		other := filepath.Join(vmsDir, e.Name())
		if o, _ := dirOwner(other); o == vm.Ref.Value && other != dir {
			log.Info("lab: a VM renamed back takes its own disk again", "vm", vm.Name, "from", other)
			return os.Rename(other, dir)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, vmOwnerFile), []byte(vm.Ref.Value+"\n"), 0o644)
}

// moveAside takes dir, the OS disk of the VM owner, out of the way: to
// that VM's present name if it still exists, or away altogether.
func moveAside(vmsDir, dir, owner string, all []vmState, log *slog.Logger) error {
	if points, _ := body.MountsUnder(dir); len(points) > 0 {
		return fmt.Errorf("%s belongs to VM %s, whose mounts remain: %v", dir, owner, points)
	}
	for _, o := range all {
		if o.Ref.Value != owner {
			continue
		}
		to := filepath.Join(vmsDir, o.Name)
		if to == dir {
			return fmt.Errorf("VM %s and another VM both have the name %s", owner, o.Name)
		}
		if dirExists(to) {
			return fmt.Errorf("cannot move %s to %s for VM %s: it exists", dir, to, owner)
		}
		log.Info("lab: a new VM of an old name boots fresh; the old VM keeps its disk under its new name", "dir", dir, "to", to)
		return os.Rename(dir, to)
	}
	log.Info("lab: a new VM of an old name boots fresh; the old VM is gone, and its disk with it", "dir", dir, "was", owner)
	return os.RemoveAll(dir)
}

// sweepDirs removes the OS disks of VMs that vCenter no longer has.
func sweepDirs(vmsDir string, all []vmState, log *slog.Logger) error {
	live := map[string]bool{}
	for _, vm := range all {
		live[vm.Ref.Value] = true
	}
	entries, err := os.ReadDir(vmsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		dir := filepath.Join(vmsDir, e.Name())
		owner, err := dirOwner(dir)
		if err != nil || owner == "" || live[owner] {
			continue
		}
		if points, _ := body.MountsUnder(dir); len(points) > 0 {
			continue // its body is still being taken down
		}
		log.Info("lab: a destroyed VM's disk goes", "dir", dir, "vm", owner)
		errs = append(errs, os.RemoveAll(dir))
	}
	return errors.Join(errs...)
}

// dirOwner reads a VM directory's owner: "" when it has none recorded.
func dirOwner(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, vmOwnerFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return strings.TrimSpace(string(b)), err
}

func dirExists(dir string) bool {
	st, err := os.Stat(dir)
	return err == nil && st.IsDir()
}

// powerOff ends a body at once, as a VM losing power: its link goes down
// first, so that a VIP it held stops answering.
func (ms *machines) powerOff(ctx context.Context, m *machine) error {
	_ = ip(ctx, "-n", m.netns, "link", "set", "eth0", "down")
	err := m.body.Kill(ctx)
	m.guestinfo.Close()
	return errors.Join(err, ip(ctx, "netns", "del", m.netns))
}

func (ms *machines) stopAll(ctx context.Context) error {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	var errs []error
	for ref, m := range ms.running {
		errs = append(errs, ms.powerOff(ctx, m))
		delete(ms.running, ref)
	}
	return errors.Join(errs...)
}

// plugVM makes a VM's namespace on the lab's switch, replacing one a
// crashed body left. The NIC has no address: the body's own network unit
// gives it the one the controller wrote into guestinfo.
func (ms *machines) plugVM(ctx context.Context, name, netns string) error {
	if netnsExists(ctx, netns) {
		_ = ip(ctx, "netns", "del", netns)
	}
	// The kernel frees a deleted namespace asynchronously, slowly on a
	// loaded machine, and until then the old NIC keeps its name on the
	// switch (or, after a failed plug, on the machine). The name is this
	// lab's own (vmLink), and deleting one end deletes the pair.
	link := vmLink(ms.r.ID, name)
	for _, where := range [][]string{{"-n", ms.r.Switch}, nil} {
		if linkExists(ctx, where, link) {
			if err := ip(ctx, append(where, "link", "del", link)...); err != nil {
				return fmt.Errorf("plug %s: remove the old NIC: %w", name, err)
			}
		}
	}
	return plug(ctx, ms.r, name, netns)
}

// image returns the prepared image a VM was cloned from.
func (ms *machines) image(ctx context.Context, name string) (*body.Image, error) {
	if img, ok := ms.images[name]; ok {
		return img, nil
	}
	idx, err := readImageIndex(ms.r)
	if err != nil {
		return nil, err
	}
	ova, ok := idx[name]
	if !ok {
		return nil, fmt.Errorf("cloned from image %q, whose OVA the lab does not know (images.json)", name)
	}
	img, err := body.PrepareImage(ctx, ova, ms.r.imagesDir(), ms.log)
	if err != nil {
		return nil, err
	}
	ms.images[name] = img
	return img, nil
}

// diskDir is the directory that stands for a disk, from its datastore
// path: "[LocalDS_0] harmony-data/c/n.vmdk" is datastores/LocalDS_0/harmony-data/c/n.
func (ms *machines) diskDir(path string) (string, error) {
	ds, rel, ok := strings.Cut(strings.TrimPrefix(path, "["), "] ")
	rel = strings.TrimSuffix(rel, ".vmdk")
	clean := filepath.Clean("/" + rel)
	if !ok || ds == "" || strings.ContainsAny(ds, "/\x00") || clean == "/" || clean != "/"+rel {
		return "", fmt.Errorf("disk %q: not a datastore path the lab can keep", path)
	}
	dir := filepath.Join(ms.r.dir(), "datastores", ds, clean)
	return dir, os.MkdirAll(dir, 0o700)
}
