//go:build linux

package testutil

import (
	"context"
	"fmt"
	"net"
	"runtime"

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
