//go:build linux

package netinfo

import (
	"context"
	"fmt"
	"time"

	"github.com/vishvananda/netlink"
)

// DefaultDebounce is how long Watch gathers changes before it reports
// them: a link coming up brings its addresses and routes a moment later,
// and one reconcile pass should see them all.
const DefaultDebounce = 200 * time.Millisecond

// Watch calls onChange after links or addresses change, until ctx is
// done, when it returns nil. Changes within DefaultDebounce of the first
// one are reported once. onChange runs on Watch's goroutine and should
// only signal (a non-blocking send), so that no change is missed while it
// runs.
//
// The subscriptions belong to the network namespace of the calling OS
// thread. If the kernel drops them (a burst overflowed the socket),
// Watch subscribes again on the same goroutine and reports a change,
// since some were lost.
func Watch(ctx context.Context, onChange func()) error {
	return watch(ctx, DefaultDebounce, onChange)
}

func watch(ctx context.Context, debounce time.Duration, onChange func()) error {
	var timer *time.Timer
	var fire <-chan time.Time
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		sub, err := subscribe()
		if err != nil {
			return err
		}
	events:
		for {
			select {
			case <-ctx.Done():
				sub.close()
				return nil
			case _, ok := <-sub.links:
				if !ok {
					break events
				}
			case _, ok := <-sub.addrs:
				if !ok {
					break events
				}
			case <-fire:
				timer, fire = nil, nil
				onChange()
				continue
			}
			if timer == nil {
				timer = time.NewTimer(debounce)
				fire = timer.C
			}
		}
		// A subscription ended without being asked to: resubscribe, and
		// report, since what happened meanwhile is unknown.
		sub.close()
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
		if timer == nil {
			timer = time.NewTimer(0)
			fire = timer.C
		}
	}
}

// subscription is one pair of netlink subscriptions.
type subscription struct {
	done  chan struct{}
	links chan netlink.LinkUpdate
	addrs chan netlink.AddrUpdate
	// started lists the channels whose readers run and will close them.
	started []func()
}

func subscribe() (*subscription, error) {
	s := &subscription{
		done:  make(chan struct{}),
		links: make(chan netlink.LinkUpdate, 64),
		addrs: make(chan netlink.AddrUpdate, 64),
	}
	// A reader that fails closes its channel, which is what watch acts on.
	if err := netlink.LinkSubscribeWithOptions(s.links, s.done, netlink.LinkSubscribeOptions{}); err != nil {
		s.close()
		return nil, fmt.Errorf("subscribe to link changes: %w", err)
	}
	s.started = append(s.started, func() {
		for range s.links {
		}
	})
	if err := netlink.AddrSubscribeWithOptions(s.addrs, s.done, netlink.AddrSubscribeOptions{}); err != nil {
		s.close()
		return nil, fmt.Errorf("subscribe to address changes: %w", err)
	}
	s.started = append(s.started, func() {
		for range s.addrs {
		}
	})
	return s, nil
}

// close ends the subscriptions and drains their channels, so that their
// readers, which block on sending, see the closed socket and exit.
func (s *subscription) close() {
	select {
	case <-s.done:
		return
	default:
		close(s.done)
	}
	for _, drain := range s.started {
		go drain()
	}
}
