package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
)

// ip runs ip(8).
func ip(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// makeSwitch makes the lab's bridge, in a namespace of its own, and links
// the machine to it with the subnet's .1, so that the controller,
// Prometheus and the user reach every host and the VIP.
func makeSwitch(ctx context.Context, r *record, subnet netip.Prefix) error {
	steps := [][]string{
		{"netns", "add", r.Switch},
		{"-n", r.Switch, "link", "add", "br0", "type", "bridge"},
		{"-n", r.Switch, "link", "set", "br0", "up"},
		{"link", "add", r.Uplink, "type", "veth", "peer", "name", "uplink", "netns", r.Switch},
		{"-n", r.Switch, "link", "set", "uplink", "master", "br0", "up"},
		{"addr", "add", netip.PrefixFrom(addr(subnet, 1), 24).String(), "dev", r.Uplink},
		{"link", "set", r.Uplink, "up"},
	}
	for _, s := range steps {
		if err := ip(ctx, s...); err != nil {
			return fmt.Errorf("lab switch: %w", err)
		}
	}
	return nil
}

// checkSubnetFree refuses a subnet that the machine (or the namespace
// that where selects) already routes: another lab on it, or one a killed
// run left, would take the replies meant for this lab's hosts.
func checkSubnetFree(ctx context.Context, where []string, subnet netip.Prefix) error {
	out, err := exec.CommandContext(ctx, "ip", append(where, "-j", "-4", "route", "show", "table", "all")...).Output()
	if err != nil {
		return fmt.Errorf("list the machine's routes: %w", err)
	}
	var routes []struct {
		Dst string `json:"dst"`
		Dev string `json:"dev"`
	}
	if err := json.Unmarshal(out, &routes); err != nil {
		return fmt.Errorf("list the machine's routes: %w", err)
	}
	for _, rt := range routes {
		dst, err := netip.ParsePrefix(rt.Dst)
		if err != nil {
			a, aerr := netip.ParseAddr(rt.Dst)
			if aerr != nil {
				continue // default, or a kind that names no destination
			}
			dst = netip.PrefixFrom(a, a.BitLen())
		}
		if dst.Bits() > 0 && dst.Overlaps(subnet) {
			return fmt.Errorf("subnet %s: the machine already routes %s through %s (another lab, or one left behind: harmonyctl lab down --state DIR, or choose another --subnet)", subnet, dst, rt.Dev)
		}
	}
	return nil
}

// plug makes a VM's network namespace with its NIC, eth0, on the lab's
// switch. The NIC has no address: the body's own network unit gives it
// the one the controller wrote into guestinfo.
func plug(ctx context.Context, r *record, name, netns string) error {
	link := vmLink(r.ID, name)
	for _, s := range [][]string{
		{"netns", "add", netns},
		{"link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", netns},
		{"link", "set", link, "netns", r.Switch},
		{"-n", r.Switch, "link", "set", link, "master", "br0", "up"},
		{"-n", netns, "link", "set", "lo", "up"},
	} {
		if err := ip(ctx, s...); err != nil {
			return fmt.Errorf("plug %s: %w", name, err)
		}
	}
	return nil
}

// linkExists reports whether a link is in the namespace that the ip(8)
// arguments in where select (none: the machine's).
func linkExists(ctx context.Context, where []string, link string) bool {
	return exec.CommandContext(ctx, "ip", append(where, "link", "show", "dev", link)...).Run() == nil
}

// listNetns lists the machine's named network namespaces.
func listNetns(ctx context.Context) []string {
	out, err := exec.CommandContext(ctx, "ip", "netns", "list").Output()
	if err != nil {
		return nil
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	return names
}

// netnsExists reports whether a named network namespace exists.
func netnsExists(ctx context.Context, ns string) bool {
	return slices.Contains(listNetns(ctx), ns)
}

// netnsPIDs lists the processes inside a network namespace.
func netnsPIDs(ctx context.Context, ns string) []int {
	out, err := exec.CommandContext(ctx, "ip", "netns", "pids", ns).Output()
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		var pid int
		if _, err := fmt.Sscan(f, &pid); err == nil && pid > 1 {
			pids = append(pids, pid)
		}
	}
	return pids
}
