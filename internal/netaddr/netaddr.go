// Package netaddr filters interface addresses.
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
