package lab

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/harmonykaas/harmony/controller/vsphere"
	"github.com/harmonykaas/harmony/integration/lab/body"
)

// VM is one VM of a running lab, as a user (or a test) reaches it from
// the machine: through the lab's vCenter, its body and its namespace.
type VM struct {
	Name string
	// Netns is the body's network namespace (ip -n NETNS ...).
	Netns string
	// Dir is the VM's directory in the state directory; its body's state
	// (upper layer, console log) is in Dir/body.
	Dir      string
	stateDir string
}

// OpenVM names a VM of the lab in stateDir; the VM need not exist yet.
func OpenVM(stateDir, name string) (*VM, error) {
	r, err := openLab(stateDir)
	if err != nil {
		return nil, err
	}
	return r.vm(name)
}

// openLab is the record of the lab in stateDir; an error if no lab is
// there.
func openLab(stateDir string) (*record, error) {
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		return nil, err
	}
	r, err := loadRecord(abs)
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, fmt.Errorf("no lab in %s", abs)
	}
	return r, nil
}

// vm names one of the lab's VMs.
func (r *record) vm(name string) (*VM, error) {
	if !vmName.MatchString(name) {
		return nil, fmt.Errorf("VM name %q: the lab runs VMs named [a-z0-9-], at most 31", name)
	}
	return &VM{Name: name, Netns: vmNetns(r.ID, name), Dir: r.vmDir(name), stateDir: r.dir()}, nil
}

// Body is the VM's running body; an error if it is powered off.
func (v *VM) Body() (*body.Body, error) {
	b, err := body.Open(filepath.Join(v.Dir, bodyDirName), nil)
	if err != nil {
		return nil, fmt.Errorf("VM %s: no body: %w", v.Name, err)
	}
	if !b.Running() {
		return nil, fmt.Errorf("VM %s: its body is not running", v.Name)
	}
	return b, nil
}

// Power turns the VM on or off through the lab's vCenter, as a user would
// with govc or the vSphere client. Power off kills the body, as a VM
// losing power, and returns once it has ended: as on vSphere, where the
// task completes with the VM off (the lab's machines follow vCenter
// within a second). Power on returns at once; the body boots again with
// the same disks.
func (v *VM) Power(ctx context.Context, on bool) error {
	err := v.withVM(ctx, func(s *vsphere.Session, vm vmState) error {
		if on {
			return s.PowerOn(ctx, vm.Ref)
		}
		return s.PowerOff(ctx, vm.Ref)
	})
	if err != nil || on {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, powerOffTimeout)
	defer cancel()
	for {
		if _, err := v.Body(); err != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("VM %s: powered off, but its body still runs after %s (is harmonyctl lab serve running? logs/serve.log)", v.Name, powerOffTimeout)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// powerOffTimeout bounds the wait for a powered-off VM's body to end.
const powerOffTimeout = 30 * time.Second

// Guestinfo reads one of the VM's guestinfo keys in vCenter: what the
// controller wrote, or the guest wrote back. ok is false when the key is
// absent.
func (v *VM) Guestinfo(ctx context.Context, key string) (value string, ok bool, err error) {
	err = v.withVM(ctx, func(s *vsphere.Session, vm vmState) error {
		value, ok, err = vmGuestinfo{c: s.Client.Client, ref: vm.Ref}.Get(ctx, key)
		return err
	})
	return value, ok, err
}

// Exists reports whether the lab's vCenter has the VM.
func (v *VM) Exists(ctx context.Context) (bool, error) {
	err := v.withVM(ctx, func(*vsphere.Session, vmState) error { return nil })
	if _, missing := err.(errNoVM); missing {
		return false, nil
	}
	return err == nil, err
}

type errNoVM struct{ name string }

func (e errNoVM) Error() string { return fmt.Sprintf("no VM %q in the lab's vCenter", e.name) }

// withVM logs in to the lab's vCenter and calls f with the VM.
func (v *VM) withVM(ctx context.Context, f func(*vsphere.Session, vmState) error) error {
	r, err := openLab(v.stateDir)
	if err != nil {
		return err
	}
	ep, err := readEndpoint(r)
	if err != nil {
		return fmt.Errorf("lab vCenter: %w", err)
	}
	s, err := vsphere.Connect(ctx, ep.Provider(ProviderName, nil))
	if err != nil {
		return err
	}
	defer s.Logout(context.WithoutCancel(ctx))
	vms, err := listVMs(ctx, s.Client.Client)
	if err != nil {
		return err
	}
	for _, vm := range vms {
		if vm.Name == v.Name {
			return f(s, vm)
		}
	}
	return errNoVM{v.Name}
}
