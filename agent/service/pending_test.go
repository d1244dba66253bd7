package service_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/agent/service"
	"github.com/harmonykaas/harmony/agent/service/servicetest"
)

// A call on a Pending manager waits until the manager is found and then
// goes to it; the manager's kind shows once it is there.
func TestPendingCallsWaitForTheManager(t *testing.T) {
	release := make(chan struct{})
	rec := servicetest.New()
	p := service.NewPending(func(context.Context) (service.Manager, func() error, error) {
		<-release
		return rec, nil, nil
	}, time.Minute)
	defer p.Close()
	if k := p.Kind(); k != "pending" {
		t.Errorf("Kind before the manager is found: %q", k)
	}
	done := make(chan error, 1)
	go func() {
		_, err := p.Ensure(context.Background(), service.Unit{Name: "etcd", Command: []string{"/usr/bin/etcd"}})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Ensure returned before the manager was found: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Ensure still waiting after the manager was found")
	}
	if len(rec.Calls) != 1 || rec.Calls[0] != "ensure etcd" {
		t.Errorf("the found manager got %q, want [ensure etcd]", rec.Calls)
	}
	if m, err := p.Wait(context.Background()); m != rec || err != nil {
		t.Errorf("Wait: %v, %v", m, err)
	}
	if k := p.Kind(); k != "recorder" {
		t.Errorf("Kind once found: %q", k)
	}
}

// When no manager can be had, every call says why.
func TestPendingSaysWhyThereIsNoManager(t *testing.T) {
	why := errors.New("the host runs systemd, but it does not answer")
	p := service.NewPending(func(context.Context) (service.Manager, func() error, error) {
		return nil, nil, why
	}, time.Minute)
	defer p.Close()
	ctx := context.Background()
	if _, err := p.Wait(ctx); !errors.Is(err, why) {
		t.Errorf("Wait: %v", err)
	}
	if _, err := p.Ensure(ctx, service.Unit{Name: "etcd", Command: []string{"/usr/bin/etcd"}}); !errors.Is(err, why) {
		t.Errorf("Ensure: %v", err)
	}
	if _, err := p.State(ctx, "etcd"); !errors.Is(err, why) {
		t.Errorf("State: %v", err)
	}
	for name, call := range map[string]func(context.Context, string) error{"Reload": p.Reload, "Restart": p.Restart, "Stop": p.Stop} {
		if err := call(ctx, "etcd"); !errors.Is(err, why) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if k := p.Kind(); k != "none" {
		t.Errorf("Kind: %q", k)
	}
	// A finder that returns neither is an error too, not a nil manager.
	empty := service.NewPending(func(context.Context) (service.Manager, func() error, error) { return nil, nil, nil }, time.Minute)
	defer empty.Close()
	if m, err := empty.Wait(ctx); m != nil || err == nil {
		t.Errorf("Wait on a finder that found nothing: %v, %v", m, err)
	}
}

// A caller's context bounds its wait; the search goes on for others.
func TestPendingWaitEndsWithItsContext(t *testing.T) {
	release := make(chan struct{})
	p := service.NewPending(func(context.Context) (service.Manager, func() error, error) {
		<-release
		return servicetest.New(), nil, nil
	}, time.Minute)
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := p.State(ctx, "etcd"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("State with an ended context: %v", err)
	}
	close(release)
	if m, err := p.Wait(context.Background()); m == nil || err != nil {
		t.Errorf("Wait once found: %v, %v", m, err)
	}
}

// The search is bounded by its timeout, and Close ends one under way (a
// systemd that never answers does not hold the agent's exit); Close
// releases what was found, once however often it is called.
func TestPendingSearchIsBounded(t *testing.T) {
	hung := func(ctx context.Context) (service.Manager, func() error, error) {
		<-ctx.Done()
		return nil, nil, ctx.Err()
	}
	p := service.NewPending(hung, 100*time.Millisecond)
	if _, err := p.Wait(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait on a search past its timeout: %v", err)
	}
	p.Close()

	p = service.NewPending(hung, time.Hour)
	closed := make(chan struct{})
	go func() {
		p.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close still waiting for a search that never ends")
	}
	if _, err := p.Wait(context.Background()); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait after Close: %v", err)
	}

	releases := 0
	p = service.NewPending(func(context.Context) (service.Manager, func() error, error) {
		return servicetest.New(), func() error { releases++; return nil }, nil
	}, time.Minute)
	if err := p.Close(); err != nil || releases != 1 {
		t.Errorf("Close: %v, released %d times", err, releases)
	}
	if err := p.Close(); err != nil || releases != 1 {
		t.Errorf("Close again: %v, released %d times in all, want once", err, releases)
	}
}
