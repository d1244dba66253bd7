//go:build linux

package testutil

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netns"
)

// EnterNetns locks the calling goroutine's thread into the named network
// namespace, for the rest of the goroutine: the thread is never unlocked,
// so Go discards it afterwards rather than reuse it in the wrong
// namespace.
func EnterNetns(ns string) error {
	runtime.LockOSThread()
	h, err := netns.GetFromName(ns)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", ns, err)
	}
	defer h.Close()
	if err := netns.Set(h); err != nil {
		return fmt.Errorf("enter netns %s: %w", ns, err)
	}
	return nil
}

// NetnsDialer dials from inside the named network namespace while the
// test stays in its own: a socket belongs to the namespace of the thread
// that makes it, so the dial runs on a locked thread switched into ns and
// back. If switching back fails, the thread stays locked and Go ends it
// with the goroutine.
func NetnsDialer(ns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		target, err := netns.GetFromName(ns)
		if err != nil {
			return nil, fmt.Errorf("open netns %s: %w", ns, err)
		}
		defer target.Close()
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			return nil, fmt.Errorf("current netns: %w", err)
		}
		defer orig.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			return nil, fmt.Errorf("enter netns %s: %w", ns, err)
		}
		conn, dialErr := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err := netns.Set(orig); err != nil {
			if conn != nil {
				conn.Close()
			}
			return nil, fmt.Errorf("leave netns %s: %w", ns, err)
		}
		runtime.UnlockOSThread()
		return conn, dialErr
	}
}

// IP runs ip(8) with args and fails the test if it fails.
func IP(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// VethNetns makes a network namespace named hk-<prefix>-<random> with lo
// up and a veth pair eth0/eth1 inside it, both up and without addresses,
// and removes it when the test ends. The random part keeps test packages
// that run at once apart.
func VethNetns(t testing.TB, prefix string) string {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	ns := "hk-" + prefix + "-" + hex.EncodeToString(b)
	IP(t, "netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	IP(t, "-n", ns, "link", "set", "lo", "up")
	IP(t, "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1")
	IP(t, "-n", ns, "link", "set", "eth0", "up")
	IP(t, "-n", ns, "link", "set", "eth1", "up")
	return ns
}
