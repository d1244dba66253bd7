// Package netaddr filters interface addresses and keys request sources.
package netaddr

import (
	"net"
	"net/netip"
)

// GlobalUnicast returns the global unicast addresses among addrs, as
// net.Interface.Addrs and net.InterfaceAddrs return them.
func GlobalUnicast(addrs []net.Addr) []netip.Addr {
	var out []netip.Addr
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().IsGlobalUnicast() {
			out = append(out, p.Addr())
		}
	}
	return out
}

// SourceKey is what a per-source limit counts a request's source by: an
// IPv4 address, or an IPv6 address's /64, since one host is routinely
// given a whole /64 and could otherwise send from as many addresses as it
// likes.
func SourceKey(remote netip.Addr) string {
	remote = remote.Unmap()
	if remote.Is4() {
		return remote.String()
	}
	return netip.PrefixFrom(remote.WithZone(""), 64).Masked().String()
}
