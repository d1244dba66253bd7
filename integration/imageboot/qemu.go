package imageboot

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"time"
)

// OVMF's plain (Secure Boot off) firmware: Debian's systemd-boot is
// unsigned.
const (
	OVMFCode = "/usr/share/OVMF/OVMF_CODE_4M.fd"
	OVMFVars = "/usr/share/OVMF/OVMF_VARS_4M.fd"
)

// Options describe one VM.
type Options struct {
	Disk string
	// DataDisk, when set, is a second raw disk: the node's data disk.
	DataDisk  string
	MemoryMiB int
	CPUs      int
	// SerialLog receives the serial console.
	SerialLog string
	// Net is QEMU's user network, a /24 in 198.18.0.0/15; the guest
	// gets .15 by DHCP and reaches the host's 127.0.0.1 at .2.
	Net netip.Prefix
	// VMware gives the VM the devices the OVF declares (ova/ovf): the
	// disks behind a pvscsi controller and a vmxnet3 NIC, in place of
	// virtio. Debian's OVMF has no pvscsi driver, so the firmware starts
	// the kernel, initrd and command line of the disk's boot entry itself
	// (ReadBootEntry), as systemd-boot would: the kernel and the initrd
	// are what meet the devices.
	VMware bool
	// Forwards are host ports on 127.0.0.1 that QEMU forwards to guest
	// ports (its hostfwd), for a test that talks to a service in the VM.
	Forwards []Forward
	// EarlyStall, when set, replaces DefaultEarlyStall (Boot).
	EarlyStall time.Duration
}

// Forward is one TCP port forwarded from the host's loopback into the VM.
type Forward struct{ Host, Guest uint16 }

// GuestAddr and HostAddr are the addresses of the guest and of the host
// (as the guest sees it) on opts.Net.
func (o Options) GuestAddr() netip.Addr { return nth(o.Net, 15) }
func (o Options) HostAddr() netip.Addr  { return nth(o.Net, 2) }

func nth(p netip.Prefix, n byte) netip.Addr {
	a := p.Masked().Addr().As4()
	a[3] = n
	return netip.AddrFrom4(a)
}

// VM is a running QEMU.
type VM struct {
	cmd     *exec.Cmd
	opts    Options
	started time.Time
	done    chan struct{}
	err     error
}

// Start boots the disk under TCG: KVM does not work on these machines.
func Start(ctx context.Context, o Options) (*VM, error) {
	if !o.Net.IsValid() || o.Net.Bits() != 24 || !netip.MustParsePrefix("198.18.0.0/15").Contains(o.Net.Addr()) {
		return nil, fmt.Errorf("net %v: want a /24 inside 198.18.0.0/15", o.Net)
	}
	if o.MemoryMiB == 0 {
		o.MemoryMiB = 2048
	}
	if o.CPUs == 0 {
		o.CPUs = 2
	}
	vars := filepath.Join(filepath.Dir(o.SerialLog), "OVMF_VARS.fd")
	if err := copyFile(OVMFVars, vars); err != nil {
		return nil, fmt.Errorf("private OVMF vars: %w", err)
	}
	userNet := fmt.Sprintf("user,net=%s,host=%s,dhcpstart=%s,dns=%s",
		o.Net.Masked(), o.HostAddr(), o.GuestAddr(), nth(o.Net, 3))
	for _, f := range o.Forwards {
		userNet += fmt.Sprintf(",hostfwd=tcp:127.0.0.1:%d-:%d", f.Host, f.Guest)
	}
	cmd := exec.Command("qemu-system-x86_64",
		"-machine", "q35", "-accel", "tcg,thread=multi", "-cpu", "max",
		"-m", strconv.Itoa(o.MemoryMiB), "-smp", strconv.Itoa(o.CPUs),
		"-drive", "if=pflash,format=raw,readonly=on,file="+OVMFCode,
		"-drive", "if=pflash,format=raw,file="+vars)
	disks := []string{o.Disk}
	if o.DataDisk != "" {
		disks = append(disks, o.DataDisk)
	}
	nic := "virtio-net-pci"
	if o.VMware {
		boot, err := ReadBootEntry(ctx, o.Disk, filepath.Dir(o.SerialLog))
		if err != nil {
			return nil, err
		}
		cmd.Args = append(cmd.Args, "-kernel", boot.Kernel, "-initrd", boot.Initrd, "-append", boot.Options,
			"-device", "pvscsi,id=pvscsi0")
		nic = "vmxnet3"
	}
	for i, d := range disks {
		dev := fmt.Sprintf("virtio-blk-pci,drive=disk%d", i)
		switch {
		case o.VMware:
			dev = fmt.Sprintf("scsi-hd,drive=disk%d,bus=pvscsi0.0,scsi-id=%d", i, i)
		case i == 0:
			// The firmware boots the first disk, with no boot order
			// to work out.
			dev += ",bootindex=0"
		}
		cmd.Args = append(cmd.Args, "-drive", fmt.Sprintf("if=none,id=disk%d,format=raw,file=%s", i, d), "-device", dev)
	}
	// No option ROM on the NIC: QEMU's iPXE, which OVMF would load and
	// start (1.2 s under TCG), for a network boot no Harmony VM makes.
	cmd.Args = append(cmd.Args, "-netdev", userNet+",id=net0", "-device", nic+",netdev=net0,romfile=")
	cmd.Args = append(cmd.Args, "-display", "none", "-monitor", "none", "-serial", "file:"+o.SerialLog, "-no-reboot")
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	vm := &VM{cmd: cmd, opts: o, started: time.Now(), done: make(chan struct{})}
	go func() {
		vm.err = cmd.Wait()
		close(vm.done)
	}()
	return vm, nil
}

