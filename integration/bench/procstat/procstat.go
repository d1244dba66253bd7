// Package procstat reads a process's memory and CPU time from /proc, for
// the benchmarks.
package procstat

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Memory is a process's resident memory from /proc/PID/status.
type Memory struct {
	HWM, RSS uint64 // bytes
	Threads  int
}

// ReadMemory reads a process's memory figures.
func ReadMemory(pid int) (Memory, error) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return Memory{}, fmt.Errorf("read memory of pid %d: %w", pid, err)
	}
	var m Memory
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(val)
		if len(fields) == 0 {
			continue
		}
		n, _ := strconv.ParseUint(fields[0], 10, 64)
		switch key {
		case "VmHWM":
			m.HWM = n << 10 // kB
		case "VmRSS":
			m.RSS = n << 10
		case "Threads":
			m.Threads = int(n)
		}
	}
	if m.RSS == 0 {
		return m, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
	}
	return m, nil
}

// CPUTime is the user and system CPU time a process has used so far.
func CPUTime(pid int) (time.Duration, error) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, fmt.Errorf("read CPU time of pid %d: %w", pid, err)
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: state is field 3, utime 14 and stime 15.
	_, rest, ok := strings.Cut(string(data), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	const userHZ = 100 // USER_HZ is 100 on every Linux the kernel ABI allows
	return time.Duration(utime+stime) * time.Second / userHZ, nil
}
