//go:build linux

package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/internal/procfs"
	"github.com/harmonykaas/harmony/internal/testutil"
)

// These tests run real processes (/bin/sleep, /bin/sh scripts) and read
// /proc. Waits are generous and timing is asserted only as lower bounds
// (a backoff or grace period was waited) or loose upper bounds.

const waitTimeout = 20 * time.Second

// logBuf collects the Supervisor's JSON log.
type logBuf struct{ testutil.LogBuffer }

// entries returns the log records with message msg about unit.
func (l *logBuf) entries(t *testing.T, msg, unit string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(l.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["msg"] == msg && m["unit"] == unit {
			out = append(out, m)
		}
	}
	return out
}

type harness struct {
	t    *testing.T
	cfg  SupervisorConfig
	dir  string // scripts and markers
	logs *logBuf

	mu      sync.Mutex
	tracked []proc // processes to kill at cleanup if still alive
}

// newHarness makes a configuration with short delays, modified by mod. At
// cleanup, a fresh Supervisor stops every unit recorded in RunDir, and any
// process the test saw that still runs is killed.
func newHarness(t *testing.T, mod func(*SupervisorConfig)) *harness {
	t.Helper()
	dir := t.TempDir()
	logs := &logBuf{}
	h := &harness{t: t, dir: filepath.Join(dir, "scratch"), logs: logs}
	h.cfg = SupervisorConfig{
		RunDir:       filepath.Join(dir, "run"),
		LogDir:       filepath.Join(dir, "log"),
		Logger:       slog.New(trackingHandler{slog.NewJSONHandler(logs, nil), h}),
		RestartBase:  50 * time.Millisecond,
		RestartMax:   400 * time.Millisecond,
		StopGrace:    5 * time.Second,
		PollInterval: 50 * time.Millisecond,
	}
	if mod != nil {
		mod(&h.cfg)
	}
	if err := os.MkdirAll(h.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if s, err := NewSupervisor(h.cfg); err != nil {
			t.Errorf("cleanup: %v", err)
		} else if err := s.StopAll(ctx); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, p := range h.tracked {
			if p.alive() {
				_ = syscall.Kill(-p.pid, syscall.SIGKILL)
				_ = syscall.Kill(p.pid, syscall.SIGKILL)
			}
		}
		for _, p := range h.tracked {
			waitDead(ctx, &p, 10*time.Second)
		}
		if t.Failed() {
			t.Logf("supervisor log:\n%s", logs.String())
		}
	})
	return h
}

// trackingHandler tracks every PID the Supervisor logs, so that cleanup
// kills what a broken Supervisor would leave running.
type trackingHandler struct {
	slog.Handler
	h *harness
}

func (t trackingHandler) Handle(ctx context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "pid" && a.Value.Kind() == slog.KindInt64 {
			t.h.track(int(a.Value.Int64()))
		}
		return true
	})
	return t.Handler.Handle(ctx, r)
}

func (t trackingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return trackingHandler{t.Handler.WithAttrs(attrs), t.h}
}

func (t trackingHandler) WithGroup(name string) slog.Handler {
	return trackingHandler{t.Handler.WithGroup(name), t.h}
}

// supervisor starts a Supervisor on h.cfg, closed at cleanup.
func (h *harness) supervisor() *Supervisor {
	h.t.Helper()
	s, err := NewSupervisor(h.cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { s.Close() })
	return s
}

// track has pid killed at cleanup if it still runs.
func (h *harness) track(pid int) {
	st, err := procfs.ReadStat(pid)
	if err != nil || pid <= 1 || pid == os.Getpid() {
		return
	}
	h.mu.Lock()
	h.tracked = append(h.tracked, proc{pid: pid, ticks: st.StartTime})
	h.mu.Unlock()
}

// script writes a /bin/sh script and returns the unit command that runs
// it with h.dir as $1. (Run through /bin/sh rather than executed: a
// freshly written executable can fail with ETXTBSY while other tests
// fork.)
func (h *harness) script(name, body string) []string {
	h.t.Helper()
	path := filepath.Join(h.dir, name+".sh")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o644); err != nil {
		h.t.Fatal(err)
	}
	return []string{"/bin/sh", path, h.dir}
}

func (h *harness) ensure(s *Supervisor, u Unit) bool {
	h.t.Helper()
	changed, err := s.Ensure(h.t.Context(), u)
	if err != nil {
		h.t.Fatalf("Ensure(%s): %v", u.Name, err)
	}
	if st, err := s.State(h.t.Context(), u.Name); err == nil && st.PID > 0 {
		h.track(st.PID)
	}
	return changed
}

func (h *harness) state(s *Supervisor, name string) State {
	h.t.Helper()
	st, err := s.State(h.t.Context(), name)
	if err != nil {
		h.t.Fatalf("State(%s): %v", name, err)
	}
	if st.PID > 0 {
		h.track(st.PID)
	}
	return st
}

// waitState polls State until cond holds.
func (h *harness) waitState(s *Supervisor, name, what string, cond func(State) bool) State {
	h.t.Helper()
	var st State
	waitFor(h.t, what, func() bool {
		st = h.state(s, name)
		return cond(st)
	})
	return st
}

