//go:build linux

package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// SupervisorConfig configures a Supervisor. Zero durations take the
// defaults given on each field.
type SupervisorConfig struct {
	// RunDir holds, per unit, <name>.json (the record a later Supervisor
	// adopts from) and <name>.pid. Required. Use a tmpfs such as
	// /run/harmony: records are about processes, which do not survive a
	// reboot.
	RunDir string
	// LogDir receives each unit's stdout and stderr, appended to
	// <name>.log. Required.
	LogDir string
	// Logger receives one structured record per start, exit, restart,
	// adoption, reload and stop. Nil discards.
	Logger *slog.Logger

	// RestartBase is the delay before the first restart after a crash
	// (default 1s); each further quick crash doubles it, up to
	// RestartMax (default 30s). Each delay is jittered within [d/2, d],
	// never below RestartBase.
	RestartBase time.Duration
	RestartMax  time.Duration
	// RestartReset: a process that ran at least this long before exiting
	// starts a new backoff series at RestartBase (default 10×RestartMax).
	RestartReset time.Duration

	// StopGrace is how long Stop waits after SIGTERM before SIGKILL
	// (default 10s).
	StopGrace time.Duration
	// PollInterval is how often an adopted process, which is not our
	// child and so cannot be waited for, is checked (default 500ms).
	PollInterval time.Duration

	// Wrap, when set, rewrites each unit's argv before it is started, for
	// example to prefix "ip netns exec NAME". The wrapper must exec the
	// command in the same process (as ip netns exec and env do): the
	// supervised PID is the wrapper's. Its result is part of a unit's
	// definition, so a changed Wrap restarts units on their next Ensure.
	Wrap func(argv []string) []string
}

// Defaults of SupervisorConfig.
const (
	DefaultRestartBase  = time.Second
	DefaultRestartMax   = 30 * time.Second
	DefaultStopGrace    = 10 * time.Second
	DefaultPollInterval = 500 * time.Millisecond
)

// ErrClosed is returned by a Supervisor after Close.
var ErrClosed = errors.New("supervisor closed")

// Supervisor is a Manager for hosts without systemd (the
// network-namespace lab, containers). It runs each unit as a child process
// in its own session, so that its whole process group can be signalled,
// with stdout and stderr appended to LogDir/<name>.log and a minimal
// environment (PATH=/usr/sbin:/usr/bin:/sbin:/bin plus Unit.Env), and
// restarts it with exponential backoff when it exits.
//
// Commands must stay in the foreground (keepalived --dont-fork, haproxy
// -W -db): a daemon that forks and exits looks like a crash. When a main
// process exits, whatever is left in its process group is killed.
//
// Processes outlive the Supervisor and the agent (there is no
// parent-death signal and no pipe to the agent), and the agent restarting
// changes nothing that is already right: for every running unit,
// RunDir/<name>.json records its PID, its start time in clock ticks since
// boot (/proc/<pid>/stat field 22, so a recycled PID is never mistaken for
// it), a hash of its definition, its restart count and its last exit. A
// new Supervisor on the same RunDir adopts a recorded process when Ensure
// gives it the same definition (changed is false, PID and Started are
// kept), stops it first when the definition differs, and starts a unit
// afresh when the recorded process is gone or its PID now belongs to
// another process (which is left alone). An adopted process is not our
// child, so it is watched by polling /proc every PollInterval, and
// restarted with backoff like a child when it dies; its exit status is
// unknown. State and Stop also see units that only have a record, so a
// unit left by an earlier agent can be observed and stopped; Reload and
// Restart adopt such a unit first.
//
// Close stops supervising and leaves the processes running (agent
// shutdown); StopAll stops every unit (lab teardown). All methods are
// safe for concurrent use.
type Supervisor struct {
	cfg SupervisorConfig
	log *slog.Logger

	mu     sync.Mutex
	closed bool
	units  map[string]*unit
}

var _ Manager = (*Supervisor)(nil)

// unit is the Supervisor's view of one unit.
type unit struct {
	name string
	// op serializes the operations that change a unit (Ensure, Reload,
	// Restart, Stop, Close), which may take a stop grace period. gone is
	// guarded by op.
	op   sync.Mutex
	gone bool // removed from Supervisor.units: whoever waited for op retries

	// mu guards the rest; the unit's runner goroutine shares them. It is
	// never held while waiting for a process.
	mu       sync.Mutex
	given    bool // started or adopted at least once: State may show it
	def      Unit
	argv     []string // def.Command after Wrap
	hash     string
	run      *runner // nil while not supervised
	proc     *proc   // the main process; nil between processes
	restarts int
	lastExit string
	recorded bool // the record matches the fields above
}

