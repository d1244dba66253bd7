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
		m, err := ms.powerOn(ctx, vm)
		if err != nil {
			errs = append(errs, fmt.Errorf("boot %s: %w", vm.Name, err))
			continue
		}
		ms.running[ref] = m
	}
	return errors.Join(errs...)
}

// vmName is what a body, its namespace and its link may be named after.
var vmName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,30}$`)

// powerOn gives a VM its body: a network namespace on the lab's switch,
// its guestinfo socket, its data disks, and its image booted.
func (ms *machines) powerOn(ctx context.Context, vm vmState) (*machine, error) {
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
	if err := ownDisk(dir, vm.UUID, ms.log); err != nil {
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

// vmDiskDirs are a VM directory's parts that stand for its OS disk: the
// body's writable layer and containerd's store.
var vmDiskDirs = []string{bodyDirName, "containerd"}

// ownDisk makes dir the OS disk of the VM with this BIOS UUID. A VM's
// directory is named for the VM, but a clone of the same name (a reimage,
// or a VM made again after it vanished) is another VM: it boots its image
// fresh, as a clone does, not over the writes of the VM before it.
func ownDisk(dir, uuid string, log *slog.Logger) error {
	if uuid == "" {
		return fmt.Errorf("no BIOS UUID")
	}
	marker := filepath.Join(dir, "uuid")
	old, err := os.ReadFile(marker)
	switch {
	case err == nil && strings.TrimSpace(string(old)) == uuid:
		return nil
	case err == nil:
		if points, _ := body.MountsUnder(dir); len(points) > 0 {
			return fmt.Errorf("a new VM of the name, but the old one's mounts remain: %v", points)
		}
		for _, sub := range vmDiskDirs {
			if err := os.RemoveAll(filepath.Join(dir, sub)); err != nil {
				return err
			}
		}
		log.Info("lab: a new VM of an old name boots its image fresh", "dir", dir, "uuid", uuid, "was", strings.TrimSpace(string(old)))
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(marker, []byte(uuid+"\n"), 0o644)
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
