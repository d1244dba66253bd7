package reconcile

import (
	"cmp"
	"context"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

var phases = []string{PhaseDisabled, PhaseConverged, PhaseFailed, PhaseRefused, PhaseLeaving, PhaseLeft}

// Runner runs every component on each new role and again every Interval,
// so that drift (a crashed daemon, an edited file) is repaired without a
// new role: level-triggered, as Talos's controllers are. A pass that
// leaves a component unsettled (failed, unhealthy or still leaving) is
// followed sooner, after RetryBase doubling up to Interval: a replacement
// master whose etcd or kubelet needs one more pass is Ready seconds after
// they are, not at the next 30 s tick.
type Runner struct {
	host       *Host
	components []Component
	leavers    []Leaver
	interval   time.Duration
	retryBase  time.Duration
	onStatus   func(role *v1.Role, statuses []Status)
	onPass     func()
	facts      func(ctx context.Context) (Facts, error)
	kick       chan struct{}

	runs     *prometheus.CounterVec
	duration *prometheus.HistogramVec
	up       *prometheus.GaugeVec
	phase    *prometheus.GaugeVec
	restarts *prometheus.GaugeVec
}

// RunnerConfig configures a Runner.
type RunnerConfig struct {
	Host       *Host
	Components []Component
	// Interval between passes without a new role; default 30s.
	Interval time.Duration
	// RetryBase is the wait after the first unsettled pass; it doubles
	// with each further one, up to Interval. Default 1s.
	RetryBase time.Duration
	// Registerer receives the runner's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Leavers are the leave sequence, in order, run instead of the
	// components while the role says Leave; nil: the components that
	// implement Leaver, last first.
	Leavers []Leaver
	// OnPass is called as each pass begins; OnStatus after it.
	OnPass func()
	// OnStatus is called after each pass (to report status).
	OnStatus func(role *v1.Role, statuses []Status)
	// Facts, when set, refreshes Host.Facts before each pass, so that a
	// changed address or interface reaches the components. An error keeps
	// the previous facts.
	Facts func(ctx context.Context) (Facts, error)
}

// NewRunner builds a runner and registers its metrics.
func NewRunner(cfg RunnerConfig) (*Runner, error) {
	if cfg.Interval <= 0 {
		cfg.Interval = 30 * time.Second
	}
	if cfg.RetryBase <= 0 {
		cfg.RetryBase = time.Second
	}
	r := &Runner{
		host: cfg.Host, components: cfg.Components, interval: cfg.Interval, retryBase: cfg.RetryBase, onStatus: cfg.OnStatus,
		facts: cfg.Facts, kick: make(chan struct{}, 1), onPass: cfg.OnPass, leavers: cfg.Leavers,
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "harmony_agent_reconcile_runs_total",
			Help: "Reconcile passes by component and resulting phase.",
		}, []string{"component", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "harmony_agent_reconcile_duration_seconds",
			Help:    "Duration of one reconcile pass of one component.",
			Buckets: []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"component"}),
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "harmony_agent_component_up",
			Help: "1 if the component is healthy (or disabled for this role), 0 otherwise.",
		}, []string{"component"}),
		phase: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "harmony_agent_component_phase",
			Help: "1 for the component's current phase, 0 for the others.",
		}, []string{"component", "phase"}),
		restarts: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "harmony_agent_service_restarts",
			Help: "Restarts of a service unit (after a crash or a changed definition) since its manager first started it.",
		}, []string{"component", "unit"}),
	}
	if r.leavers == nil {
		for _, c := range slices.Backward(cfg.Components) {
			if l, ok := c.(Leaver); ok {
				r.leavers = append(r.leavers, l)
			}
		}
	}
	if cfg.Registerer != nil {
		collectors := []prometheus.Collector{r.runs, r.duration, r.up, r.phase, r.restarts}
		for _, c := range cfg.Components {
			if col, ok := c.(prometheus.Collector); ok {
				collectors = append(collectors, col)
			}
		}
		for _, c := range collectors {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return r, nil
}

// Run reconciles on every role from roles, on every kick, and after each
// pass's wait (see nextRetry), until ctx is done. Nothing runs before the
// first role.
func (r *Runner) Run(ctx context.Context, roles <-chan v1.Role) {
	var current *v1.Role
	timer := time.NewTimer(r.interval)
	defer timer.Stop()
	var retry time.Duration // the wait after the last unsettled pass; 0 once settled
	for {
		select {
		case <-ctx.Done():
			return
		case role := <-roles:
			current = &role
			retry = 0 // a new role's retries start again from the base
		case <-timer.C:
		case <-r.kick:
		}
		if current == nil {
			timer.Reset(r.interval)
			continue
		}
		retry = r.nextRetry(retry, r.Pass(ctx, current))
		timer.Reset(jittered(cmp.Or(retry, r.interval)))
	}
}

// jittered spreads a wait over [d, 1.2·d): agents that turned unsettled
// together (a fleet that lost its VIP at once) or started together report
// to the controller spread out, not in step.
func jittered(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return d + rand.N(d/5+1)
}

// nextRetry is the wait before the pass after one that ended with
// statuses, when that wait is shorter than the interval: 0 when every
// component is settled, else the base and then double the last wait, up
// to the interval.
func (r *Runner) nextRetry(last time.Duration, statuses []Status) time.Duration {
	if !slices.ContainsFunc(statuses, unsettled) {
		return 0
	}
	if last == 0 {
		return min(r.retryBase, r.interval)
	}
	return min(2*last, r.interval)
}

// unsettled is a status that another pass may still change soon: a
// failure, a component converged but not healthy yet (a kubelet that has
// not registered, an etcd member catching up), or a step still leaving. A
// refusal waits for a new role; Disabled and Left are final.
func unsettled(st Status) bool {
	switch st.Phase {
	case PhaseFailed, PhaseLeaving:
		return true
	case PhaseConverged:
		return !st.Healthy
	}
	return false
}

// Kick asks Run for a pass now, with the current role: the host changed
// (a link went down, an address moved). Kicks while a pass is owed
// collapse into one.
func (r *Runner) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Pass runs every component once against role and returns their statuses.
func (r *Runner) Pass(ctx context.Context, role *v1.Role) []Status {
	if r.onPass != nil {
		r.onPass()
	}
	if r.facts != nil {
		if facts, err := r.facts(ctx); err == nil {
			r.host.Facts = facts
		} else {
			r.host.Log.Warn("host facts not refreshed; keeping the previous ones", "err", err)
		}
	}
	if role.Leave != nil {
		statuses := r.leave(ctx, role)
		if r.onStatus != nil {
			r.onStatus(role, statuses)
		}
		return statuses
	}
	statuses := make([]Status, 0, len(r.components))
	for _, c := range r.components {
		start := time.Now()
		st := c.Reconcile(ctx, r.host, role)
		st.Component = c.Name()
		r.duration.WithLabelValues(c.Name()).Observe(time.Since(start).Seconds())
		r.record(ctx, st, role.Revision)
		statuses = append(statuses, st)
	}
	if r.onStatus != nil {
		r.onStatus(role, statuses)
	}
	return statuses
}

// leave runs the leave sequence in order. A step that has not left stops
// the sequence for this pass: the order is what keeps the API up (see the
// node stack), so no later step runs before it; they report Leaving, and
// the next pass tries again.
func (r *Runner) leave(ctx context.Context, role *v1.Role) []Status {
	statuses := make([]Status, 0, len(r.leavers))
	blocked := ""
	for _, l := range r.leavers {
		var st Status
		if blocked != "" {
			st = Status{Phase: PhaseLeaving, Message: "waits for " + blocked + " to leave first"}
		} else {
			start := time.Now()
			st = l.Leave(ctx, r.host, role)
			r.duration.WithLabelValues(l.Name()).Observe(time.Since(start).Seconds())
			if st.Phase != PhaseLeft {
				blocked = l.Name()
			}
		}
		st.Component = l.Name()
		r.record(ctx, st, role.Revision)
		statuses = append(statuses, st)
	}
	return statuses
}

// record exports one component's outcome and logs it.
func (r *Runner) record(ctx context.Context, st Status, revision int64) {
	c := st.Component
	r.runs.WithLabelValues(c, st.Phase).Inc()
	up := 0.0
	if st.Healthy {
		up = 1
	}
	r.up.WithLabelValues(c).Set(up)
	for _, p := range phases {
		v := 0.0
		if p == st.Phase {
			v = 1
		}
		r.phase.WithLabelValues(c, p).Set(v)
	}
	for _, unit := range st.Units {
		if state, err := r.host.Services.State(ctx, unit); err == nil {
			r.restarts.WithLabelValues(c, unit).Set(float64(state.Restarts))
		}
	}
	r.log(st, revision)
}

func (r *Runner) log(st Status, revision int64) {
	attrs := []any{"component", st.Component, "phase", st.Phase, "revision", revision}
	switch {
	case st.Phase == PhaseFailed || st.Phase == PhaseRefused:
		r.host.Log.Error("component failed", append(attrs, "message", st.Message)...)
	case len(st.Actions) > 0:
		r.host.Log.Info("component changed", append(attrs, "actions", st.Actions)...)
	case !st.Healthy:
		r.host.Log.Warn("component unhealthy", append(attrs, "message", st.Message)...)
	default:
		r.host.Log.Debug("component unchanged", attrs...)
	}
}
