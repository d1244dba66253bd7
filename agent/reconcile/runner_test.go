package reconcile

import (
	"context"
	"log/slog"
	"slices"
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

// scriptedComponent reports the statuses it is given, one per pass, and
// the last one from then on.
type scriptedComponent struct {
	mu     sync.Mutex
	script []Status
	passes int
}

func (c *scriptedComponent) Name() string { return "scripted" }

func (c *scriptedComponent) Reconcile(context.Context, *Host, *v1.Role) Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.script[min(c.passes, len(c.script)-1)]
	c.passes++
	return st
}

func (c *scriptedComponent) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.passes
}

func TestRunnerRetriesUnsettledPassesBeforeTheInterval(t *testing.T) {
	unhealthy := Status{Phase: PhaseConverged, Message: "the kubelet has not registered the Node yet"}
	healthy := Status{Phase: PhaseConverged, Healthy: true}
	comp := &scriptedComponent{script: []Status{unhealthy, {Phase: PhaseFailed}, unhealthy, healthy}}
	r, err := NewRunner(RunnerConfig{
		Host:       &Host{Log: slog.New(slog.DiscardHandler)},
		Components: []Component{comp},
		Interval:   time.Hour, // only retries, roles and kicks cause passes
		RetryBase:  5 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	roles := make(chan v1.Role, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx, roles)
	roles <- v1.Role{Revision: 1}
	waitFor(t, func() bool { return comp.count() == 4 })
	// Settled: the next pass waits for the interval again.
	time.Sleep(300 * time.Millisecond)
	if n := comp.count(); n != 4 {
		t.Fatalf("%d passes after the component settled on the 4th", n)
	}

	// A refusal waits for a new role, however soon it could retry.
	comp.mu.Lock()
	comp.script, comp.passes = []Status{{Phase: PhaseRefused}}, 0
	comp.mu.Unlock()
	roles <- v1.Role{Revision: 2}
	waitFor(t, func() bool { return comp.count() == 1 })
	time.Sleep(300 * time.Millisecond)
	if n := comp.count(); n != 1 {
		t.Fatalf("%d passes of a refused role", n)
	}
}

func TestRunnerRetryDoublesUpToTheInterval(t *testing.T) {
	r, err := NewRunner(RunnerConfig{Interval: 30 * time.Second, RetryBase: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ok := Status{Phase: PhaseConverged, Healthy: true}
	waits := func(st Status) []time.Duration {
		var got []time.Duration
		var last time.Duration
		for range 7 {
			last = r.nextRetry(last, []Status{ok, st})
			got = append(got, last)
		}
		return got
	}
	s := time.Second
	retried := []time.Duration{s, 2 * s, 4 * s, 8 * s, 16 * s, 30 * s, 30 * s}
	for _, tc := range []struct {
		st   Status
		want []time.Duration
	}{
		{Status{Phase: PhaseFailed}, retried},
		{Status{Phase: PhaseConverged}, retried},
		{Status{Phase: PhaseLeaving, Healthy: true}, retried},
		{ok, make([]time.Duration, 7)},
		{Status{Phase: PhaseDisabled, Healthy: true}, make([]time.Duration, 7)},
		{Status{Phase: PhaseRefused}, make([]time.Duration, 7)},
		{Status{Phase: PhaseLeft}, make([]time.Duration, 7)}, // a given-up drain stays given up
	} {
		if got := waits(tc.st); !slices.Equal(got, tc.want) {
			t.Errorf("%s (healthy %v): waits %v, want %v", tc.st.Phase, tc.st.Healthy, got, tc.want)
		}
	}
}

// Waits are spread over a fifth of their length, so that agents that
// turned unsettled at the same moment do not report in step.
func TestJitteredSpreadsAWaitOverAFifth(t *testing.T) {
	for _, d := range []time.Duration{time.Second, 30 * time.Second} {
		lo, hi := time.Duration(1<<62), time.Duration(0)
		for range 1000 {
			w := jittered(d)
			if w < d || w > d+d/5 {
				t.Fatalf("jittered(%s) = %s, want within [%s, %s]", d, w, d, d+d/5)
			}
			lo, hi = min(lo, w), max(hi, w)
		}
		if hi-lo < d/10 {
			t.Errorf("jittered(%s) over 1000 draws: %s to %s, want a spread of at least %s", d, lo, hi, d/10)
		}
	}
	if got := jittered(0); got != 0 {
		t.Errorf("jittered(0) = %s", got)
	}
}
