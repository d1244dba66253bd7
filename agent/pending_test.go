package agent

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/agent/service"
	"github.com/harmonykaas/harmony/agent/service/servicetest"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// ensurer is a component that runs one unit, so that a pass goes through
// the service manager.
type ensurer struct{ passes chan<- error }

func (ensurer) Name() string { return "ensurer" }

func (e ensurer) Reconcile(ctx context.Context, host *reconcile.Host, _ *v1.Role) reconcile.Status {
	_, err := host.Services.Ensure(ctx, service.Unit{Name: "probe", Command: []string{"/bin/true"}})
	e.passes <- err
	return reconcile.Status{Component: "ensurer", Phase: reconcile.PhaseConverged, Healthy: err == nil}
}

// The agent starts before its service manager is found (connecting to
// systemd takes a booting VM about a second under emulation, time the
// enrollment can use): the node stack's first pass waits for the manager
// and then goes through it.
func TestNodeStackWaitsForItsServiceManager(t *testing.T) {
	release := make(chan struct{})
	rec := servicetest.New()
	pending := service.NewPending(func(context.Context) (service.Manager, func() error, error) {
		<-release
		return rec, nil, nil
	}, time.Minute)
	passes := make(chan error, 16)
	a, err := New(Config{StateDir: t.TempDir(), NodeStack: true, Root: t.TempDir(), Services: pending,
		Components: []reconcile.Component{ensurer{passes}}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- a.stack.run(ctx, a.log) }()
	a.stack.offer(v1.Role{NodeName: "w1", Revision: 1, Role: v1.RoleWorker})
	select {
	case err := <-passes:
		t.Fatalf("a pass ran before the service manager was found: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	select {
	case err := <-passes:
		if err != nil {
			t.Fatalf("the first pass: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no pass 30 s after the service manager was found")
	}
	if len(rec.Calls) == 0 || rec.Calls[0] != "ensure probe" {
		t.Errorf("the found manager got %q, want ensure probe first", rec.Calls)
	}
	cancel()
	if err := <-ran; err != nil {
		t.Errorf("the node stack ended with %v after its context", err)
	}
}

// A host that runs systemd but where it does not answer has no service
// manager: Run ends with the reason (systemd starts the agent again),
// rather than wait for a bootstrap and act on nothing.
func TestRunEndsWithoutAServiceManager(t *testing.T) {
	why := errors.New("the host runs systemd (/run/systemd/system exists), but: connect: refused")
	pending := service.NewPending(func(context.Context) (service.Manager, func() error, error) {
		return nil, nil, why
	}, time.Minute)
	a, err := New(Config{StateDir: t.TempDir(), NodeStack: true, Root: t.TempDir(), Services: pending,
		Components: []reconcile.Component{ensurer{make(chan error, 16)}}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = a.Run(ctx)
	if !errors.Is(err, why) || !strings.Contains(err.Error(), "service manager") {
		t.Fatalf("Run: %v, want the service manager's failure", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Run waited for its context instead of ending")
	}
}
