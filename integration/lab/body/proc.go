package body

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Proc names one process across restarts of the lab: a PID alone may be
// reused, a PID with its start time may not.
type Proc struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"startTime"` // clock ticks since boot, /proc/PID/stat field 22
}

type procStat struct {
	state byte
	ppid  int
	start uint64
}

func readProcStat(pid int) (procStat, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	// The command name may hold spaces and parentheses: fields start
	// after the last ')'.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return procStat{}, fmt.Errorf("/proc/%d/stat: ppid: %w", pid, err)
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("/proc/%d/stat: start time: %w", pid, err)
	}
	return procStat{state: f[0][0], ppid: ppid, start: start}, nil
}

// procOf returns the Proc of a running process.
func procOf(pid int) (Proc, error) {
	st, err := readProcStat(pid)
	if err != nil {
		return Proc{}, err
	}
	return Proc{PID: pid, StartTime: st.start}, nil
}

// Alive reports whether p still runs. A zombie does not: it has exited and
// only waits to be reaped.
func (p Proc) Alive() bool {
	if p.PID <= 0 {
		return false
	}
	st, err := readProcStat(p.PID)
	if err != nil {
		return false
	}
	return st.start == p.StartTime && st.state != 'Z' && st.state != 'X'
}

// signal sends sig to p if it is still the process we started.
func (p Proc) signal(sig syscall.Signal) error {
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
		if st, err := readProcStat(k); err == nil && st.ppid == pid {
			kids = append(kids, k)
		}
	}
	return kids, nil
}

// containerInit returns the child of nspawn that runs in a PID namespace of
// its own: the container's PID 1. nspawn briefly has other children while
// it sets the container up.
func containerInit(nspawn int) (Proc, bool) {
	own, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", nspawn))
	if err != nil {
		return Proc{}, false
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
				if p, err := procOf(k); err == nil {
					return p, true
				}
			}
		}
	}
	return Proc{}, false
}
