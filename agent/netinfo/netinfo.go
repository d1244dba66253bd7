// Package netinfo finds the node's primary interface and its addresses.
package netinfo

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"

	"github.com/harmonykaas/harmony/internal/netaddr"
)

// Primary returns the interface that holds the IPv4 default route and its
// global unicast addresses. On a host with no default route it returns the
// first interface that is up, not loopback, and has such an address.
func Primary() (string, []netip.Addr, error) {
	name := defaultRouteInterface("/proc/net/route")
	ifaces, err := net.Interfaces()
	if err != nil {
		return "", nil, fmt.Errorf("list interfaces: %w", err)
	}
	for _, iface := range ifaces {
		if name != "" && iface.Name != name {
			continue
		}
		if iface.Flags&net.FlagUp == 0 || iface.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs := unicastAddrs(iface)
		if len(addrs) > 0 {
			return iface.Name, addrs, nil
		}
	}
	return "", nil, fmt.Errorf("no interface that is up has a global unicast address")
}

func unicastAddrs(iface net.Interface) []netip.Addr {
	addrs, err := iface.Addrs()
	if err != nil {
		return nil
	}
	return netaddr.GlobalUnicast(addrs)
}

// defaultRouteInterface reads the kernel's IPv4 routing table.
func defaultRouteInterface(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// Iface Destination Gateway Flags ... Mask
		if len(fields) >= 8 && fields[1] == "00000000" && fields[7] == "00000000" {
			return fields[0]
		}
	}
	return ""
}