// marker reads a file the scripts write into h.dir.
func (h *harness) marker(name string) string {
	b, _ := os.ReadFile(filepath.Join(h.dir, name))
	return string(b)
}

// waitMarker waits for a marker file to be non-empty and returns it.
func (h *harness) waitMarker(name string) string {
	h.t.Helper()
	waitFor(h.t, "marker "+name, func() bool { return strings.HasSuffix(h.marker(name), "\n") })
	return h.marker(name)
}

func (h *harness) markerPID(name string) int {
	h.t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(h.waitMarker(name)))
	if err != nil {
		h.t.Fatalf("marker %s: %v", name, err)
	}
	h.track(pid)
	return pid
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, waitTimeout, what, cond)
}

// running reports whether pid is a live process (not a zombie).
func running(pid int) bool {
	st, err := procfs.ReadStat(pid)
	return err == nil && !st.Exited()
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("pid %d to die", pid), func() bool { return !running(pid) })
}

func sleeper(name string, args ...string) Unit {
	return Unit{Name: name, Command: append([]string{"/bin/sleep"}, append(args, "1000")...)}
}

func sameState(a, b State) bool {
	return a.Running == b.Running && a.PID == b.PID && a.Started.Equal(b.Started) && a.Restarts == b.Restarts && a.LastExit == b.LastExit
}

func readRecordFile(t *testing.T, cfg SupervisorConfig, name string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cfg.RunDir, name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestSupervisorStartAndState(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	s := h.supervisor()
	if s.Kind() != "supervisor" {
		t.Errorf("Kind() = %q", s.Kind())
	}
	before := time.Now()
	if !h.ensure(s, Unit{Name: "web", Command: []string{"/bin/sleep", "1000"}, Env: []string{"FOO=bar", "PATH=/opt/bin"}}) {
		t.Error("first Ensure: changed = false")
	}
	st := h.state(s, "web")
	if !st.Running || st.PID <= 1 || st.Restarts != 0 || st.LastExit != "" {
		t.Fatalf("State = %+v", st)
	}
	if st.Started.Before(before.Add(-time.Second)) || st.Started.After(time.Now()) {
		t.Errorf("Started = %v, want about %v", st.Started, before)
	}
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", st.PID))
	if string(cmdline) != "/bin/sleep\x001000\x00" {
		t.Errorf("cmdline = %q", cmdline)
	}
	// A minimal environment, which Unit.Env extends and overrides.
	environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", st.PID))
	if got, want := strings.Split(strings.TrimSuffix(string(environ), "\x00"), "\x00"), []string{"FOO=bar", "PATH=/opt/bin"}; !slices.Equal(got, want) {
		t.Errorf("environment = %q, want %q", got, want)
	}
	// Its own session, so its own process group.
	if ps, err := procfs.ReadStat(st.PID); err != nil || ps.PGRP != st.PID {
		t.Errorf("process group of %d = %d (%v), want its own", st.PID, ps.PGRP, err)
	}
	rec := readRecordFile(t, h.cfg, "web")
	if rec["pid"] != float64(st.PID) || rec["hash"] == "" || rec["startTicks"] == float64(0) {
		t.Errorf("record = %v", rec)
	}
	if b, _ := os.ReadFile(filepath.Join(h.cfg.RunDir, "web.pid")); string(b) != fmt.Sprintf("%d\n", st.PID) {
		t.Errorf("pid file = %q", b)
	}
	if fi, err := os.Stat(filepath.Join(h.cfg.RunDir, "web.json")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("record mode: %v %v", fi.Mode(), err)
	}
	if e := h.logs.entries(t, "unit started", "web"); len(e) != 1 || e[0]["pid"] != float64(st.PID) || e[0]["reason"] != "start" {
		t.Errorf("start log = %v", e)
	}
}

func TestSupervisorEnsureSameIsNoop(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	s := h.supervisor()
	u := Unit{Name: "web", Command: []string{"/bin/sleep", "1000"}, Env: []string{"A=1"}, ReloadSignal: syscall.SIGHUP}
	h.ensure(s, u)
	first := h.state(s, "web")
	for range 3 {
		// An equal definition in fresh slices.
		same := Unit{Name: "web", Command: slices.Clone(u.Command), Env: slices.Clone(u.Env), ReloadSignal: syscall.SIGHUP}
		if h.ensure(s, same) {
			t.Fatal("Ensure with the same unit: changed = true")
		}
	}
	if st := h.state(s, "web"); st.PID != first.PID || !st.Started.Equal(first.Started) || st.Restarts != 0 || !st.Running {
		t.Errorf("State after no-op Ensure = %+v, before %+v", st, first)
	}
	if e := h.logs.entries(t, "unit started", "web"); len(e) != 1 {
		t.Errorf("%d starts logged, want 1", len(e))
	}
	// No environment and an empty one are the same definition.
	h.ensure(s, Unit{Name: "bare", Command: []string{"/bin/sleep", "1000"}})
	if h.ensure(s, Unit{Name: "bare", Command: []string{"/bin/sleep", "1000"}, Env: []string{}}) {
		t.Error("Ensure with an empty rather than nil Env: changed = true")
	}
}

func TestSupervisorEnsureChangedDefinitionRestarts(t *testing.T) {
	t.Parallel()
	base := Unit{Name: "web", Command: []string{"/bin/sleep", "1000"}, Env: []string{"A=1"}}
	for _, tc := range []struct {
		name   string
		change func(*Unit)
	}{
		{"command", func(u *Unit) { u.Command = []string{"/bin/sleep", "1001"} }},
		{"env", func(u *Unit) { u.Env = []string{"A=2"} }},
		{"reload signal", func(u *Unit) { u.ReloadSignal = syscall.SIGUSR2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, nil)
			s := h.supervisor()
			h.ensure(s, base)
			old := h.state(s, "web")
			next := base
			next.Command, next.Env = slices.Clone(base.Command), slices.Clone(base.Env)
			tc.change(&next)
			if !h.ensure(s, next) {
				t.Fatal("Ensure with a changed definition: changed = false")
			}
			st := h.state(s, "web")
			if !st.Running || st.PID == old.PID || st.Restarts != 1 {
				t.Errorf("State = %+v, old PID %d", st, old.PID)
			}
			if running(old.PID) {
				t.Errorf("old pid %d still runs", old.PID)
			}
			if st.LastExit != "signal: terminated" {
				t.Errorf("LastExit = %q", st.LastExit)
			}
			if h.ensure(s, next) {
				t.Error("Ensure again with the new definition: changed = true")
			}
			if e := h.logs.entries(t, "unit started", "web"); len(e) != 2 || e[1]["reason"] != "definition changed" {
				t.Errorf("start log = %v", e)
			}
		})
	}
}

