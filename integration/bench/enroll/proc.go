package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/harmonykaas/harmony/integration/bench/procstat"
)

// wantNoFile is the descriptor limit the run asks for: W watches need W
// sockets in the controller and W more in this process.
const wantNoFile = 65536

// raiseNoFile sets RLIMIT_NOFILE to soft = hard, raising the hard limit to
// wantNoFile when allowed (root). Calling Setrlimit explicitly also stops
// the Go runtime from restoring the old soft limit in children, so the
// controller inherits it.
// The note says why the hard limit stayed lower, if it did.
func raiseNoFile() (limit uint64, note string, _ error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, "", fmt.Errorf("getrlimit: %w", err)
	}
	if lim.Max < wantNoFile {
		raised := syscall.Rlimit{Cur: wantNoFile, Max: wantNoFile}
		err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised)
		if err == nil {
			return raised.Cur, "", nil
		}
		note = fmt.Sprintf("hard limit %d could not be raised to %d: %v", lim.Max, wantNoFile, err)
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, note, fmt.Errorf("setrlimit: %w", err)
	}
	return lim.Cur, note, nil
}

// freeLoopbackAddr returns 127.0.0.1:PORT with a port that was free a
// moment ago; the controller prints its bound port only in a log line.
func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr, nil
}

// child is a process the run started, with its output in a log file.
type child struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	waitErr error
}

func startChild(name, logPath, bin string, args ...string) (*child, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// If the benchmark dies, so do its children.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		c.waitErr = cmd.Wait()
		logFile.Close()
		close(c.done)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// exitedErr reports a child that ended before it was asked to, with the
// end of its log.
func (c *child) exitedErr() error {
	select {
	case <-c.done:
		return fmt.Errorf("%s exited early (%v); its log ends with:\n%s", c.name, c.waitErr, c.logTail(20))
	default:
		return nil
	}
}

// stop sends SIGTERM and waits, then SIGKILL if it takes too long.
func (c *child) stop(grace time.Duration) error {
	select {
	case <-c.done:
		return nil
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		var exit *exec.ExitError
		if c.waitErr != nil && !errors.As(c.waitErr, &exit) {
			return c.waitErr
		}
		return nil
	case <-time.After(grace):
		_ = c.cmd.Process.Kill()
		<-c.done
		return fmt.Errorf("%s did not stop within %s of SIGTERM; killed", c.name, grace)
	}
}

func (c *child) logTail(lines int) string {
	data, err := os.ReadFile(c.logPath)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return "  " + strings.Join(all, "\n  ")
}

// poll calls f every interval until it returns true or an error, or ctx ends.
func poll(ctx context.Context, interval time.Duration, f func() (bool, error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		ok, err := f()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// countFDs counts a process's open descriptors.
func countFDs(pid int) int {
	entries, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	if err != nil {
		return -1
	}
	return len(entries)
}

// cpuMeter reads the CPU time of several processes at the start and end
// of a phase, to tell whether the phase was bound by CPU.
type cpuMeter struct {
	pids      []int
	names     []string
	start     []time.Duration
	busyStart time.Duration
	t0        time.Time
}

// The other process is the server of the phase; this one holds the clients.
func newCPUMeter(server int) *cpuMeter {
	pids := []int{server, os.Getpid()}
	m := &cpuMeter{pids: pids, names: []string{"server", "clients"}, start: make([]time.Duration, len(pids)), t0: time.Now()}
	for i, pid := range pids {
		m.start[i], _ = procstat.CPUTime(pid)
	}
	m.busyStart, _ = machineBusy()
	return m
}

// machineBusy is the CPU time the whole machine has spent not idle, from
// /proc/stat. Less the benchmark's own processes, it shows whether
// something else ran during a phase (another build, a noisy neighbour's
// steal), which would make the phase's figures unreliable.
func machineBusy() (time.Duration, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, errors.New("parse /proc/stat")
	}
	var busy uint64
	// user nice system idle iowait irq softirq steal: all but idle and iowait.
	for i, v := range f[1:9] {
		if i == 3 || i == 4 {
			continue
		}
		n, _ := strconv.ParseUint(v, 10, 64)
		busy += n
	}
	const userHZ = 100
	return time.Duration(busy) * time.Second / userHZ, nil
}

// cpuUse is what a cpuMeter saw over one phase.
type cpuUse struct {
	text string
	// server is the server process's CPU time per unit of work, and total
	// the server's and the clients' together.
	server, total time.Duration
	// others is the CPU, in percent of one core, that the machine spent on
	// anything but the benchmark's processes.
	others float64
}

// disturbed is the share of one core that other work may take before a
// phase's figures are flagged as unreliable. It is not zero: kernel threads
// that write the store's commits (the file system journal) count as other
// work.
const disturbed = 25.0

// report gives each process's CPU use over the phase, as a share of one
// core and per unit of work.
func (m *cpuMeter) report(perUnit int, unit string) cpuUse {
	wall := time.Since(m.t0)
	u := cpuUse{others: -1}
	var parts []string
	var total time.Duration
	for i, pid := range m.pids {
		end, err := procstat.CPUTime(pid)
		if err != nil {
			continue
		}
		used := end - m.start[i]
		total += used
		part := fmt.Sprintf("%s %.0f%%", m.names[i], 100*used.Seconds()/wall.Seconds())
		if perUnit > 0 {
			part += fmt.Sprintf(" (%s/%s)", ms(used/time.Duration(perUnit)), unit)
		}
		if i == 0 && perUnit > 0 {
			u.server = used / time.Duration(perUnit)
		}
		parts = append(parts, part)
	}
	othersText := ""
	if busy, err := machineBusy(); err == nil {
		u.others = max(0, 100*(busy-m.busyStart-total).Seconds()/wall.Seconds())
		othersText = fmt.Sprintf("; anything else on the machine %.0f%%", u.others)
		if u.others > disturbed {
			othersText += " (DISTURBED: other work ran during this phase)"
		}
	}
	if perUnit > 0 {
		u.total = total / time.Duration(perUnit)
	}
	u.text = fmt.Sprintf("CPU: %s; together %.0f%% of %d cores%s", strings.Join(parts, ", "),
		100*total.Seconds()/wall.Seconds(), runtime.NumCPU(), othersText)
	return u
}