// NewSupervisor checks cfg, applies its defaults and creates RunDir and
// LogDir.
func NewSupervisor(cfg SupervisorConfig) (*Supervisor, error) {
	if cfg.RunDir == "" {
		return nil, errors.New("supervisor: RunDir is required")
	}
	if cfg.LogDir == "" {
		return nil, errors.New("supervisor: LogDir is required")
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"RestartBase", &cfg.RestartBase, DefaultRestartBase},
		{"RestartMax", &cfg.RestartMax, DefaultRestartMax},
		{"StopGrace", &cfg.StopGrace, DefaultStopGrace},
		{"PollInterval", &cfg.PollInterval, DefaultPollInterval},
		{"RestartReset", &cfg.RestartReset, 0},
	} {
		if *d.v < 0 {
			return nil, fmt.Errorf("supervisor: %s is negative (%v)", d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if cfg.RestartMax < cfg.RestartBase {
		return nil, fmt.Errorf("supervisor: RestartMax (%v) is below RestartBase (%v)", cfg.RestartMax, cfg.RestartBase)
	}
	if cfg.RestartReset == 0 {
		cfg.RestartReset = 10 * cfg.RestartMax
	}
	for _, dir := range []string{cfg.RunDir, cfg.LogDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("supervisor: %w", err)
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Supervisor{cfg: cfg, log: log.With("manager", "supervisor"), units: map[string]*unit{}}, nil
}

// Kind implements Manager.
func (s *Supervisor) Kind() string { return "supervisor" }

var unitName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

const maxNameLen = 64

func validName(name string) bool { return len(name) <= maxNameLen && unitName.MatchString(name) }

// validateUnit says what is wrong with u, if anything.
func validateUnit(u Unit) error {
	switch {
	case u.Name == "":
		return errors.New("invalid unit: empty name")
	case !validName(u.Name):
		return fmt.Errorf("invalid unit name %q: want at most %d of [a-z0-9-], not starting with '-'", u.Name, maxNameLen)
	case len(u.Command) == 0:
		return errors.New("invalid unit: empty command")
	case !filepath.IsAbs(u.Command[0]):
		return fmt.Errorf("invalid unit: command %q is not an absolute path", u.Command[0])
	}
	for _, a := range u.Command {
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("invalid unit: command argument %q contains NUL", a)
		}
	}
	for _, e := range u.Env {
		if i := strings.IndexByte(e, '='); i <= 0 || strings.IndexByte(e, 0) >= 0 {
			return fmt.Errorf("invalid unit: environment entry %q is not KEY=VALUE", e)
		}
	}
	if u.ReloadSignal < 0 || u.ReloadSignal > 64 || u.ReloadSignal == syscall.SIGKILL || u.ReloadSignal == syscall.SIGSTOP {
		return fmt.Errorf("invalid unit: reload signal %d", int(u.ReloadSignal))
	}
	return nil
}

// definition returns the unit's own copy of u, its argv after Wrap and its
// hash.
func (s *Supervisor) definition(u Unit) (Unit, []string, string, error) {
	if err := validateUnit(u); err != nil {
		return Unit{}, nil, "", err
	}
	def := Unit{Name: u.Name, Command: slices.Clone(u.Command), ReloadSignal: u.ReloadSignal}
	if len(u.Env) > 0 { // nil and empty are the same definition
		def.Env = slices.Clone(u.Env)
	}
	argv := slices.Clone(def.Command)
	if s.cfg.Wrap != nil {
		argv = slices.Clone(s.cfg.Wrap(slices.Clone(def.Command)))
		if len(argv) == 0 || argv[0] == "" {
			return Unit{}, nil, "", errors.New("Wrap returned an empty command")
		}
	}
	return def, argv, definitionHash(def, argv), nil
}

// Ensure implements Manager: it starts u, adopts a process an earlier
// Supervisor recorded for it, or, when the definition changed, stops the
// old process and starts the new one.
func (s *Supervisor) Ensure(ctx context.Context, u Unit) (bool, error) {
	def, argv, hash, err := s.definition(u)
	if err != nil {
		return false, fmt.Errorf("ensure %q: %w", u.Name, err)
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("ensure %s: %w", u.Name, err)
	}
	un, created, err := s.acquire(def.Name, true)
	if err != nil {
		return false, fmt.Errorf("ensure %s: %w", def.Name, err)
	}
	defer un.op.Unlock()
	changed, err := s.ensureLocked(ctx, un, created, def, argv, hash)
	if created && !s.supervised(un) {
		s.forget(un)
	}
	return changed, err
}

// ensureLocked is Ensure with u.op held. created says u was made by this
// call, so what an earlier Supervisor left in RunDir is to be looked at.
func (s *Supervisor) ensureLocked(ctx context.Context, u *unit, created bool, def Unit, argv []string, hash string) (changed bool, err error) {
	u.mu.Lock()
	if u.run != nil && u.hash == hash {
		defer u.mu.Unlock()
		if !u.recorded {
			// A record write failed before; the unit must be adoptable.
			if err := s.writeRecord(u); err != nil {
				return false, fmt.Errorf("ensure %s: %w", u.name, err)
			}
			u.recorded = true
		}
		return false, nil
	}
	supervised := u.run != nil
	restarts, lastExit := u.restarts, u.lastExit
	u.mu.Unlock()

	reason := "start"
	switch {
	case created:
		rec, err := s.readRecord(u.name)
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if err != nil {
			// Without a readable record there is nothing to adopt or stop.
			s.log.Warn("ignoring unreadable unit record", "unit", u.name, "err", err)
			break
		}
		restarts, lastExit = rec.Restarts, rec.LastExit
		old := rec.proc()
		switch {
		case old != nil && old.alive() && rec.Hash == hash:
			s.adopt(u, def, argv, hash, rec, old)
			return false, nil
		case old != nil && old.alive():
			reason = "definition changed"
			if err := s.terminate(ctx, u.name, old); err != nil {
				return false, fmt.Errorf("stop %s: %w", u.name, err)
			}
			lastExit = old.exitReason()
			changed = true
		default:
			reason = "not running"
			if rec.PID > 1 {
				lastExit = "exited while unsupervised (status unknown)"
				s.log.Info("recorded process is gone", "unit", u.name, "pid", rec.PID, "reason", "exited or PID reused while unsupervised")
			}
		}
		restarts++
	case supervised:
		reason = "definition changed"
		if err := s.halt(ctx, u); err != nil {
			return false, fmt.Errorf("stop %s: %w", u.name, err)
		}
		changed = true
		restarts++
		u.mu.Lock()
		lastExit = u.lastExit
		u.mu.Unlock()
	default:
		// Known, but not supervised since a failed start or stop.
		reason = "not running"
		restarts++
	}
	if err := ctx.Err(); err != nil {
		return changed, fmt.Errorf("start %s: %w", u.name, err)
	}
	u.mu.Lock()
	u.def, u.argv, u.hash = def, argv, hash
	u.restarts, u.lastExit = restarts, lastExit
	u.mu.Unlock()
	if err := s.launch(u, reason); err != nil {
		return changed, err
	}
	return true, nil
}

// adopt supervises a running process an earlier Supervisor recorded.
func (s *Supervisor) adopt(u *unit, def Unit, argv []string, hash string, rec *record, p *proc) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.def, u.argv, u.hash = def, argv, hash
	u.restarts, u.lastExit = rec.Restarts, rec.LastExit
	u.proc = p
	u.given = true
	u.recorded = true
	u.run = s.newRunner(u, p)
	s.log.Info("unit adopted", "unit", u.name, "pid", p.pid, "reason", "running with the same definition", "restarts", u.restarts)
}

// launch starts u's process from its current definition, and supervises
// it. A failed start leaves u known but unsupervised.
func (s *Supervisor) launch(u *unit, reason string) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	p, err := s.spawn(u)
	if err != nil {
		u.lastExit = "start failed: " + err.Error()
		s.log.Error("unit failed to start", "unit", u.name, "reason", reason, "err", err)
		return fmt.Errorf("start %s: %w", u.name, err)
	}
	u.proc = p
	u.given = true
	u.run = s.newRunner(u, p)
	s.log.Info("unit started", "unit", u.name, "pid", p.pid, "reason", reason, "restarts", u.restarts, "command", u.argv)
	u.recorded = false
	if err := s.writeRecord(u); err != nil {
		// The process runs and is supervised; Ensure retries the record.
		s.log.Error("cannot record unit", "unit", u.name, "pid", p.pid, "err", err)
		return fmt.Errorf("start %s: %w", u.name, err)
	}
	u.recorded = true
	return nil
}

