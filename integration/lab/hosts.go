package lab

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"time"
)

// StopHost powers a host off: its link goes down and every process (the
// agent and every daemon it runs) is killed at once, with no chance to
// say goodbye, as a VM losing power. Its files, the disk, stay.
func StopHost(ctx context.Context, stateDir, name string) error {
	_, h, err := findHost(stateDir, name)
	if err != nil {
		return err
	}
	// A dead host's kernel would still answer ARP for the VIP it held:
	// the link goes first.
	if err := ip(ctx, "-n", h.Netns, "link", "set", "eth0", "down"); err != nil {
		return err
	}
	killAll(ctx, netnsPIDs(ctx, h.Netns), 0)
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := netnsPIDs(ctx, h.Netns)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("lab: host %s: processes %v survive SIGKILL", name, pids)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// StartHost starts a stopped host's agent again, as a VM booting; the
// agent brings its daemons back.
func StartHost(ctx context.Context, stateDir, name string) error {
	r, h, err := findHost(stateDir, name)
	if err != nil {
		return err
	}
	if pids := netnsPIDs(ctx, h.Netns); len(pids) > 0 {
		return fmt.Errorf("lab: host %s is running (processes %v)", name, pids)
	}
	// A booting VM's NIC carries only its own address: the VIP it held
	// when it lost power is gone.
	subnet, err := netip.ParsePrefix(r.Subnet)
	if err != nil {
		return fmt.Errorf("lab record: subnet: %w", err)
	}
	for _, step := range [][]string{
		{"-n", h.Netns, "addr", "flush", "dev", "eth0"},
		{"-n", h.Netns, "addr", "add", h.IP + "/24", "dev", "eth0"},
		{"-n", h.Netns, "link", "set", "eth0", "up"},
		{"-n", h.Netns, "route", "replace", "default", "via", addr(subnet, 1).String()},
	} {
		if err := ip(ctx, step...); err != nil {
			return err
		}
	}
	return startAgent(r, h)
}

func findHost(stateDir, name string) (*record, hostRecord, error) {
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		return nil, hostRecord{}, err
	}
	r, err := loadRecord(abs)
	if err != nil {
		return nil, hostRecord{}, err
	}
	if r == nil {
		return nil, hostRecord{}, fmt.Errorf("lab: no lab in %s", abs)
	}
	for _, h := range r.Hosts {
		if h.Name == name {
			return r, h, nil
		}
	}
	return nil, hostRecord{}, fmt.Errorf("lab: no host %q in %s", name, abs)
}