func TestSupervisorCrashRestartsWithBackoff(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *SupervisorConfig) {
		c.RestartBase, c.RestartMax = 100*time.Millisecond, 400*time.Millisecond
	})
	s := h.supervisor()
	start := time.Now()
	h.ensure(s, Unit{Name: "crashy", Command: h.script("crashy", "echo run >> \"$1/runs\"\nexit 3\n")})
	st := h.waitState(s, "crashy", "4 restarts", func(st State) bool { return st.Restarts >= 4 })
	elapsed := time.Since(start)
	// Delays 100ms, then within [100,200], [200,400], [200,400]: at least
	// 600ms for four restarts. Without backoff it would take a few ms.
	if elapsed < 600*time.Millisecond {
		t.Errorf("4 restarts in %v: no backoff", elapsed)
	}
	if st.LastExit != "exit status 3" && st.LastExit != "" {
		t.Errorf("LastExit = %q", st.LastExit)
	}
	h.waitState(s, "crashy", "LastExit", func(st State) bool { return st.LastExit == "exit status 3" })
	if runs := strings.Count(h.marker("runs"), "run\n"); runs < 4 {
		t.Errorf("%d runs", runs)
	}
	exits := h.logs.entries(t, "unit exited", "crashy")
	if len(exits) < 4 {
		t.Fatalf("%d exits logged", len(exits))
	}
	for i, e := range exits[:4] {
		if e["reason"] != "exit status 3" || e["pid"] == nil {
			t.Errorf("exit log %d = %v", i, e)
		}
		lo, hi := []float64{100, 100, 200, 200}[i], []float64{100, 200, 400, 400}[i]
		if d := e["restart_in"].(float64) / 1e6; d < lo || d > hi {
			t.Errorf("exit %d: restart in %vms, want within [%v, %v]", i, d, lo, hi)
		}
	}
	// The runner logs a restart just after counting it.
	waitFor(t, "4 restarts logged", func() bool { return len(h.logs.entries(t, "unit restarted", "crashy")) >= 4 })
	if r := h.logs.entries(t, "unit restarted", "crashy"); r[3]["restarts"] != float64(4) || r[3]["reason"] != "exit status 3" {
		t.Errorf("restart log = %v", r)
	}
}

func TestSupervisorKilledProcessIsRestarted(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	s := h.supervisor()
	h.ensure(s, sleeper("web"))
	old := h.state(s, "web")
	if err := syscall.Kill(old.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	st := h.waitState(s, "web", "a new process", func(st State) bool { return st.Running && st.PID != old.PID })
	if st.Restarts != 1 || st.LastExit != "signal: killed" {
		t.Errorf("State = %+v", st)
	}
	if rec := readRecordFile(t, h.cfg, "web"); rec["pid"] != float64(st.PID) || rec["restarts"] != float64(1) {
		t.Errorf("record = %v", rec)
	}
	// Same definition: the restarted process is left alone.
	if h.ensure(s, sleeper("web")) {
		t.Error("Ensure after a crash restart: changed = true")
	}
}

func TestSupervisorBackoffResetsAfterStableRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *SupervisorConfig) {
		c.RestartBase, c.RestartMax, c.RestartReset = 50*time.Millisecond, time.Second, 2*time.Second
	})
	s := h.supervisor()
	// Runs 1-4 crash at once, run 5 after 3s (more than RestartReset),
	// run 6 stays.
	h.ensure(s, Unit{Name: "flaky", Command: h.script("flaky", `echo run >> "$1/runs"
n=$(wc -l < "$1/runs")
if [ "$n" -le 4 ]; then exit 1; fi
if [ "$n" -eq 5 ]; then sleep 3; exit 2; fi
exec sleep 1000
`)})
	h.waitState(s, "flaky", "5 restarts", func(st State) bool { return st.Restarts >= 5 })
	exits := h.logs.entries(t, "unit exited", "flaky")
	if len(exits) != 5 {
		t.Fatalf("%d exits logged, want 5", len(exits))
	}
	if d := exits[3]["restart_in"].(float64); d < float64(200*time.Millisecond) {
		t.Errorf("4th quick exit: restart in %v, want the backoff to have grown", time.Duration(d))
	}
	if exits[4]["reason"] != "exit status 2" || exits[4]["restart_in"] != float64(50*time.Millisecond) {
		t.Errorf("exit after a stable run = %v, want a restart after RestartBase", exits[4])
	}
}

