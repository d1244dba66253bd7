package body

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/harmonykaas/harmony/internal/procfs"
)

// signal sends sig to p if it is still the process we started.
func signal(p procfs.Proc, sig syscall.Signal) error {
	if !p.Alive() {
		return nil
	}
	if err := syscall.Kill(p.PID, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %d to pid %d: %w", sig, p.PID, err)
	}
	return nil
}

// children lists the PIDs whose parent is pid.
func children(pid int) ([]int, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	if err == nil && len(tasks) > 0 {
		var kids []int
		for _, t := range tasks {
			data, err := os.ReadFile(t)
			if err != nil {
				continue // the thread exited
			}
			for _, f := range strings.Fields(string(data)) {
				if k, err := strconv.Atoi(f); err == nil {
					kids = append(kids, k)
				}
			}
		}
		return kids, nil
	}
	// Without CONFIG_PROC_CHILDREN: scan every process.
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var kids []int
	for _, e := range ents {
		k, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := procfs.ReadStat(k); err == nil && st.PPID == pid {
			kids = append(kids, k)
		}
	}
	return kids, nil
}

// containerInit returns the child of nspawn that runs in a PID namespace of
// its own: the container's PID 1. nspawn briefly has other children while
// it sets the container up.
func containerInit(nspawn int) (procfs.Proc, bool) {
	own, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", nspawn))
	if err != nil {
		return procfs.Proc{}, false
	}
	kids, _ := children(nspawn)
	for _, k := range kids {
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", k))
		if err != nil || ns == own {
			continue
		}
		// NSpid lists the PID in each namespace, outermost first; the
		// container's init is 1 in the innermost.
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", k))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) >= 3 && f[0] == "NSpid:" && f[len(f)-1] == "1" {
				if p, err := procfs.Of(k); err == nil {
					return p, true
				}
			}
		}
	}
	return procfs.Proc{}, false
}

// sameExecutable reports whether two processes run the same file, or
// either is gone.
func sameExecutable(a, b int) bool {
	var sa, sb syscall.Stat_t
	if syscall.Stat(fmt.Sprintf("/proc/%d/exe", a), &sa) != nil || syscall.Stat(fmt.Sprintf("/proc/%d/exe", b), &sb) != nil {
		return true
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino
}
