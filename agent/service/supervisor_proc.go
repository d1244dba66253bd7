//go:build linux

package service

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/harmonykaas/harmony/internal/procfs"
)

// basePath is the whole environment of a unit, besides Unit.Env.
const basePath = "PATH=/usr/sbin:/usr/bin:/sbin:/bin"

const (
	// killWait bounds the wait for a process to die after SIGKILL.
	killWait = 5 * time.Second
	// stopPoll is how often a stop checks whether an adopted process died.
	stopPoll = 20 * time.Millisecond
)

// proc is one main process of a unit: a child this Supervisor started, or
// a process it adopted.
type proc struct {
	pid int
	// ticks is the process's start time in clock ticks after boot, from
	// /proc/<pid>/stat: with pid, it names the process even after the PID
	// is recycled.
	ticks   uint64
	started time.Time

	// A child has cmd, and exited, closed once it has been reaped, after
	// state and ended are set.
	cmd    *exec.Cmd
	exited chan struct{}
	state  *os.ProcessState
	ended  time.Time
}

// alive reports whether p is still running: a child until it has been
// reaped (so that its exit status is known when alive turns false), an
// adopted process until it is gone or a zombie.
func (p *proc) alive() bool {
	if p.cmd != nil {
		return !closed(p.exited)
	}
	return sameProcess(p.pid, p.ticks)
}

// exitReason describes how p ended: "exit status 1", "signal: killed".
func (p *proc) exitReason() string {
	if p.cmd == nil {
		return "exited (status unknown: adopted process)"
	}
	select {
	case <-p.exited:
		return p.state.String()
	default:
		return "running"
	}
}

// signal sends sig to p's main process only.
func (p *proc) signal(sig syscall.Signal) error {
	if p.cmd != nil {
		// Through the process's pidfd: never a recycled PID.
		return p.cmd.Process.Signal(sig)
	}
	if !sameProcess(p.pid, p.ticks) {
		return os.ErrProcessDone
	}
	return syscall.Kill(p.pid, sig)
}