func TestSupervisorReloadSignals(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	s := h.supervisor()
	// SIGUSR1, not keepalived's SIGHUP: under nohup the test inherits
	// SIGHUP ignored, its children too, and a shell cannot trap a signal
	// ignored on entry.
	h.ensure(s, Unit{Name: "reloadable", ReloadSignal: syscall.SIGUSR1, Command: h.script("reloadable", `trap 'echo reload >> "$1/reloads"' USR1
echo ready > "$1/ready"
while :; do sleep 1 & wait $!; done
`)})
	h.waitMarker("ready") // the trap is set
	before := h.state(s, "reloadable")
	for i := 1; i <= 2; i++ {
		if err := s.Reload(t.Context(), "reloadable"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, fmt.Sprintf("reload %d", i), func() bool { return strings.Count(h.marker("reloads"), "reload\n") == i })
	}
	if st := h.state(s, "reloadable"); !st.Running || st.PID != before.PID || st.Restarts != 0 {
		t.Errorf("State after reloads = %+v, before %+v", st, before)
	}
	if e := h.logs.entries(t, "unit reloaded", "reloadable"); len(e) != 2 || e[0]["signal"] != "user defined signal 1" || e[0]["pid"] != float64(before.PID) {
		t.Errorf("reload log = %v", e)
	}
}

func TestSupervisorReloadWithoutSignalAndRestart(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	s := h.supervisor()
	h.ensure(s, sleeper("web"))
	first := h.state(s, "web")
	if err := s.Reload(t.Context(), "web"); err != nil {
		t.Fatal(err)
	}
	second := h.state(s, "web")
	if !second.Running || second.PID == first.PID || second.Restarts != 1 || second.LastExit != "signal: terminated" {
		t.Errorf("after Reload: %+v (before %+v)", second, first)
	}
	if running(first.PID) {
		t.Errorf("pid %d survived the reload", first.PID)
	}
	if err := s.Restart(t.Context(), "web"); err != nil {
		t.Fatal(err)
	}
	third := h.state(s, "web")
	if !third.Running || third.PID == second.PID || third.Restarts != 2 {
		t.Errorf("after Restart: %+v (before %+v)", third, second)
	}
	if running(second.PID) {
		t.Errorf("pid %d survived the restart", second.PID)
	}
	if e := h.logs.entries(t, "unit started", "web"); len(e) != 3 || e[1]["reason"] != "reload" || e[2]["reason"] != "restart" {
		t.Errorf("start log = %v", e)
	}
}

func TestSupervisorStopKillsProcessGroup(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	s := h.supervisor()
	h.ensure(s, Unit{Name: "tree", Command: h.script("tree", "sleep 1000 &\necho $! > \"$1/child\"\nwait\n")})
	main := h.state(s, "tree").PID
	child := h.markerPID("child")
	if ps, _ := procfs.ReadStat(child); ps.PGRP != main || !running(child) {
		t.Fatalf("child %d: group %d, want %d", child, ps.PGRP, main)
	}
	if err := s.Stop(t.Context(), "tree"); err != nil {
		t.Fatal(err)
	}
	waitGone(t, main)
	waitGone(t, child)
	if _, err := s.State(t.Context(), "tree"); !errors.Is(err, ErrUnknownUnit) {
		t.Errorf("State after Stop: %v, want ErrUnknownUnit", err)
	}
	for _, f := range []string{"tree.json", "tree.pid"} {
		if _, err := os.Stat(filepath.Join(h.cfg.RunDir, f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after Stop: %v", f, err)
		}
	}
	if err := s.Stop(t.Context(), "tree"); !errors.Is(err, ErrUnknownUnit) {
		t.Errorf("second Stop: %v, want ErrUnknownUnit", err)
	}
	// Stopped means forgotten: Ensure starts it again.
	if !h.ensure(s, Unit{Name: "tree", Command: h.script("tree", "exec sleep 1000\n")}) {
		t.Error("Ensure after Stop: changed = false")
	}
	if st := h.state(s, "tree"); st.Restarts != 0 {
		t.Errorf("Restarts after Stop and Ensure = %d", st.Restarts)
	}
}

func TestSupervisorStopEscalatesToSIGKILL(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *SupervisorConfig) { c.StopGrace = time.Second })
	s := h.supervisor()
	h.ensure(s, Unit{Name: "stubborn", Command: h.script("stubborn", "trap '' TERM\necho ready > \"$1/ready\"\nwhile :; do sleep 1; done\n")})
	h.waitMarker("ready")
	pid := h.state(s, "stubborn").PID
	start := time.Now()
	if err := s.Stop(t.Context(), "stubborn"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < time.Second {
		t.Errorf("Stop took %v, less than the grace period", took)
	}
	waitGone(t, pid)
	if e := h.logs.entries(t, "unit did not stop; sending SIGKILL", "stubborn"); len(e) != 1 {
		t.Errorf("escalation log = %v", e)
	}
	if e := h.logs.entries(t, "unit process ended", "stubborn"); len(e) != 1 || e[0]["reason"] != "signal: killed" {
		t.Errorf("end log = %v", e)
	}
}

