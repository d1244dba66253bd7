//go:build linux

package netinfo

import (
	"context"
	"net"
	"net/netip"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/harmonykaas/harmony/internal/testutil"
)

// testNetns makes a network namespace holding a veth pair, eth0 and eth1,
// both up and without addresses, and removes it when the test ends.
func testNetns(t *testing.T) string {
	t.Helper()
	ns := testutil.VethNetns(t, "ni")
	return ns
}

// enter locks the calling goroutine's thread into the namespace ns. The
// thread is never unlocked, so Go discards it when the goroutine ends
// rather than reuse it in the wrong namespace.
func enter(ns string) error {
	runtime.LockOSThread()
	h, err := netns.GetFromName(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	return netns.Set(h)
}

// in runs f on a goroutine inside the namespace ns.
func in[T any](t *testing.T, ns string, f func() (T, error)) (T, error) {
	t.Helper()
	type result struct {
		v   T
		err error
	}
	ch := make(chan result)
	go func() {
		if err := enter(ns); err != nil {
			var zero T
			ch <- result{zero, err}
			return
		}
		v, err := f()
		ch <- result{v, err}
	}()
	r := <-ch
	return r.v, r.err
}

func primaryIn(t *testing.T, ns string) (Link, error) {
	t.Helper()
	return in(t, ns, func() (Link, error) { return PrimaryLink(context.Background()) })
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func TestPrimaryIsTheIPv4DefaultRouteLink(t *testing.T) {
	ns := testNetns(t)
	testutil.IP(t, "-n", ns, "addr", "add", "198.18.50.2/24", "dev", "eth0")
	testutil.IP(t, "-n", ns, "addr", "add", "198.18.51.2/24", "dev", "eth1")
	testutil.IP(t, "-n", ns, "addr", "add", "198.18.51.9/24", "dev", "eth1")
	testutil.IP(t, "-n", ns, "route", "add", "default", "via", "198.18.51.1", "dev", "eth1")
	// A worse default through eth0 must not win.
	testutil.IP(t, "-n", ns, "route", "add", "default", "via", "198.18.50.1", "dev", "eth0", "metric", "500")

	l, err := primaryIn(t, ns)
	if err != nil {
		t.Fatal(err)
	}
	if l.Name != "eth1" || l.Via != ViaIPv4DefaultRoute || !l.Up || !l.AdminUp || l.OperState != "up" {
		t.Fatalf("primary %+v, want eth1 by the IPv4 default route, up", l)
	}
	if !slices.Equal(l.Addresses, addrs("198.18.51.2", "198.18.51.9")) {
		t.Fatalf("addresses %v", l.Addresses)
	}

	// The compatible form gives the same answer.
	type nameAddrs struct {
		name  string
		addrs []netip.Addr
	}
	got, err := in(t, ns, func() (nameAddrs, error) {
		n, a, err := Primary()
		return nameAddrs{n, a}, err
	})
	if err != nil || got.name != "eth1" || !slices.Equal(got.addrs, l.Addresses) {
		t.Fatalf("Primary() = %v, %v", got, err)
	}
}

func TestPrimaryFallsBackToTheIPv6DefaultRoute(t *testing.T) {
	ns := testNetns(t)
	testutil.IP(t, "-n", ns, "addr", "add", "198.18.50.2/24", "dev", "eth0")
	testutil.IP(t, "-n", ns, "addr", "add", "198.18.51.2/24", "dev", "eth1")
	// No IPv4 default; the IPv6 one goes by a link-local router, so the
	// test needs no IPv6 address of its own.
	testutil.IP(t, "-n", ns, "-6", "route", "add", "default", "via", "fe80::1", "dev", "eth0")

	l, err := primaryIn(t, ns)
	if err != nil {
		t.Fatal(err)
	}
	if l.Name != "eth0" || l.Via != ViaIPv6DefaultRoute {
		t.Fatalf("primary %+v, want eth0 by the IPv6 default route", l)
	}
	// Link-local addresses are not global.
	if !slices.Equal(l.Addresses, addrs("198.18.50.2")) {
		t.Fatalf("addresses %v", l.Addresses)
	}
}

func TestPrimaryWithoutDefaultRoute(t *testing.T) {
	ns := testNetns(t)
	if _, err := primaryIn(t, ns); err == nil {
		t.Fatal("no address anywhere, yet a primary link was found")
	}
	// Only eth0 has a global address: it is the primary.
	testutil.IP(t, "-n", ns, "addr", "add", "198.18.50.2/24", "dev", "eth0")
	l, err := primaryIn(t, ns)
	if err != nil {
		t.Fatal(err)
	}
	if l.Name != "eth0" || l.Via != ViaOnlyGlobalLink || !slices.Equal(l.Addresses, addrs("198.18.50.2")) {
		t.Fatalf("primary %+v, want eth0 as the only link with a global address", l)
	}
	// A loopback address does not make lo a candidate.
	testutil.IP(t, "-n", ns, "link", "set", "lo", "up")
	if l, err := primaryIn(t, ns); err != nil || l.Name != "eth0" {
		t.Fatalf("with lo up: %+v, %v", l, err)
	}
	// A link that is down does not count, even with an address.
	testutil.IP(t, "-n", ns, "link", "add", "eth2", "type", "veth", "peer", "name", "eth3")
	testutil.IP(t, "-n", ns, "addr", "add", "198.18.52.2/24", "dev", "eth2")
	if l, err := primaryIn(t, ns); err != nil || l.Name != "eth0" {
		t.Fatalf("with eth2 down: %+v, %v", l, err)
	}
	// Two candidates and no default route: refuse to guess.
	testutil.IP(t, "-n", ns, "addr", "add", "198.18.51.2/24", "dev", "eth1")
	_, err = primaryIn(t, ns)
	if err == nil || !strings.Contains(err.Error(), "(eth0, eth1)") {
		t.Fatalf("two candidates: err %v, want one naming eth0 and eth1", err)
	}
}

func TestLinkState(t *testing.T) {
	ns := testNetns(t)
	testutil.IP(t, "-n", ns, "addr", "add", "198.18.50.2/24", "dev", "eth0")
	state := func() Link {
		t.Helper()
		l, err := in(t, ns, func() (Link, error) { return LinkState(context.Background(), "eth0") })
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	if l := state(); !l.Up || l.Name != "eth0" || l.MTU == 0 || !slices.Equal(l.Addresses, addrs("198.18.50.2")) {
		t.Fatalf("eth0: %+v", l)
	}
	// The peer down takes eth0's carrier: admin up, but not up.
	testutil.IP(t, "-n", ns, "link", "set", "eth1", "down")
	if l := state(); l.Up || !l.AdminUp || l.OperState != "lower-layer-down" {
		t.Fatalf("eth0 with its peer down: %+v", l)
	}
	testutil.IP(t, "-n", ns, "link", "set", "eth0", "down")
	if l := state(); l.Up || l.AdminUp || !strings.Contains(l.String(), "admin-down") {
		t.Fatalf("eth0 down: %+v (%s)", l, l)
	}
	if _, err := in(t, ns, func() (Link, error) { return LinkState(context.Background(), "eth9") }); err == nil || !strings.Contains(err.Error(), "eth9") {
		t.Fatalf("missing link: %v", err)
	}
}

// watchIn runs the watcher inside ns and returns a counter of its calls.
func watchIn(t *testing.T, ns string, debounce time.Duration) *atomic.Int64 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var calls atomic.Int64
	started := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		if err := enter(ns); err != nil {
			started <- err
			return
		}
		started <- nil
		done <- watch(ctx, debounce, func() { calls.Add(1) })
	}()
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("watch: %v", err)
		}
	})
	return &calls
}

