package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/harmonykaas/harmony/internal/procfs"
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
	// Reap it if it exits while we still run; afterwards init does.
	go cmd.Wait()
	proc, _ := procfs.Of(pid)
	return procRecord{Proc: proc}, nil
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
			if st, err := procfs.ReadStat(pid); err == nil && !st.Exited() {
				left++
			}
		}
		if left == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}