// signalGroup sends sig to p's process group, which Setsid made the group
// whose ID is p's PID. It may be called after p died, to reach what is left
// of the group: as long as the group has a member Linux does not reuse its
// ID as a PID, so if p's PID now names another process, the group is gone.
func (p *proc) signalGroup(sig syscall.Signal) error {
	if p.pid <= 1 {
		return nil // never kill(0) or kill(-1)
	}
	st, err := procfs.ReadStat(p.pid)
	if err == nil {
		if st.StartTime != p.ticks {
			return nil // the PID was recycled: our group is empty
		}
		if st.PGRP != p.pid {
			// Not a group leader (it left its session): only the process.
			err := syscall.Kill(p.pid, sig)
			if errors.Is(err, syscall.ESRCH) {
				return nil
			}
			return err
		}
	}
	err = syscall.Kill(-p.pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// spawn starts u's process. u.mu is held.
func (s *Supervisor) spawn(u *unit) (*proc, error) {
	logFile, err := os.OpenFile(filepath.Join(s.cfg.LogDir, u.name+".log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	defer logFile.Close()
	cmd := exec.Command(u.argv[0], u.argv[1:]...)
	cmd.Env = append([]string{basePath}, u.def.Env...)
	cmd.Dir = "/"
	// Files, not pipes: the process keeps its output when the agent is
	// gone. Stdin is /dev/null.
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own session and process group, so that a stop reaches its
	// children, and no signal meant for the agent's group reaches it. No
	// Pdeathsig: it outlives the agent.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{pid: cmd.Process.Pid, started: time.Now(), cmd: cmd, exited: make(chan struct{})}
	// Not reaped yet, so /proc/<pid> is there even if it already exited.
	st, statErr := procfs.ReadStat(p.pid)
	p.ticks = st.StartTime
	go func() {
		_ = cmd.Wait()
		p.state, p.ended = cmd.ProcessState, time.Now()
		close(p.exited)
	}()
	if statErr != nil {
		_ = cmd.Process.Kill() // too young to have children
		<-p.exited
		return nil, statErr
	}
	return p, nil
}

// terminate stops p's process group: SIGTERM, then SIGKILL after
// StopGrace, or at once when ctx ends. Whatever is left of the group once
// p has exited is killed.
func (s *Supervisor) terminate(ctx context.Context, name string, p *proc) error {
	if !p.alive() {
		return p.signalGroup(syscall.SIGKILL)
	}
	if err := p.signalGroup(syscall.SIGTERM); err != nil {
		return fmt.Errorf("signal pid %d: %w", p.pid, err)
	}
	if !waitDead(ctx, p, s.cfg.StopGrace) {
		why := "grace period over"
		if ctx.Err() != nil {
			why = ctx.Err().Error()
		}
		s.log.Warn("unit did not stop; sending SIGKILL", "unit", name, "pid", p.pid, "reason", why, "grace", s.cfg.StopGrace)
		if err := p.signalGroup(syscall.SIGKILL); err != nil {
			return fmt.Errorf("kill pid %d: %w", p.pid, err)
		}
		if !waitDead(context.Background(), p, killWait) {
			return fmt.Errorf("pid %d survived SIGKILL for %v", p.pid, killWait)
		}
	}
	if err := p.signalGroup(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill what is left of process group %d: %w", p.pid, err)
	}
	s.log.Info("unit process ended", "unit", name, "pid", p.pid, "reason", p.exitReason())
	return nil
}

// waitDead waits up to d, or until ctx ends, for p to die.
func waitDead(ctx context.Context, p *proc, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	tick := time.NewTicker(stopPoll)
	defer tick.Stop()
	var exited <-chan struct{} // nil, never ready, for an adopted process
	if p.cmd != nil {
		exited = p.exited
	}
	for {
		if !p.alive() {
			return true
		}
		select {
		case <-exited:
			return true
		case <-tick.C:
		case <-timer.C:
			return !p.alive()
		case <-ctx.Done():
			return !p.alive()
		}
	}
}

// runner is the goroutine that supervises one unit from one start (or
// adoption) until Stop, Restart, a changed definition or Close.
type runner struct {
	quit chan struct{} // closed, under unit.mu, to end supervision
	done chan struct{} // closed when the goroutine has returned
}

// newRunner supervises p. u.mu is held.
func (s *Supervisor) newRunner(u *unit, p *proc) *runner {
	r := &runner{quit: make(chan struct{}), done: make(chan struct{})}
	go s.supervise(u, r, p)
	return r
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// supervise waits for p to exit and restarts it with backoff, until r.quit.
// Whoever closes r.quit deals with the process.
func (s *Supervisor) supervise(u *unit, r *runner, p *proc) {
	defer close(r.done)
	failures := 0 // exits in a row, each after less than RestartReset
	for {
		ended, ok := s.watch(p, r.quit)
		if !ok {
			return
		}
		// Nothing may outlive its main process (workers holding ports).
		_ = p.signalGroup(syscall.SIGKILL)
		reason := p.exitReason()
		ran := ended.Sub(p.started)
		u.mu.Lock()
		if closed(r.quit) {
			u.mu.Unlock()
			return
		}
		u.proc, u.lastExit = nil, reason
		s.record(u)
		u.mu.Unlock()
		if ran >= s.cfg.RestartReset {
			failures = 0
		}
		failures++
		delay := backoff(failures, s.cfg.RestartBase, s.cfg.RestartMax)
		s.log.Warn("unit exited", "unit", u.name, "pid", p.pid, "reason", reason, "ran", ran.Round(time.Millisecond), "restart_in", delay.Round(time.Millisecond))
		for {
			timer := time.NewTimer(delay)
			select {
			case <-r.quit:
				timer.Stop()
				return
			case <-timer.C:
			}
			u.mu.Lock()
			if closed(r.quit) {
				u.mu.Unlock()
				return
			}
			np, err := s.spawn(u)
			if err != nil {
				u.lastExit = "start failed: " + err.Error()
				s.record(u)
				u.mu.Unlock()
				failures++
				delay = backoff(failures, s.cfg.RestartBase, s.cfg.RestartMax)
				s.log.Error("unit failed to restart", "unit", u.name, "reason", reason, "err", err, "restart_in", delay.Round(time.Millisecond))
				continue
			}
			u.proc = np
			u.restarts++
			s.record(u)
			restarts := u.restarts
			u.mu.Unlock()
			s.log.Info("unit restarted", "unit", u.name, "pid", np.pid, "reason", reason, "restarts", restarts)
			p = np
			break
		}
	}
}

// record writes u's record from the runner, which has no caller to report
// a failure to. u.mu is held.
func (s *Supervisor) record(u *unit) {
	u.recorded = false
	if err := s.writeRecord(u); err != nil {
		s.log.Error("cannot record unit", "unit", u.name, "err", err)
		return
	}
	u.recorded = true
}

// watch waits for p to exit, and says when; false when quit came first. A
// child is waited for; an adopted process is polled.
func (s *Supervisor) watch(p *proc, quit <-chan struct{}) (time.Time, bool) {
	if p.cmd != nil {
		select {
		case <-p.exited:
			return p.ended, true
		case <-quit:
			return time.Time{}, false
		}
	}
	tick := time.NewTicker(s.cfg.PollInterval)
	defer tick.Stop()
	for {
		if !p.alive() {
			return time.Now(), true
		}
		select {
		case <-quit:
			return time.Time{}, false
		case <-tick.C:
		}
	}
}

// backoff is the delay before restart n (1 for the first after a quick
// exit): base·2^(n-1), at most ceiling, jittered uniformly within [d/2, d] but
// never below base.
func backoff(n int, base, ceiling time.Duration) time.Duration {
	d := base
	for i := 1; i < n && d < ceiling; i++ {
		d *= 2
	}
	d = min(d, ceiling)
	lo := max(d/2, base)
	if d <= lo {
		return d
	}
	return lo + time.Duration(rand.Int64N(int64(d-lo)+1))
}

// sameProcess reports whether pid is running and is the process that
// started at ticks.
func sameProcess(pid int, ticks uint64) bool {
	if pid <= 1 {
		return false
	}
	return procfs.Proc{PID: pid, StartTime: ticks}.Alive()
}