func TestSupervisorStopKillsWhatOutlivesTheMainProcess(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *SupervisorConfig) { c.StopGrace = time.Minute })
	s := h.supervisor()
	// The child ignores SIGTERM (inherited); the main process does not.
	h.ensure(s, Unit{Name: "leftover", Command: h.script("leftover", `trap '' TERM
sleep 1000 &
echo $! > "$1/child"
trap - TERM
echo ready > "$1/ready"
wait
`)})
	h.waitMarker("ready")
	main, child := h.state(s, "leftover").PID, h.markerPID("child")
	start := time.Now()
	if err := s.Stop(t.Context(), "leftover"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("Stop took %v: it waited out the grace period for the child", took)
	}
	waitGone(t, main)
	waitGone(t, child)
}

func TestSupervisorStopHonoursContext(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *SupervisorConfig) { c.StopGrace = time.Hour })
	s := h.supervisor()
	h.ensure(s, Unit{Name: "stubborn", Command: h.script("stubborn", "trap '' TERM\necho ready > \"$1/ready\"\nwhile :; do sleep 1; done\n")})
	h.waitMarker("ready")
	pid := h.state(s, "stubborn").PID
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := s.Stop(ctx, "stubborn"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("Stop took %v despite its context", took)
	}
	waitGone(t, pid)
}

func TestSupervisorAdoptsAfterRestartOfTheAgent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	u := Unit{Name: "web", Command: h.script("web", "echo run >> \"$1/runs\"\nexec sleep 1000\n")}
	runs := func(n int) {
		t.Helper()
		waitFor(t, fmt.Sprintf("%d runs", n), func() bool { return strings.Count(h.marker("runs"), "run\n") == n })
	}
	s1 := h.supervisor()
	h.ensure(s1, u)
	runs(1)
	if err := s1.Restart(t.Context(), "web"); err != nil {
		t.Fatal(err)
	}
	runs(2)
	before := h.state(s1, "web")
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * h.cfg.PollInterval)
	if !running(before.PID) {
		t.Fatal("Close killed the process")
	}

	s2 := h.supervisor()
	// Before Ensure, the record is enough to observe the unit.
	if st := h.state(s2, "web"); !sameState(st, before) {
		t.Errorf("State from the record = %+v, want %+v", st, before)
	}
	if h.ensure(s2, u) {
		t.Error("Ensure of a running unit after an agent restart: changed = true")
	}
	after := h.state(s2, "web")
	if !sameState(after, before) || after.Restarts != 1 || !after.Running {
		t.Errorf("adopted State = %+v, want %+v", after, before)
	}
	if e := h.logs.entries(t, "unit adopted", "web"); len(e) != 1 || e[0]["pid"] != float64(before.PID) {
		t.Errorf("adoption log = %v", e)
	}
	if h.ensure(s2, u) {
		t.Error("second Ensure of the adopted unit: changed = true")
	}

	// It is watched: when it dies, it is restarted.
	if err := syscall.Kill(before.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	st := h.waitState(s2, "web", "a restart of the adopted unit", func(st State) bool { return st.Running && st.PID != before.PID })
	if st.Restarts != 2 || st.LastExit == "" {
		t.Errorf("State = %+v", st)
	}
	runs(3)
	// And Reload reaches the adopted-then-restarted child as usual.
	if err := s2.Reload(t.Context(), "web"); err != nil {
		t.Fatal(err)
	}
	h.waitState(s2, "web", "the reload restart", func(st State) bool { return st.Running && st.Restarts == 3 })
}

func TestSupervisorAdoptionStopsAChangedDefinition(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	s1 := h.supervisor()
	h.ensure(s1, Unit{Name: "tree", Command: h.script("tree", "sleep 1000 &\necho $! > \"$1/child\"\nwait\n")})
	old := h.state(s1, "tree")
	child := h.markerPID("child")
	s1.Close()

	s2 := h.supervisor()
	if !h.ensure(s2, sleeper("tree")) {
		t.Fatal("Ensure with a new definition after an agent restart: changed = false")
	}
	st := h.state(s2, "tree")
	if st.PID == old.PID || st.Restarts != 1 || !st.Running {
		t.Errorf("State = %+v, old %+v", st, old)
	}
	waitGone(t, old.PID)
	waitGone(t, child)
}