// waitCalls waits for the watcher to have been called more than before.
func waitCalls(t *testing.T, calls *atomic.Int64, before int64, what string) int64 {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, what, func() bool { return calls.Load() > before })
	return calls.Load()
}

func TestWatchReportsLinkAndAddressChanges(t *testing.T) {
	ns := testNetns(t)
	calls := watchIn(t, ns, DefaultDebounce)
	// The subscription is made as the goroutine starts; a change made
	// before it exists would be missed, so repeat the first change until
	// one is seen.
	testutil.Eventually(t, 30*time.Second, "the watcher to see eth1 flap", func() bool {
		testutil.IP(t, "-n", ns, "link", "set", "eth1", "down")
		testutil.IP(t, "-n", ns, "link", "set", "eth1", "up")
		time.Sleep(100 * time.Millisecond)
		return calls.Load() > 0
	})
	n := calls.Load()

	testutil.IP(t, "-n", ns, "link", "set", "eth0", "down")
	n = waitCalls(t, calls, n, "a call after eth0 went down")
	testutil.IP(t, "-n", ns, "link", "set", "eth0", "up")
	n = waitCalls(t, calls, n, "a call after eth0 came up")
	testutil.IP(t, "-n", ns, "addr", "add", "198.18.50.2/24", "dev", "eth0")
	n = waitCalls(t, calls, n, "a call after an address was added")
	testutil.IP(t, "-n", ns, "addr", "del", "198.18.50.2/24", "dev", "eth0")
	waitCalls(t, calls, n, "a call after an address was removed")
}

