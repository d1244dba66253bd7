package reconcile

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// countingComponent is a test component: it records the revisions it saw
// and reports the phase it is told to.
type countingComponent struct {
	mu    sync.Mutex
	seen  []int64
	phase string
}

func (c *countingComponent) Name() string { return "counting" }

func (c *countingComponent) Reconcile(_ context.Context, _ *Host, role *v1.Role) Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = append(c.seen, role.Revision)
	return Status{Phase: c.phase, Healthy: c.phase != PhaseFailed}
}

func (c *countingComponent) revisions() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int64(nil), c.seen...)
}

func TestRunnerReconcilesOnRolesAndResyncs(t *testing.T) {
	comp := &countingComponent{phase: PhaseConverged}
	reg := prometheus.NewRegistry()
	var reported []Status
	var mu sync.Mutex
	r, err := NewRunner(RunnerConfig{
		Host:       &Host{Log: slog.New(slog.DiscardHandler)},
		Components: []Component{comp},
		Interval:   20 * time.Millisecond,
		Registerer: reg,
		OnStatus: func(_ *v1.Role, st []Status) {
			mu.Lock()
			reported = st
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	roles := make(chan v1.Role)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx, roles); close(done) }()

	time.Sleep(60 * time.Millisecond)
	if len(comp.revisions()) != 0 {
		t.Fatal("the runner reconciled before it had a role")
	}
	roles <- v1.Role{Revision: 7}
	deadline := time.Now().Add(10 * time.Second)
	for len(comp.revisions()) < 3 { // the role's pass, then resyncs
		if time.Now().After(deadline) {
			t.Fatalf("passes %v: no periodic resync", comp.revisions())
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, rev := range comp.revisions() {
		if rev != 7 {
			t.Fatalf("passes saw revisions %v", comp.revisions())
		}
	}
	cancel()
	<-done

	mu.Lock()
	if len(reported) != 1 || reported[0].Component != "counting" || reported[0].Phase != PhaseConverged {
		t.Fatalf("reported %+v", reported)
	}
	mu.Unlock()
	if got := testutil.ToFloat64(r.up.WithLabelValues("counting")); got != 1 {
		t.Fatalf("up = %v", got)
	}
	if got := testutil.ToFloat64(r.phase.WithLabelValues("counting", PhaseConverged)); got != 1 {
		t.Fatalf("phase{Converged} = %v", got)
	}

	comp.phase = PhaseFailed
	r.Pass(context.Background(), &v1.Role{Revision: 8})
	if testutil.ToFloat64(r.up.WithLabelValues("counting")) != 0 ||
		testutil.ToFloat64(r.phase.WithLabelValues("counting", PhaseFailed)) != 1 ||
		testutil.ToFloat64(r.phase.WithLabelValues("counting", PhaseConverged)) != 0 ||
		testutil.ToFloat64(r.runs.WithLabelValues("counting", PhaseFailed)) != 1 {
		t.Fatal("metrics do not show the failure")
	}
	if n, err := testutil.GatherAndCount(reg, "harmony_agent_reconcile_duration_seconds"); err != nil || n != 1 {
		t.Fatalf("duration histogram: %d series, %v", n, err)
	}
}