func TestSupervisorDoesNotAdoptARecycledPID(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	u := sleeper("web")
	s1 := h.supervisor()
	h.ensure(s1, u)
	old := h.state(s1, "web")
	s1.Close()

	// Make the record name another process with the same PID: a
	// different start time.
	path := filepath.Join(h.cfg.RunDir, "web.json")
	rec := readRecordFile(t, h.cfg, "web")
	rec["startTicks"] = rec["startTicks"].(float64) + 1
	b, _ := json.Marshal(rec)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}

	s2 := h.supervisor()
	if st := h.state(s2, "web"); st.Running || st.PID != 0 {
		t.Errorf("State from a record of a recycled PID = %+v", st)
	}
	if !h.ensure(s2, u) {
		t.Fatal("Ensure: changed = false, adopted a process with another start time")
	}
	st := h.state(s2, "web")
	if st.PID == old.PID || !st.Running || st.Restarts != 1 || st.LastExit != "exited while unsupervised (status unknown)" {
		t.Errorf("State = %+v, recorded PID %d", st, old.PID)
	}
	time.Sleep(200 * time.Millisecond)
	if !running(old.PID) {
		t.Error("the process that holds the recorded PID was killed")
	}
	// The record names the new process now.
	if rec := readRecordFile(t, h.cfg, "web"); rec["pid"] != float64(st.PID) {
		t.Errorf("record = %v", rec)
	}
	// Stopping the unit leaves the stranger alone too.
	if err := s2.Stop(t.Context(), "web"); err != nil {
		t.Fatal(err)
	}
	waitGone(t, st.PID)
	if !running(old.PID) {
		t.Error("Stop killed the process that holds the recorded PID")
	}
}

func TestSupervisorStopsARecordedUnitWithoutEnsure(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	s1 := h.supervisor()
	h.ensure(s1, Unit{Name: "tree", Command: h.script("tree", "sleep 1000 &\necho $! > \"$1/child\"\nwait\n")})
	h.ensure(s1, sleeper("other"))
	main, child, other := h.state(s1, "tree").PID, h.markerPID("child"), h.state(s1, "other").PID
	s1.Close()

	// An agent whose role no longer has the unit stops it.
	s2 := h.supervisor()
	if err := s2.Stop(t.Context(), "tree"); err != nil {
		t.Fatal(err)
	}
	waitGone(t, main)
	waitGone(t, child)
	if _, err := s2.State(t.Context(), "tree"); !errors.Is(err, ErrUnknownUnit) {
		t.Errorf("State after Stop: %v", err)
	}
	if !running(other) {
		t.Error("Stop of one unit killed another")
	}
	// StopAll reaches recorded units too.
	if err := s2.StopAll(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitGone(t, other)
	if names, _ := s2.recordedNames(); len(names) != 0 {
		t.Errorf("records left: %v", names)
	}
}

func TestSupervisorRestartAdoptsARecordedUnit(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	s1 := h.supervisor()
	h.ensure(s1, sleeper("web"))
	old := h.state(s1, "web")
	s1.Close()
	s2 := h.supervisor()
	if err := s2.Restart(t.Context(), "web"); err != nil {
		t.Fatal(err)
	}
	st := h.state(s2, "web")
	if !st.Running || st.PID == old.PID || st.Restarts != 1 {
		t.Errorf("State = %+v, old %+v", st, old)
	}
	waitGone(t, old.PID)
}

func TestSupervisorCloseLeavesProcessesRunning(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	s := h.supervisor()
	u := Unit{Name: "web", Command: h.script("web", "echo run >> \"$1/runs\"\nexec sleep 1000\n")}
	h.ensure(s, u)
	h.ensure(s, sleeper("db"))
	h.waitMarker("runs")
	web, db := h.state(s, "web").PID, h.state(s, "db").PID
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	time.Sleep(5 * h.cfg.PollInterval)
	for _, pid := range []int{web, db} {
		if !running(pid) {
			t.Errorf("pid %d died at Close", pid)
		}
	}
	for _, f := range []string{"web.json", "db.json"} {
		if _, err := os.Stat(filepath.Join(h.cfg.RunDir, f)); err != nil {
			t.Errorf("record after Close: %v", err)
		}
	}
	ctx := t.Context()
	for what, err := range map[string]error{
		"Ensure":  func() error { _, err := s.Ensure(ctx, u); return err }(),
		"State":   func() error { _, err := s.State(ctx, "web"); return err }(),
		"Reload":  s.Reload(ctx, "web"),
		"Restart": s.Restart(ctx, "web"),
		"Stop":    s.Stop(ctx, "web"),
		"StopAll": s.StopAll(ctx),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", what, err)
		}
	}
	if !running(web) {
		t.Fatal("an operation after Close killed the process")
	}
	// No longer supervised: a crash is not restarted.
	syscall.Kill(web, syscall.SIGKILL)
	waitGone(t, web)
	time.Sleep(20 * h.cfg.RestartBase)
	if runs := strings.Count(h.marker("runs"), "run\n"); runs != 1 {
		t.Errorf("%d runs after Close, want 1", runs)
	}
	// The next agent starts what died while nobody supervised it.
	s2 := h.supervisor()
	if !h.ensure(s2, u) {
		t.Error("Ensure of a unit that died unsupervised: changed = false")
	}
	if st := h.state(s2, "web"); !st.Running || st.PID == web || st.Restarts != 1 || st.LastExit != "exited while unsupervised (status unknown)" {
		t.Errorf("State = %+v", st)
	}
	if h.ensure(s2, sleeper("db")) {
		t.Error("Ensure of a unit that kept running: changed = true")
	}
	if st := h.state(s2, "db"); st.PID != db {
		t.Errorf("db: State = %+v, want pid %d adopted", st, db)
	}
}