// halt ends the supervision of u and stops its process. u.op is held.
func (s *Supervisor) halt(ctx context.Context, u *unit) error {
	u.mu.Lock()
	r, p := u.run, u.proc
	if r != nil {
		close(r.quit)
		u.run = nil
	}
	u.mu.Unlock()
	if r != nil {
		<-r.done
	}
	if p == nil {
		return nil
	}
	err := s.terminate(ctx, u.name, p)
	u.mu.Lock()
	if u.proc == p && !p.alive() {
		u.proc = nil
		u.lastExit = p.exitReason()
	}
	u.mu.Unlock()
	return err
}

// Reload implements Manager: it sends the unit's ReloadSignal to its main
// process, or restarts it when it has none. A supervised unit that is
// waiting to be restarted after a crash reads its configuration when it
// starts, so reloading it does nothing.
func (s *Supervisor) Reload(ctx context.Context, name string) error {
	u, fresh, err := s.acquireGiven(ctx, name)
	if err != nil {
		return fmt.Errorf("reload %s: %w", name, err)
	}
	defer u.op.Unlock()
	if fresh {
		return nil // just started: it read its configuration
	}
	u.mu.Lock()
	sig, p, supervised := u.def.ReloadSignal, u.proc, u.run != nil
	u.mu.Unlock()
	if sig == 0 {
		return s.restartLocked(ctx, u, "reload")
	}
	if !supervised {
		return fmt.Errorf("reload %s: not running", name)
	}
	if p == nil || !p.alive() {
		s.log.Info("unit not reloaded", "unit", name, "reason", "waiting to restart")
		return nil
	}
	if err := p.signal(sig); err != nil {
		return fmt.Errorf("reload %s: signal pid %d: %w", name, p.pid, err)
	}
	s.log.Info("unit reloaded", "unit", name, "pid", p.pid, "reason", "reload", "signal", sig.String())
	return nil
}

