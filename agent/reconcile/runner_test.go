package reconcile

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/harmonykaas/harmony/agent/service"
	"github.com/harmonykaas/harmony/agent/service/servicetest"
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

// factsComponent records the facts each pass saw, names a unit, and
// exports one metric of its own.
type factsComponent struct {
	mu    sync.Mutex
	seen  []string
	gauge prometheus.Gauge
}

func (c *factsComponent) Name() string { return "facts" }

func (c *factsComponent) Reconcile(_ context.Context, h *Host, _ *v1.Role) Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = append(c.seen, h.Facts.Interface)
	return Status{Phase: PhaseConverged, Healthy: true, Units: []string{"daemon"}}
}

func (c *factsComponent) Describe(ch chan<- *prometheus.Desc) { c.gauge.Describe(ch) }
func (c *factsComponent) Collect(ch chan<- prometheus.Metric) { c.gauge.Collect(ch) }

func (c *factsComponent) interfaces() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.seen...)
}

func TestRunnerKickRefreshesFactsAndExportsComponentMetrics(t *testing.T) {
	comp := &factsComponent{gauge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "harmony_agent_test_component_metric"})}
	services := &restartsManager{Recorder: servicetest.New(), restarts: 3}
	iface := "eth0"
	var factsMu sync.Mutex
	reg := prometheus.NewRegistry()
	r, err := NewRunner(RunnerConfig{
		Host:       &Host{Log: slog.New(slog.DiscardHandler), Services: services},
		Components: []Component{comp},
		Interval:   time.Hour, // only roles and kicks cause passes
		Registerer: reg,
		Facts: func(context.Context) (Facts, error) {
			factsMu.Lock()
			defer factsMu.Unlock()
			return Facts{Interface: iface}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The component's own collector is registered with the runner's.
	if n, err := testutil.GatherAndCount(reg, "harmony_agent_test_component_metric"); err != nil || n != 1 {
		t.Fatalf("component metric: %d series, %v", n, err)
	}

	r.Kick() // before any role: no pass
	roles := make(chan v1.Role, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx, roles)
	time.Sleep(50 * time.Millisecond)
	if got := comp.interfaces(); len(got) != 0 {
		t.Fatalf("a kick before the first role caused passes %v", got)
	}
	roles <- v1.Role{Revision: 1}
	waitFor(t, func() bool { return len(comp.interfaces()) == 1 })

	factsMu.Lock()
	iface = "eth1"
	factsMu.Unlock()
	r.Kick()
	waitFor(t, func() bool { return len(comp.interfaces()) == 2 })
	if got := comp.interfaces(); got[0] != "eth0" || got[1] != "eth1" {
		t.Fatalf("passes saw interfaces %v, want [eth0 eth1]", got)
	}
	if got := testutil.ToFloat64(r.restarts.WithLabelValues("facts", "daemon")); got != 3 {
		t.Fatalf("restarts of the component's unit = %v, want 3", got)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// restartsManager reports a fixed restart count for every unit.
type restartsManager struct {
	*servicetest.Recorder
	restarts int
}

func (m *restartsManager) State(context.Context, string) (service.State, error) {
	return service.State{Running: true, Restarts: m.restarts}, nil
}
