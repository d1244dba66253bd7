package reconcile

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// leavingComponent records, in a log shared with the others, each call of
// Reconcile and Leave; it has left once its Leave was called leaveAfter
// times.
type leavingComponent struct {
	name       string
	calls      *[]string
	leaves     int
	leaveAfter int
}

func (c *leavingComponent) Name() string { return c.name }

func (c *leavingComponent) Reconcile(context.Context, *Host, *v1.Role) Status {
	*c.calls = append(*c.calls, "reconcile "+c.name)
	return Status{Phase: PhaseConverged, Healthy: true}
}

func (c *leavingComponent) Leave(context.Context, *Host, *v1.Role) Status {
	*c.calls = append(*c.calls, "leave "+c.name)
	c.leaves++
	if c.leaves < c.leaveAfter {
		return Status{Phase: PhaseFailed, Message: "not yet"}
	}
	return Status{Phase: PhaseLeft, Healthy: true}
}

// plainComponent has nothing to leave.
type plainComponent struct{ calls *[]string }

func (plainComponent) Name() string { return "plain" }

func (c plainComponent) Reconcile(context.Context, *Host, *v1.Role) Status {
	*c.calls = append(*c.calls, "reconcile plain")
	return Status{Phase: PhaseConverged, Healthy: true}
}

func phasesOf(sts []Status) []string {
	var out []string
	for _, s := range sts {
		out = append(out, s.Component+"="+s.Phase)
	}
	return out
}

// A normal role never runs Leave; a role with Leave runs the leave
// sequence in its order instead of Reconcile, stops at a step that has
// not left, and goes on from there on the next pass.
func TestRunnerLeaveSequence(t *testing.T) {
	var calls []string
	a := &leavingComponent{name: "a", calls: &calls, leaveAfter: 1}
	b := &leavingComponent{name: "b", calls: &calls, leaveAfter: 2}
	c := &leavingComponent{name: "c", calls: &calls, leaveAfter: 1}
	r, err := NewRunner(RunnerConfig{
		Host:       &Host{Log: slog.New(slog.DiscardHandler)},
		Components: []Component{a, plainComponent{&calls}, b, c},
		Leavers:    []Leaver{b, a, c},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r.Pass(ctx, &v1.Role{Revision: 1})
	if want := []string{"reconcile a", "reconcile plain", "reconcile b", "reconcile c"}; !slices.Equal(calls, want) {
		t.Fatalf("normal pass: %q, want %q", calls, want)
	}

	leave := &v1.Role{Revision: 2, Leave: &v1.LeaveSettings{Deadline: time.Now().Add(time.Minute)}}
	calls = nil
	sts := r.Pass(ctx, leave)
	if want := []string{"leave b"}; !slices.Equal(calls, want) {
		t.Fatalf("first leave pass: %q, want %q", calls, want)
	}
	if got, want := phasesOf(sts), []string{"b=Failed", "a=Leaving", "c=Leaving"}; !slices.Equal(got, want) {
		t.Fatalf("first leave pass reports %q, want %q", got, want)
	}
	calls = nil
	sts = r.Pass(ctx, leave)
	if want := []string{"leave b", "leave a", "leave c"}; !slices.Equal(calls, want) {
		t.Fatalf("second leave pass: %q, want %q", calls, want)
	}
	if got, want := phasesOf(sts), []string{"b=Left", "a=Left", "c=Left"}; !slices.Equal(got, want) {
		t.Fatalf("second leave pass reports %q, want %q", got, want)
	}
}

// Without an explicit sequence, the components that can leave do so last
// first.
func TestRunnerDefaultLeaveOrder(t *testing.T) {
	var calls []string
	a := &leavingComponent{name: "a", calls: &calls, leaveAfter: 1}
	b := &leavingComponent{name: "b", calls: &calls, leaveAfter: 1}
	r, err := NewRunner(RunnerConfig{Host: &Host{Log: slog.New(slog.DiscardHandler)}, Components: []Component{a, plainComponent{&calls}, b}})
	if err != nil {
		t.Fatal(err)
	}
	r.Pass(context.Background(), &v1.Role{Leave: &v1.LeaveSettings{Deadline: time.Now()}})
	if want := []string{"leave b", "leave a"}; !slices.Equal(calls, want) {
		t.Fatalf("default leave order: %q, want %q", calls, want)
	}
}

func TestLeftMarker(t *testing.T) {
	host := &Host{Root: t.TempDir()}
	m := host.LeftMarker("etcd")
	if _, ok := m.Left(); ok {
		t.Fatal("a new marker says left")
	}
	if err := m.Set("member 1 removed"); err != nil {
		t.Fatal(err)
	}
	if note, ok := host.LeftMarker("etcd").Left(); !ok || note != "member 1 removed" {
		t.Fatalf("marker: %q %v", note, ok)
	}
}