func TestSupervisorLogs(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	s := h.supervisor()
	h.ensure(s, Unit{Name: "talk", Env: []string{"WHO=world"}, Command: h.script("talk", "echo \"out $WHO\"\necho err >&2\nexec sleep 1000\n")})
	logPath := filepath.Join(h.cfg.LogDir, "talk.log")
	read := func() string { b, _ := os.ReadFile(logPath); return string(b) }
	waitFor(t, "output in "+logPath, func() bool { return strings.Contains(read(), "out world\n") && strings.Contains(read(), "err\n") })
	if err := s.Restart(t.Context(), "talk"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "output appended", func() bool {
		return strings.Count(read(), "out world\n") == 2 && strings.Count(read(), "err\n") == 2
	})
}

func TestSupervisorWrap(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *SupervisorConfig) {
		c.Wrap = func(argv []string) []string { return append([]string{"/usr/bin/env", "WRAPPED=yes"}, argv...) }
	})
	s := h.supervisor()
	u := Unit{Name: "wrapped", Command: h.script("wrapped", "echo \"wrapped=$WRAPPED\"\nexec sleep 1000\n")}
	h.ensure(s, u)
	logPath := filepath.Join(h.cfg.LogDir, "wrapped.log")
	waitFor(t, "output", func() bool { b, _ := os.ReadFile(logPath); return string(b) == "wrapped=yes\n" })
	if rec := readRecordFile(t, h.cfg, "wrapped"); fmt.Sprint(rec["argv"]) != fmt.Sprint([]any{"/usr/bin/env", "WRAPPED=yes", "/bin/sh", u.Command[1], h.dir}) {
		t.Errorf("recorded argv = %v", rec["argv"])
	}
	if h.ensure(s, u) {
		t.Error("second Ensure: changed = true")
	}
	// A different wrapper is a different definition.
	s.Close()
	h.cfg.Wrap = nil
	s2 := h.supervisor()
	if !h.ensure(s2, u) {
		t.Error("Ensure after the wrapper changed: changed = false")
	}
}

func TestSupervisorRejectsBadUnits(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	s := h.supervisor()
	ok := sleeper("web")
	for _, tc := range []struct {
		unit Unit
		want string
	}{
		{Unit{Command: ok.Command}, "empty name"},
		{Unit{Name: "Web", Command: ok.Command}, `invalid unit name "Web"`},
		{Unit{Name: "-web", Command: ok.Command}, "invalid unit name"},
		{Unit{Name: "we_b", Command: ok.Command}, "invalid unit name"},
		{Unit{Name: "../web", Command: ok.Command}, "invalid unit name"},
		{Unit{Name: strings.Repeat("a", 65), Command: ok.Command}, "invalid unit name"},
		{Unit{Name: "web"}, "empty command"},
		{Unit{Name: "web", Command: []string{"sleep", "1"}}, `command "sleep" is not an absolute path`},
		{Unit{Name: "web", Command: []string{"/bin/sleep", "1\x00"}}, "contains NUL"},
		{Unit{Name: "web", Command: ok.Command, Env: []string{"FOO"}}, `environment entry "FOO" is not KEY=VALUE`},
		{Unit{Name: "web", Command: ok.Command, Env: []string{"=x"}}, "not KEY=VALUE"},
		{Unit{Name: "web", Command: ok.Command, ReloadSignal: syscall.SIGKILL}, "reload signal 9"},
	} {
		changed, err := s.Ensure(t.Context(), tc.unit)
		if err == nil || changed || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "ensure ") {
			t.Errorf("Ensure(%+v) = %v, %v; want an error about %s", tc.unit, changed, err, tc.want)
		}
	}
	// A command that cannot start is refused, and not kept.
	_, err := s.Ensure(t.Context(), Unit{Name: "missing", Command: []string{"/nonexistent/daemon"}})
	if err == nil || !strings.HasPrefix(err.Error(), "start missing: ") || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Ensure of a missing binary: %v", err)
	}
	if entries, _ := os.ReadDir(h.cfg.RunDir); len(entries) != 0 {
		t.Errorf("RunDir after refused units: %v", entries)
	}
	for what, err := range map[string]error{
		"State":   func() error { _, err := s.State(t.Context(), "missing"); return err }(),
		"Reload":  s.Reload(t.Context(), "nope"),
		"Restart": s.Restart(t.Context(), "nope"),
		"Stop":    s.Stop(t.Context(), "nope"),
		"Stop ..": s.Stop(t.Context(), "../nope"),
	} {
		if !errors.Is(err, ErrUnknownUnit) {
			t.Errorf("%s of an unknown unit: %v, want ErrUnknownUnit", what, err)
		}
	}
}

