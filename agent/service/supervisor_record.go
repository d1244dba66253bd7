//go:build linux

package service

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// record is RunDir/<name>.json: what a later Supervisor needs to adopt,
// observe or stop the unit's process. It holds the unit's environment, so
// it is written 0600.
type record struct {
	Name string `json:"name"`
	// PID and StartTicks (field 22 of /proc/<pid>/stat) name the main
	// process; PID is 0 while the unit waits to be restarted.
	PID        int       `json:"pid"`
	StartTicks uint64    `json:"startTicks"`
	Started    time.Time `json:"started,omitzero"`
	// Hash is definitionHash of the definition below.
	Hash         string   `json:"hash"`
	Command      []string `json:"command"`
	Argv         []string `json:"argv"` // Command after SupervisorConfig.Wrap
	Env          []string `json:"env,omitempty"`
	ReloadSignal int      `json:"reloadSignal,omitempty"`
	Restarts     int      `json:"restarts"`
	LastExit     string   `json:"lastExit,omitempty"`
}

// definitionHash identifies a unit's definition: its command (as run,
// after Wrap), environment and reload signal. The name is not part of it.
func definitionHash(def Unit, argv []string) string {
	b, err := json.Marshal(struct {
		Command      []string
		Argv         []string
		Env          []string
		ReloadSignal int
	}{def.Command, argv, def.Env, int(def.ReloadSignal)})
	if err != nil {
		panic(err) // strings and ints always marshal
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// proc is the recorded main process, or nil if there is none.
func (r *record) proc() *proc {
	if r.PID <= 1 {
		return nil
	}
	return &proc{pid: r.PID, ticks: r.StartTicks, started: r.Started}
}

// unit is the recorded definition.
func (r *record) unit() Unit {
	return Unit{Name: r.Name, Command: r.Command, Env: r.Env, ReloadSignal: syscall.Signal(r.ReloadSignal)}
}

func (s *Supervisor) recordPath(name string) string {
	return filepath.Join(s.cfg.RunDir, name+".json")
}

func (s *Supervisor) pidPath(name string) string {
	return filepath.Join(s.cfg.RunDir, name+".pid")
}

// readRecord reads name's record; an error wrapping os.ErrNotExist when
// there is none.
func (s *Supervisor) readRecord(name string) (*record, error) {
	b, err := os.ReadFile(s.recordPath(name))
	if err != nil {
		return nil, fmt.Errorf("read record: %w", err)
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("read record %s: %w", s.recordPath(name), err)
	}
	if r.Name != name {
		return nil, fmt.Errorf("read record %s: it is for %q", s.recordPath(name), r.Name)
	}
	return &r, nil
}

// writeRecord writes u's record, and its pid file, atomically. u.mu is
// held.
func (s *Supervisor) writeRecord(u *unit) error {
	r := record{
		Name: u.name, Hash: u.hash,
		Command: u.def.Command, Argv: u.argv, Env: u.def.Env, ReloadSignal: int(u.def.ReloadSignal),
		Restarts: u.restarts, LastExit: u.lastExit,
	}
	if p := u.proc; p != nil {
		r.PID, r.StartTicks, r.Started = p.pid, p.ticks, p.started
	}
	b, err := json.MarshalIndent(&r, "", "  ")
	if err != nil {
		return fmt.Errorf("record %s: %w", u.name, err)
	}
	if err := writeAtomic(s.recordPath(u.name), append(b, '\n')); err != nil {
		return fmt.Errorf("record %s: %w", u.name, err)
	}
	pidPath := s.pidPath(u.name)
	if r.PID == 0 {
		err = os.Remove(pidPath)
		if errors.Is(err, os.ErrNotExist) {
			err = nil
		}
	} else {
		err = writeAtomic(pidPath, []byte(strconv.Itoa(r.PID)+"\n"))
	}
	if err != nil {
		return fmt.Errorf("record %s: %w", u.name, err)
	}
	return nil
}

// writeAtomic replaces path with data: readers see the old or the new
// file, never a part.
func writeAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// removeRecord removes name's record and pid file.
func (s *Supervisor) removeRecord(name string) error {
	var errs []error
	for _, p := range []string{s.recordPath(name), s.pidPath(name)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// recordedNames lists the units with a record in RunDir.
func (s *Supervisor) recordedNames() ([]string, error) {
	entries, err := os.ReadDir(s.cfg.RunDir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if ok && e.Type().IsRegular() && validName(name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names, nil
}
