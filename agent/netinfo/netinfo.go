//go:build linux

// Package netinfo observes the node's network over netlink: which
// interface is primary, its state and addresses, and when any of that
// changes. Every call acts in the network namespace of the calling OS
// thread, which is how tests (and the lab) point it at a namespace.
package netinfo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// How PrimaryLink chose the interface (Link.Via).
const (
	ViaIPv4DefaultRoute = "ipv4-default-route"
	ViaIPv6DefaultRoute = "ipv6-default-route"
	ViaOnlyGlobalLink   = "only-link-with-global-address"
)

// Link is what the agent observes of one interface.
type Link struct {
	Name  string
	Index int
	// AdminUp is the IFF_UP flag: someone set the link up.
	AdminUp bool
	// OperState is the kernel's RFC 2863 state: "up", "down",
	// "lower-layer-down" (a veth whose peer is down), "unknown" (drivers that
	// do not report carrier), ...
	OperState string
	// Up means the link can carry traffic: admin up, and operationally up
	// or unknown.
	Up  bool
	MTU int
	// Addresses are the link's global unicast addresses, IPv4 first, in
	// the kernel's order; tentative and duplicate (DAD-failed) IPv6
	// addresses are left out because nothing can bind them yet.
	Addresses []netip.Addr
	// Via says how PrimaryLink chose this link; empty from LinkState.
	Via string
}

// String is for status messages: "eth0 up 198.18.50.2,2001:db8::2".
func (l Link) String() string {
	state := l.OperState
	if !l.AdminUp {
		state = "admin-down"
	}
	addrs := make([]string, len(l.Addresses))
	for i, a := range l.Addresses {
		addrs[i] = a.String()
	}
	if len(addrs) == 0 {
		addrs = []string{"no global address"}
	}
	return fmt.Sprintf("%s %s %s", l.Name, state, strings.Join(addrs, ","))
}

// Primary returns the primary interface's name and global addresses, for
// callers that need only those (certificate SANs, reconcile.Facts). Unlike
// PrimaryLink it fails when the interface has no global address.
func Primary() (string, []netip.Addr, error) {
	l, err := PrimaryLink(context.Background())
	if err != nil {
		return "", nil, err
	}
	if len(l.Addresses) == 0 {
		return "", nil, fmt.Errorf("primary interface %s (%s) has no global unicast address", l.Name, l.Via)
	}
	return l.Name, l.Addresses, nil
}

// PrimaryLink finds the node's primary interface: the one the IPv4
// default route leaves by, else the IPv6 default route's, else the only
// link that is up, not loopback, and has a global unicast address. With
// several such links and no default route it refuses to guess.
func PrimaryLink(ctx context.Context) (Link, error) {
	for _, fam := range []struct {
		family int
		via    string
	}{{netlink.FAMILY_V4, ViaIPv4DefaultRoute}, {netlink.FAMILY_V6, ViaIPv6DefaultRoute}} {
		if err := ctx.Err(); err != nil {
			return Link{}, err
		}
		index, err := defaultRouteLink(fam.family)
		if err != nil {
			return Link{}, err
		}
		if index == 0 {
			continue
		}
		nl, err := netlink.LinkByIndex(index)
		if err != nil {
			return Link{}, fmt.Errorf("link %d of the default route: %w", index, err)
		}
		l, err := describe(nl)
		if err != nil {
			return Link{}, err
		}
		l.Via = fam.via
		return l, nil
	}
	if err := ctx.Err(); err != nil {
		return Link{}, err
	}
	links, err := retryDump(netlink.LinkList)
	if err != nil {
		return Link{}, fmt.Errorf("list links: %w", err)
	}
	var candidates []Link
	for _, nl := range links {
		if nl.Attrs().Flags&net.FlagLoopback != 0 {
			continue
		}
		l, err := describe(nl)
		if err != nil {
			return Link{}, err
		}
		if l.Up && len(l.Addresses) > 0 {
			candidates = append(candidates, l)
		}
	}
	switch len(candidates) {
	case 0:
		return Link{}, errors.New("no default route, and no link that is up has a global unicast address")
	case 1:
		candidates[0].Via = ViaOnlyGlobalLink
		return candidates[0], nil
	}
	names := make([]string, len(candidates))
	for i, c := range candidates {
		names[i] = c.Name
	}
	slices.Sort(names)
	return Link{}, fmt.Errorf("no default route, and several links have global addresses (%s): cannot tell which is primary", strings.Join(names, ", "))
}

// LinkState observes the named link.
func LinkState(ctx context.Context, name string) (Link, error) {
	if err := ctx.Err(); err != nil {
		return Link{}, err
	}
	nl, err := netlink.LinkByName(name)
	if err != nil {
		return Link{}, fmt.Errorf("link %q: %w", name, err)
	}
	return describe(nl)
}

// defaultRouteLink returns the index of the link that the family's
// default route (the one with the lowest metric) leaves by, or 0 when
// there is none. Unreachable and blackhole defaults do not count.
func defaultRouteLink(family int) (int, error) {
	routes, err := retryDump(func() ([]netlink.Route, error) { return netlink.RouteList(nil, family) })
	if err != nil {
		return 0, fmt.Errorf("list routes: %w", err)
	}
	best, bestMetric := 0, -1
	for _, r := range routes {
		if !isDefault(r.Dst) || r.Type != unix.RTN_UNICAST {
			continue
		}
		index := r.LinkIndex
		if index == 0 && len(r.MultiPath) > 0 {
			// An ECMP default: the first next hop's link.
			index = r.MultiPath[0].LinkIndex
		}
		if index != 0 && (bestMetric < 0 || r.Priority < bestMetric) {
			best, bestMetric = index, r.Priority
		}
	}
	return best, nil
}

func isDefault(dst *net.IPNet) bool {
	if dst == nil {
		return true
	}
	ones, _ := dst.Mask.Size()
	return ones == 0 && dst.IP.IsUnspecified()
}

func describe(nl netlink.Link) (Link, error) {
	a := nl.Attrs()
	l := Link{
		Name:      a.Name,
		Index:     a.Index,
		AdminUp:   a.Flags&net.FlagUp != 0,
		OperState: a.OperState.String(),
		MTU:       a.MTU,
	}
	l.Up = l.AdminUp && (a.OperState == netlink.OperUp || a.OperState == netlink.OperUnknown)
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return netlink.AddrList(nl, netlink.FAMILY_ALL) })
	if err != nil {
		return Link{}, fmt.Errorf("addresses of %s: %w", a.Name, err)
	}
	l.Addresses = globalAddresses(addrs)
	return l, nil
}

// globalAddresses keeps the usable global unicast addresses, IPv4 first.
func globalAddresses(addrs []netlink.Addr) []netip.Addr {
	var out []netip.Addr
	for _, a := range addrs {
		if a.IPNet == nil || a.Flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) != 0 {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if ip.IsGlobalUnicast() {
			out = append(out, ip)
		}
	}
	slices.SortStableFunc(out, func(x, y netip.Addr) int {
		switch {
		case x.Is4() == y.Is4():
			return 0
		case x.Is4():
			return -1
		}
		return 1
	})
	return out
}

// retryDump repeats a netlink dump that a concurrent change interrupted:
// its result may be incomplete.
func retryDump[T any](dump func() ([]T, error)) ([]T, error) {
	var err error
	for range 5 {
		var out []T
		if out, err = dump(); !errors.Is(err, netlink.ErrDumpInterrupted) {
			return out, err
		}
	}
	return nil, err
}
