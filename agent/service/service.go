// Package service runs the node stack's daemons (keepalived, HAProxy,
// etcd, kube-apiserver, ...) behind one small interface, with two
// implementations: systemd over D-Bus on a real VM, and a process
// supervisor for hosts without systemd (the lab, containers).
package service

import (
	"context"
	"errors"
	"syscall"
	"time"
)

// Unit is a daemon the agent runs. Its definition is all that matters for
// change detection: the same Unit twice changes nothing.
type Unit struct {
	// Name is short and stable, such as "keepalived"; it names the systemd
	// unit (harmony-<name>.service) or the supervised process.
	Name string
	// Command is the argv; Command[0] is an absolute path.
	Command []string
	// Env adds KEY=VALUE pairs to a minimal environment.
	Env []string
	// ReloadSignal, when non-zero, makes Reload signal the main process
	// instead of restarting it: keepalived reloads on SIGHUP, HAProxy's
	// master on SIGUSR2. etcd has no reload (SIGHUP ends it), so it has
	// none.
	ReloadSignal syscall.Signal
}

// State is what a manager observes of a unit.
type State struct {
	// Running is true while the main process is alive.
	Running bool
	PID     int
	// Started is when the current main process started.
	Started time.Time
	// Restarts counts restarts after a crash or a changed definition
	// since the unit was first started by this manager.
	Restarts int
	// LastExit describes the last exit ("exit status 1", "signal: killed").
	LastExit string
}

// ErrUnknownUnit is returned for a unit the manager was never given.
var ErrUnknownUnit = errors.New("unknown unit")

// Manager runs units.
type Manager interface {
	// Kind names the implementation ("systemd", "supervisor") for logs.
	Kind() string
	// Ensure makes u defined and running. If it runs with the same
	// definition, nothing happens and changed is false; a different
	// definition restarts it.
	Ensure(ctx context.Context, u Unit) (changed bool, err error)
	// Reload asks a running unit to re-read its configuration: its
	// ReloadSignal, or a restart when it has none.
	Reload(ctx context.Context, name string) error
	// Restart stops and starts a unit.
	Restart(ctx context.Context, name string) error
	// Stop stops a unit and forgets it.
	Stop(ctx context.Context, name string) error
	// State observes a unit.
	State(ctx context.Context, name string) (State, error)
}
