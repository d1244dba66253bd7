// Package servicetest has a service.Manager that records calls instead of
// running processes, for testing components' decisions (what to ensure,
// when to reload). The programs themselves are tested for real elsewhere.
package servicetest

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/harmonykaas/harmony/agent/service"
)

// Recorder is a service.Manager that keeps units in memory.
type Recorder struct {
	mu    sync.Mutex
	units map[string]service.Unit
	// Calls lists every call that changed something: "ensure keepalived"
	// (only when the definition changed), "reload haproxy", "stop ...".
	Calls     []string
	reloadErr error
}

// FailNextReload makes the next Reload return err (after recording it).
func (r *Recorder) FailNextReload(err error) {
	r.mu.Lock()
	r.reloadErr = err
	r.mu.Unlock()
}

var _ service.Manager = (*Recorder)(nil)

// New returns an empty recorder.
func New() *Recorder { return &Recorder{units: map[string]service.Unit{}} }

func (r *Recorder) Kind() string { return "recorder" }

func (r *Recorder) Ensure(_ context.Context, u service.Unit) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old, ok := r.units[u.Name]
	if ok && slices.Equal(old.Command, u.Command) && slices.Equal(old.Env, u.Env) && old.ReloadSignal == u.ReloadSignal {
		return false, nil
	}
	r.units[u.Name] = u
	r.Calls = append(r.Calls, "ensure "+u.Name)
	return true, nil
}

func (r *Recorder) Reload(_ context.Context, name string) error {
	if err := r.record("reload", name); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	err := r.reloadErr
	r.reloadErr = nil
	return err
}

func (r *Recorder) Restart(_ context.Context, name string) error { return r.record("restart", name) }

func (r *Recorder) Stop(_ context.Context, name string) error {
	if err := r.record("stop", name); err != nil {
		return err
	}
	r.mu.Lock()
	delete(r.units, name)
	r.mu.Unlock()
	return nil
}

func (r *Recorder) State(_ context.Context, name string) (service.State, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.units[name]; !ok {
		return service.State{}, fmt.Errorf("%s: %w", name, service.ErrUnknownUnit)
	}
	return service.State{Running: true, PID: 1}, nil
}

func (r *Recorder) record(verb, name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.units[name]; !ok {
		return fmt.Errorf("%s: %w", name, service.ErrUnknownUnit)
	}
	r.Calls = append(r.Calls, verb+" "+name)
	return nil
}

// Unit returns the unit last ensured under name.
func (r *Recorder) Unit(name string) (service.Unit, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	u, ok := r.units[name]
	return u, ok
}

// TakeCalls returns the calls so far and forgets them.
func (r *Recorder) TakeCalls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	calls := r.Calls
	r.Calls = nil
	return calls
}