func TestWatchGathersABurstIntoOneCall(t *testing.T) {
	ns := testNetns(t)
	// IPv6 duplicate address detection changes addresses a second or two
	// after a link comes up: events of its own, late, that are no part of
	// the burst.
	for _, key := range []string{"net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"} {
		if out, err := exec.Command("ip", "netns", "exec", ns, "sysctl", "-q", "-w", key).CombinedOutput(); err != nil {
			t.Fatalf("sysctl %s: %v %s", key, err, out)
		}
	}
	// A long window, so that the burst below surely falls inside it even
	// on a machine loaded by the other test packages (3 s was not).
	const window = 8 * time.Second
	calls := watchIn(t, ns, window)
	burst := func() error {
		_, err := in(t, ns, func() (struct{}, error) {
			eth0, err := netlink.LinkByName("eth0")
			if err != nil {
				return struct{}{}, err
			}
			for i := range 4 {
				a := &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(198, 18, 52, byte(10+i)), Mask: net.CIDRMask(24, 32)}}
				if err := netlink.AddrAdd(eth0, a); err != nil {
					return struct{}{}, err
				}
			}
			return struct{}{}, netlink.LinkSetDown(eth0)
		})
		return err
	}
	// As above, the watcher may not have subscribed yet: flap until seen.
	testutil.Eventually(t, 30*time.Second, "the watcher's first call", func() bool {
		testutil.IP(t, "-n", ns, "link", "set", "eth1", "down")
		testutil.IP(t, "-n", ns, "link", "set", "eth1", "up")
		time.Sleep(100 * time.Millisecond)
		return calls.Load() > 0
	})
	// Let the first window close before the burst.
	testutil.Eventually(t, 30*time.Second, "the first window to close", func() bool {
		before := calls.Load()
		time.Sleep(window + time.Second)
		return calls.Load() == before
	})
	before := calls.Load()
	if err := burst(); err != nil {
		t.Fatal(err)
	}
	waitCalls(t, calls, before, "a call after the burst")
	time.Sleep(window + time.Second)
	if got := calls.Load() - before; got != 1 {
		t.Fatalf("a burst of five changes gave %d calls, want 1", got)
	}
}

func TestWatchStopsWithItsContext(t *testing.T) {
	ns := testNetns(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		if err := enter(ns); err != nil {
			done <- err
			return
		}
		done <- Watch(ctx, func() {})
	}()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Watch did not return after its context ended")
	}
}