// Restart implements Manager.
func (s *Supervisor) Restart(ctx context.Context, name string) error {
	u, fresh, err := s.acquireGiven(ctx, name)
	if err != nil {
		return fmt.Errorf("restart %s: %w", name, err)
	}
	defer u.op.Unlock()
	if fresh {
		return nil
	}
	return s.restartLocked(ctx, u, "restart")
}

func (s *Supervisor) restartLocked(ctx context.Context, u *unit, reason string) error {
	if err := s.halt(ctx, u); err != nil {
		return fmt.Errorf("%s %s: stop: %w", reason, u.name, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s %s: %w", reason, u.name, err)
	}
	u.mu.Lock()
	u.restarts++
	u.mu.Unlock()
	return s.launch(u, reason)
}

// Stop implements Manager: it stops the unit's process group and forgets
// the unit, record included. A unit only an earlier Supervisor knew (it
// has a record) is stopped too.
func (s *Supervisor) Stop(ctx context.Context, name string) error {
	if !validName(name) {
		return fmt.Errorf("stop %q: %w", name, ErrUnknownUnit)
	}
	u, created, err := s.acquire(name, true)
	if err != nil {
		return fmt.Errorf("stop %s: %w", name, err)
	}
	defer u.op.Unlock()
	if created {
		defer s.forget(u)
		rec, err := s.readRecord(name)
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("stop %s: %w", name, ErrUnknownUnit)
		}
		if err != nil {
			return fmt.Errorf("stop %s: %w", name, err)
		}
		if p := rec.proc(); p != nil && p.alive() {
			if err := s.terminate(ctx, name, p); err != nil {
				return fmt.Errorf("stop %s: %w", name, err)
			}
		}
	} else if err := s.halt(ctx, u); err != nil {
		return fmt.Errorf("stop %s: %w", name, err)
	}
	if err := s.removeRecord(name); err != nil {
		return fmt.Errorf("stop %s: %w", name, err)
	}
	s.forget(u)
	s.log.Info("unit stopped", "unit", name, "reason", "stop")
	return nil
}

// State implements Manager. A unit only an earlier Supervisor knew is
// reported from its record.
func (s *Supervisor) State(ctx context.Context, name string) (State, error) {
	if err := ctx.Err(); err != nil {
		return State{}, fmt.Errorf("state %s: %w", name, err)
	}
	if !validName(name) {
		return State{}, fmt.Errorf("state %q: %w", name, ErrUnknownUnit)
	}
	s.mu.Lock()
	closed, u := s.closed, s.units[name]
	s.mu.Unlock()
	if closed {
		return State{}, fmt.Errorf("state %s: %w", name, ErrClosed)
	}
	if u != nil {
		u.mu.Lock()
		given, st := u.given, State{Restarts: u.restarts, LastExit: u.lastExit}
		if p := u.proc; p != nil && p.alive() {
			st.Running, st.PID, st.Started = true, p.pid, p.started
		}
		u.mu.Unlock()
		if given {
			return st, nil
		}
	}
	rec, err := s.readRecord(name)
	if errors.Is(err, os.ErrNotExist) {
		return State{}, fmt.Errorf("state %s: %w", name, ErrUnknownUnit)
	}
	if err != nil {
		return State{}, fmt.Errorf("state %s: %w", name, err)
	}
	st := State{Restarts: rec.Restarts, LastExit: rec.LastExit}
	if p := rec.proc(); p != nil && p.alive() {
		st.Running, st.PID, st.Started = true, p.pid, p.started
	}
	return st, nil
}

