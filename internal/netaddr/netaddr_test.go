package netaddr

import (
	"net/netip"
	"testing"
)

// IPv4 addresses, mapped or not, are their own source; an IPv6 address
// is its /64, zone dropped. (2001:2::/48 is the IPv6 benchmarking range.)
func TestSourceKey(t *testing.T) {
	for in, want := range map[string]string{
		"198.18.0.50":        "198.18.0.50",
		"::ffff:198.18.0.50": "198.18.0.50",
		"2001:2:0:1:a:b:c:d": "2001:2:0:1::/64",
		"2001:2:0:1::1":      "2001:2:0:1::/64",
		"fe80::1%eth0":       "fe80::/64",
		"::1":                "::/64",
	} {
		if got := SourceKey(netip.MustParseAddr(in)); got != want {
			t.Errorf("SourceKey(%s) = %s, want %s", in, got, want)
		}
	}
}