func TestSupervisorEnsureHonoursContext(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	s := h.supervisor()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Ensure(ctx, sleeper("web")); !errors.Is(err, context.Canceled) {
		t.Errorf("Ensure with a cancelled context: %v", err)
	}
	if _, err := s.State(t.Context(), "web"); !errors.Is(err, ErrUnknownUnit) {
		t.Errorf("State: %v, want ErrUnknownUnit", err)
	}
}

func TestSupervisorConcurrentUse(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	s := h.supervisor()
	var wg sync.WaitGroup
	var mu sync.Mutex
	changes := 0
	for range 8 {
		wg.Go(func() {
			changed, err := s.Ensure(t.Context(), sleeper("web"))
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			if changed {
				changes++
			}
			mu.Unlock()
			s.State(t.Context(), "web")
			s.Reload(t.Context(), "other")
		})
		wg.Go(func() { s.State(t.Context(), "web") })
	}
	wg.Wait()
	if changes != 1 {
		t.Errorf("%d of 8 concurrent Ensures changed something, want 1", changes)
	}
	if e := h.logs.entries(t, "unit started", "web"); len(e) != 1 {
		t.Errorf("%d starts", len(e))
	}
	h.state(s, "web")
	// Concurrent changes of one unit end with one process.
	for i := range 4 {
		wg.Go(func() {
			if _, err := s.Ensure(t.Context(), sleeper("web", strconv.Itoa(i))); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() {
			if err := s.Restart(t.Context(), "web"); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	st := h.state(s, "web")
	starts := h.logs.entries(t, "unit started", "web")
	for _, e := range starts[:len(starts)-1] {
		if pid := int(e["pid"].(float64)); pid != st.PID {
			waitGone(t, pid)
		}
	}
	if !running(st.PID) {
		t.Errorf("State = %+v, not running", st)
	}
}

func TestSupervisorStopAll(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	s := h.supervisor()
	var pids []int
	for _, name := range []string{"a", "b", "c"} {
		h.ensure(s, sleeper(name))
		pids = append(pids, h.state(s, name).PID)
	}
	if err := s.StopAll(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		waitGone(t, pid)
	}
	if names, _ := s.recordedNames(); len(names) != 0 {
		t.Errorf("records left: %v", names)
	}
	// Still usable.
	if !h.ensure(s, sleeper("a")) {
		t.Error("Ensure after StopAll: changed = false")
	}
}

func TestNewSupervisorConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		cfg  SupervisorConfig
		want string
	}{
		{SupervisorConfig{LogDir: dir}, "RunDir is required"},
		{SupervisorConfig{RunDir: dir}, "LogDir is required"},
		{SupervisorConfig{RunDir: dir, LogDir: dir, StopGrace: -1}, "StopGrace is negative"},
		{SupervisorConfig{RunDir: dir, LogDir: dir, RestartBase: time.Minute}, "RestartMax (30s) is below RestartBase (1m0s)"},
	} {
		if _, err := NewSupervisor(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewSupervisor(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
	s, err := NewSupervisor(SupervisorConfig{RunDir: filepath.Join(dir, "run"), LogDir: filepath.Join(dir, "log")})
	if err != nil {
		t.Fatal(err)
	}
	want := SupervisorConfig{RunDir: filepath.Join(dir, "run"), LogDir: filepath.Join(dir, "log"),
		RestartBase: time.Second, RestartMax: 30 * time.Second, RestartReset: 5 * time.Minute,
		StopGrace: 10 * time.Second, PollInterval: 500 * time.Millisecond}
	got := s.cfg
	got.Logger = nil
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("defaults = %+v", s.cfg)
	}
	for _, d := range []string{"run", "log"} {
		if fi, err := os.Stat(filepath.Join(dir, d)); err != nil || !fi.IsDir() {
			t.Errorf("%s: %v", d, err)
		}
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	base, ceiling := 100*time.Millisecond, 3*time.Second
	for n := 1; n <= 70; n++ {
		want := base << min(n-1, 10)
		want = min(want, ceiling)
		for range 50 {
			d := backoff(n, base, ceiling)
			if d < max(want/2, base) || d > want {
				t.Fatalf("backoff(%d) = %v, want within [%v, %v]", n, d, max(want/2, base), want)
			}
		}
	}
	if d := backoff(1, time.Second, time.Second); d != time.Second {
		t.Errorf("backoff with base = max: %v", d)
	}
}

func TestSameProcess(t *testing.T) {
	t.Parallel()
	st, err := procfs.ReadStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if sameProcess(os.Getpid(), st.StartTime+1) || !sameProcess(os.Getpid(), st.StartTime) || sameProcess(1, 0) {
		t.Error("sameProcess does not tell start times apart")
	}
}