// Close stops supervising and leaves every process running, with its
// record, for the next Supervisor to adopt: for agent shutdown. It waits
// for operations under way. Every method fails with ErrClosed afterwards.
func (s *Supervisor) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	units := make([]*unit, 0, len(s.units))
	for _, u := range s.units {
		units = append(units, u)
	}
	s.mu.Unlock()
	for _, u := range units {
		u.op.Lock()
		u.mu.Lock()
		r := u.run
		if r != nil {
			close(r.quit)
			u.run = nil
		}
		u.mu.Unlock()
		u.op.Unlock()
		if r != nil {
			<-r.done
		}
	}
	s.log.Info("supervisor closed; units keep running", "units", len(units))
	return nil
}

// StopAll stops every unit this Supervisor knows and every unit recorded
// in RunDir, concurrently: for lab teardown. The Supervisor stays usable.
func (s *Supervisor) StopAll(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return fmt.Errorf("stop all: %w", ErrClosed)
	}
	names := map[string]bool{}
	for name := range s.units {
		names[name] = true
	}
	s.mu.Unlock()
	recorded, err := s.recordedNames()
	if err != nil {
		return fmt.Errorf("stop all: %w", err)
	}
	for _, name := range recorded {
		names[name] = true
	}
	sorted := make([]string, 0, len(names))
	for name := range names {
		sorted = append(sorted, name)
	}
	sort.Strings(sorted)
	errs := make([]error, len(sorted))
	var wg sync.WaitGroup
	for i, name := range sorted {
		wg.Go(func() {
			if err := s.Stop(ctx, name); err != nil && !errors.Is(err, ErrUnknownUnit) {
				errs[i] = err
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// acquire returns the unit called name with its op lock held, making it
// when create is set; created says it did.
func (s *Supervisor) acquire(name string, create bool) (u *unit, created bool, err error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, false, ErrClosed
		}
		u, created = s.units[name], false
		if u == nil {
			if !create {
				s.mu.Unlock()
				return nil, false, ErrUnknownUnit
			}
			u, created = &unit{name: name}, true
			s.units[name] = u
		}
		s.mu.Unlock()
		u.op.Lock()
		if u.gone {
			u.op.Unlock()
			continue
		}
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed {
			if created {
				s.forget(u)
			}
			u.op.Unlock()
			return nil, false, ErrClosed
		}
		return u, created, nil
	}
}

// acquireGiven is acquire for Reload and Restart: a unit only an earlier
// Supervisor knew is first adopted (or started, fresh=true) from its
// record.
func (s *Supervisor) acquireGiven(ctx context.Context, name string) (u *unit, fresh bool, err error) {
	if !validName(name) {
		return nil, false, ErrUnknownUnit
	}
	u, created, err := s.acquire(name, true)
	if err != nil {
		return nil, false, err
	}
	u.mu.Lock()
	given := u.given
	u.mu.Unlock()
	if given {
		return u, false, nil
	}
	fail := func(err error) (*unit, bool, error) {
		if created && !s.supervised(u) {
			s.forget(u)
		}
		u.op.Unlock()
		return nil, false, err
	}
	if !created {
		return fail(ErrUnknownUnit)
	}
	rec, err := s.readRecord(name)
	if errors.Is(err, os.ErrNotExist) {
		return fail(ErrUnknownUnit)
	}
	if err != nil {
		return fail(err)
	}
	def, argv, hash, err := s.definition(rec.unit())
	if err != nil {
		return fail(fmt.Errorf("recorded definition: %w", err))
	}
	changed, err := s.ensureLocked(ctx, u, true, def, argv, hash)
	if err != nil {
		return fail(err)
	}
	return u, changed, nil
}

func (s *Supervisor) supervised(u *unit) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.run != nil
}

// forget removes u from the Supervisor. u.op is held.
func (s *Supervisor) forget(u *unit) {
	u.gone = true
	s.mu.Lock()
	if s.units[u.name] == u {
		delete(s.units, u.name)
	}
	s.mu.Unlock()
}
