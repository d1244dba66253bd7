package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// startDetached starts argv in its own session with output appended to
// logPath, and lets it outlive this process: the lab runs on after
// `harmonyctl lab up` exits.
func startDetached(argv []string, logPath string) (procRecord, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return procRecord{}, err
	}
	defer log.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return procRecord{}, fmt.Errorf("start %s: %w", argv[0], err)
	}
	pid := cmd.Process.Pid
	start, _ := procStartTime(pid)
	// Reap it if it exits while we still run; afterwards init does.
	go cmd.Wait()
	return procRecord{PID: pid, StartTime: start}, nil
}

// procStartTime reads a process's start time, in clock ticks since boot
// (field 22 of /proc/PID/stat).
func procStartTime(pid int) (uint64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces and parentheses: fields start
	// after the last ')'.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields))
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// alive reports whether p still runs as the process the lab started.
func (p procRecord) alive() bool {
	st, err := procStartTime(p.PID)
	return err == nil && st == p.StartTime
}

// killAll stops processes: SIGTERM to each process group, then SIGKILL
// to whatever is left after grace; SIGKILL alone when grace is zero.
func killAll(ctx context.Context, pids []int, grace time.Duration) {
	if len(pids) == 0 {
		return
	}
	if grace > 0 {
		terminate(ctx, pids, grace)
	}
	for _, pid := range pids {
		syscall.Kill(-pid, syscall.SIGKILL)
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// terminate sends SIGTERM and waits up to grace for the processes to go.
func terminate(ctx context.Context, pids []int, grace time.Duration) {
	for _, pid := range pids {
		syscall.Kill(-pid, syscall.SIGTERM)
		syscall.Kill(pid, syscall.SIGTERM)
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		left := 0
		for _, pid := range pids {
			if syscall.Kill(pid, 0) == nil && !zombie(pid) {
				left++
			}
		}
		if left == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func zombie(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && len(s) > i+2 && s[i+2] == 'Z'
}
