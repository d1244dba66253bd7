// Package procfs reads what Harmony needs of /proc/PID/stat, and names a
// process across PID reuse by its PID and start time. The agent's
// supervisor, the lab and the benchmarks all read it here.
package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Stat is what Harmony reads of /proc/PID/stat.
type Stat struct {
	State byte // field 3: R, S, D, Z, ...
	PPID  int  // field 4
	PGRP  int  // field 5
	// UTime and STime are the user and system CPU time, in clock ticks
	// (fields 14 and 15).
	UTime, STime uint64
	// StartTime is when the process started, in clock ticks after boot
	// (field 22).
	StartTime uint64
}

// Exited reports whether the process has ended: a zombie waits only to be
// reaped, a dead one is gone.
func (s Stat) Exited() bool { return s.State == 'Z' || s.State == 'X' || s.State == 'x' }

// ReadStat reads /proc/PID/stat.
func ReadStat(pid int) (Stat, error) {
	if pid <= 0 {
		return Stat{}, fmt.Errorf("pid %d: %w", pid, os.ErrNotExist)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, err
	}
	st, err := ParseStat(b)
	if err != nil {
		return Stat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return st, nil
}

// ParseStat parses /proc/PID/stat. The command name (field 2) is in
// parentheses and may itself hold spaces and parentheses, so fields are
// counted from the last ')'.
func ParseStat(b []byte) (Stat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return Stat{}, errors.New("no command name")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3.
	if len(f) < 20 || len(f[0]) != 1 {
		return Stat{}, errors.New("too few fields")
	}
	st := Stat{State: f[0][0]}
	for _, n := range []struct {
		name  string
		field int
		dst   *uint64
	}{{"utime", 11, &st.UTime}, {"stime", 12, &st.STime}, {"starttime", 19, &st.StartTime}} {
		v, err := strconv.ParseUint(f[n.field], 10, 64)
		if err != nil {
			return Stat{}, fmt.Errorf("%s: %w", n.name, err)
		}
		*n.dst = v
	}
	var err error
	if st.PPID, err = strconv.Atoi(f[1]); err != nil {
		return Stat{}, fmt.Errorf("ppid: %w", err)
	}
	if st.PGRP, err = strconv.Atoi(f[2]); err != nil {
		return Stat{}, fmt.Errorf("pgrp: %w", err)
	}
	return st, nil
}

// Proc names one process: a PID alone may be reused, a PID with its start
// time may not.
type Proc struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"startTime"` // clock ticks after boot
}

// Of returns the Proc of a running process.
func Of(pid int) (Proc, error) {
	st, err := ReadStat(pid)
	if err != nil {
		return Proc{}, err
	}
	return Proc{PID: pid, StartTime: st.StartTime}, nil
}

// Alive reports whether p still runs as the process it names. A zombie
// does not: it has exited and only waits to be reaped.
func (p Proc) Alive() bool {
	st, err := ReadStat(p.PID)
	return err == nil && st.StartTime == p.StartTime && !st.Exited()
}