// The console's milestones on the way to userspace: the kernel's banner
// and systemd's.
var (
	KernelMark  = regexp.MustCompile(`Linux version`)
	SystemdMark = regexp.MustCompile(`Welcome to .*Debian`)
)

// DefaultEarlyStall is how long the console may stay silent before systemd
// starts. Under TCG the kernel prints every few hundred milliseconds until
// then, and the initrd's quietest step takes seconds.
const DefaultEarlyStall = 2 * time.Minute

// errStalled marks a guest that went silent before systemd started.
var errStalled = errors.New("the guest's console went silent before systemd started")

// EarlyBoot is when the console first showed the kernel's and systemd's
// banners, after QEMU started (as seen by polling, every 100 ms).
type EarlyBoot struct{ Kernel, Systemd time.Duration }

// Boot starts the VM and waits until systemd starts in it. Under TCG a
// guest kernel has been seen to stop for good in its first two seconds
// (CI, 2026-12-02: nothing more on the console for 15 minutes after
// "IP idents hash table entries"), an emulator hang that no image change
// causes or cures. Nothing has written the data disk by then, and a
// reset is what a vSphere VM must survive anyway, so when the console is
// silent for Options.EarlyStall before systemd, Boot powers the VM off
// and boots it once more, keeping the stalled console beside the new one
// (SerialLog + ".stalled") and saying so through logf. A second stall is
// an error, as is any other failure before systemd.
func Boot(ctx context.Context, o Options, logf func(format string, args ...any)) (*VM, EarlyBoot, error) {
	for attempt := 1; ; attempt++ {
		vm, err := Start(ctx, o)
		if err != nil {
			return nil, EarlyBoot{}, err
		}
		early, err := vm.waitSystemd(ctx)
		if err == nil {
			return vm, early, nil
		}
		vm.Stop()
		err = fmt.Errorf("boot %s: %w; serial console (tail):\n%s", filepath.Base(o.Disk), err, vm.SerialTail(3000))
		if !errors.Is(err, errStalled) || attempt == 2 {
			return nil, EarlyBoot{}, err
		}
		if rerr := os.Rename(o.SerialLog, o.SerialLog+".stalled"); rerr != nil {
			return nil, EarlyBoot{}, fmt.Errorf("%w (and keeping its console: %v)", err, rerr)
		}
		logf("%s: QEMU's guest stalled before systemd, booting it once more: %v", filepath.Base(o.Disk), err)
	}
}

// waitSystemd waits for SystemdMark on the console, noting when the
// kernel's banner came, and fails with errStalled when the console stops
// growing for the options' EarlyStall.
func (vm *VM) waitSystemd(ctx context.Context) (EarlyBoot, error) {
	var early EarlyBoot
	stall := cmp.Or(vm.opts.EarlyStall, DefaultEarlyStall)
	size, grew := 0, time.Now()
	err := vm.poll(ctx, SystemdMark, func(data []byte, now time.Time) (bool, error) {
		if len(data) > size {
			size, grew = len(data), now
		}
		if early.Kernel == 0 && KernelMark.Match(data) {
			early.Kernel = now.Sub(vm.started)
		}
		if SystemdMark.Match(data) {
			early.Systemd = now.Sub(vm.started)
			return true, nil
		}
		if silent := now.Sub(grew); silent > stall {
			return false, fmt.Errorf("%w: nothing new for %s", errStalled, silent.Round(time.Second))
		}
		return false, nil
	})
	return early, err
}

// Started is when QEMU was started.
func (vm *VM) Started() time.Time { return vm.started }

// WaitSerial waits until the serial log matches re and returns when it
// first did (as seen by polling, every 100 ms).
func (vm *VM) WaitSerial(ctx context.Context, re *regexp.Regexp) (time.Time, error) {
	var at time.Time
	err := vm.poll(ctx, re, func(data []byte, now time.Time) (bool, error) {
		at = now
		return re.Match(data), nil
	})
	if err != nil {
		return time.Time{}, err
	}
	return at, nil
}

// poll hands the console log to check every 100 ms until check says it
// is done or fails, ctx ends, or QEMU exits; want, the pattern waited
// for, names the wait in the last two errors.
func (vm *VM) poll(ctx context.Context, want *regexp.Regexp, check func(serial []byte, now time.Time) (bool, error)) error {
	for {
		data, _ := os.ReadFile(vm.opts.SerialLog)
		if done, err := check(data, time.Now()); done || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("serial console never matched %q: %w", want, ctx.Err())
		case <-vm.done:
			return fmt.Errorf("qemu exited (%v) before the serial console matched %q", vm.err, want)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Exited is closed when QEMU has exited.
func (vm *VM) Exited() <-chan struct{} { return vm.done }

// SerialTail is the console log's last n bytes, what a failing test
// prints.
func (vm *VM) SerialTail(n int) string {
	serial := vm.Serial()
	return serial[max(0, len(serial)-n):]
}

// Serial is the console log so far.
func (vm *VM) Serial() string {
	data, _ := os.ReadFile(vm.opts.SerialLog)
	return string(data)
}

// Stop ends QEMU: SIGTERM, then SIGKILL after 10 s. It is safe to call
// more than once.
func (vm *VM) Stop() error {
	select {
	case <-vm.done:
		return nil
	default:
	}
	_ = vm.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-vm.done:
	case <-time.After(10 * time.Second):
		_ = vm.cmd.Process.Kill()
		<-vm.done
	}
	var exit *exec.ExitError
	if vm.err != nil && !errors.As(vm.err, &exit) {
		return vm.err
	}
	return nil
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o600)
}
