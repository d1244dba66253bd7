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

	"github.com/harmonykaas/harmony/internal/procfs"
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
	st, err := procfs.ReadStat(pid)
	if err != nil {
		return 0, fmt.Errorf("read CPU time of pid %d: %w", pid, err)
	}
	const userHZ = 100 // USER_HZ is 100 on every Linux the kernel ABI allows
	return time.Duration(st.UTime+st.STime) * time.Second / userHZ, nil
}
