// Package reconcile turns a role into a node. Each part of the node stack
// (keepalived, HAProxy, etcd, kubeadm, the CNI) is one Component in its own
// package under agent/components; each is level-triggered and idempotent:
// given the same role and host it changes nothing and restarts nothing.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/harmonykaas/harmony/agent/service"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// Component phases.
const (
	// PhaseDisabled: the component has no part in this node's role.
	PhaseDisabled = "Disabled"
	// PhaseConverged: the host matches the role.
	PhaseConverged = "Converged"
	// PhaseFailed: the component could not converge, for example because
	// its checker refused the rendered config; what ran before keeps
	// running.
	PhaseFailed = "Failed"
	// PhaseRefused: the component cannot converge on this node whatever
	// is retried (the image lacks what the role asks for); see Refuse.
	PhaseRefused = v1.ComponentRefused
	// PhaseLeaving: the role says Leave and the component has not left
	// yet (an earlier step of the leave sequence has not finished).
	PhaseLeaving = "Leaving"
	// PhaseLeft: the role says Leave and the component's part in the
	// cluster is undone.
	PhaseLeft = "Left"
)

// Host is what a component may act on.
type Host struct {
	// Root prefixes every path a component writes: "/" on a VM, a per-host
	// directory in the lab.
	Root string
	// Services runs the daemons.
	Services service.Manager
	Facts    Facts
	Log      *slog.Logger
}

// Path maps an absolute path of the node (/etc/haproxy/haproxy.cfg) under
// the host's root.
func (h *Host) Path(p string) string { return filepath.Join(h.Root, p) }

// Facts are what the agent observes of the node.
type Facts struct {
	// Interface is the primary interface, the one keepalived uses.
	Interface string
	// Addresses are the primary interface's addresses.
	Addresses []netip.Addr
}

// Status is the outcome of one pass of one component.
type Status struct {
	Component string
	Phase     string
	Healthy   bool
	Message   string
	// Actions says what this pass changed ("wrote /etc/haproxy/haproxy.cfg",
	// "reloaded haproxy"); empty when the host already matched.
	Actions []string
	// Units names the service units the component runs on this node; the
	// runner exports their restart counts.
	Units []string
}

// Failed is the status with the pass failed: err says why. An error
// that is, or wraps, a Refuse gives PhaseRefused.
func (s Status) Failed(err error) Status {
	s.Phase, s.Healthy, s.Message = PhaseFailed, false, err.Error()
	if errors.As(err, new(refusal)) {
		s.Phase = PhaseRefused
	}
	return s
}

// Refuse marks err as one no retry on this node changes: the node's image
// lacks what the role asks for. Failed reports it as PhaseRefused, which
// tells a controller replacing the VM to roll back now rather than wait.
// Only what the image fixes qualifies: nothing that a daemon starting, the
// network, a peer or the controller could still change.
func Refuse(err error) error { return refusal{err} }

type refusal struct{ err error }

func (r refusal) Error() string { return r.err.Error() }
func (r refusal) Unwrap() error { return r.err }

// Component converges one part of the node stack. A component that also
// implements prometheus.Collector has its metrics registered by the
// runner.
type Component interface {
	Name() string
	// Reconcile makes the host match the role, and reports. It must be
	// idempotent, and must not restart or reload a service whose inputs
	// did not change.
	Reconcile(ctx context.Context, host *Host, role *v1.Role) Status
}

// Leaver is a part of the node stack with something to undo when the node
// leaves its cluster (a role with Leave set). The runner calls Leave, never
// Reconcile, while the role says Leave, and never Leave otherwise. Leave
// must be idempotent: once its part is undone it reports PhaseLeft again
// without acting, also in a new agent process (what it did is on the host,
// not in memory).
type Leaver interface {
	Name() string
	Leave(ctx context.Context, host *Host, role *v1.Role) Status
}

// LeftMarker records on disk that a component has left the cluster, and
// what it did, for the steps that cannot tell it from the host alone (a
// removed etcd member, a reset that took its own traces): a new agent
// process reports Left again without acting.
type LeftMarker struct{ path string }

// LeftMarker returns the marker of the named component.
func (h *Host) LeftMarker(component string) LeftMarker {
	return LeftMarker{path: h.Path(filepath.Join("/var/lib/harmony/left", component))}
}

// Set records that the component has left; note says what it did.
func (m LeftMarker) Set(note string) error {
	if err := os.MkdirAll(filepath.Dir(m.path), 0o700); err != nil {
		return fmt.Errorf("record leaving: %w", err)
	}
	if err := os.WriteFile(m.path, []byte(note), 0o600); err != nil {
		return fmt.Errorf("record leaving: %w", err)
	}
	return nil
}

// Left reports whether the component has left, and the note it left.
func (m LeftMarker) Left() (string, bool) {
	b, err := os.ReadFile(m.path)
	if err != nil {
		return "", false
	}
	return string(b), true
}

// RunUnit makes u run and read its current files. filesChanged says the
// component just rewrote them: a reload is then owed, recorded on disk,
// until the unit has reloaded or started afresh (which reads them anyway).
// It returns what it did, as Status.Actions.
func (h *Host) RunUnit(ctx context.Context, u service.Unit, filesChanged bool) ([]string, error) {
	pending := h.ReloadMarker(u.Name)
	if filesChanged {
		if err := pending.Set(); err != nil {
			return nil, err
		}
	}
	started, err := h.Services.Ensure(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", u.Name, err)
	}
	switch {
	case started:
		if err := pending.Clear(); err != nil {
			return nil, err
		}
		return []string{"started " + u.Name}, nil
	case pending.Pending():
		if err := h.Services.Reload(ctx, u.Name); err != nil {
			return nil, fmt.Errorf("reload %s: %w", u.Name, err)
		}
		if err := pending.Clear(); err != nil {
			return nil, err
		}
		return []string{"reloaded " + u.Name}, nil
	}
	return nil, nil
}

// OweReload is files.WriteOwing's owe for the named units: it records
// their reloads as owed, for RunUnit to do.
func (h *Host) OweReload(units ...string) func() error {
	return func() error {
		for _, u := range units {
			if err := h.ReloadMarker(u).Set(); err != nil {
				return err
			}
		}
		return nil
	}
}

// StopUnit stops a unit this node no longer needs, asking the manager
// rather than remembering, so that a unit left by an earlier agent is
// stopped too, and drops any reload owed. A unit that is not there is not
// an error. It returns what it did, as Status.Actions.
func (h *Host) StopUnit(ctx context.Context, name string) ([]string, error) {
	if err := h.ReloadMarker(name).Clear(); err != nil {
		return nil, err
	}
	switch err := h.Services.Stop(ctx, name); {
	case errors.Is(err, service.ErrUnknownUnit):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("stop %s: %w", name, err)
	}
	return []string{"stopped " + name}, nil
}

// ReloadMarker records on disk that a service owes a reload: set once its
// files have changed, cleared once it has reloaded or freshly started.
// Services outlive the agent, so a marker kept only in memory would be lost
// if the agent died between writing the files and reloading.
type ReloadMarker struct{ path string }

// ReloadMarkerDir holds one marker file per unit that owes a reload.
const ReloadMarkerDir = "/var/lib/harmony/reload-pending"

// ReloadMarker returns the marker of the named unit.
func (h *Host) ReloadMarker(unit string) ReloadMarker {
	return ReloadMarker{path: h.Path(filepath.Join(ReloadMarkerDir, unit))}
}

// Set records that a reload is owed.
func (m ReloadMarker) Set() error {
	if err := os.MkdirAll(filepath.Dir(m.path), 0o700); err != nil {
		return fmt.Errorf("mark reload: %w", err)
	}
	if err := os.WriteFile(m.path, nil, 0o600); err != nil {
		return fmt.Errorf("mark reload: %w", err)
	}
	return nil
}

// Pending reports whether a reload is owed.
func (m ReloadMarker) Pending() bool {
	_, err := os.Stat(m.path)
	return err == nil
}

// Clear records that the reload happened.
func (m ReloadMarker) Clear() error {
	if err := os.Remove(m.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("clear reload mark: %w", err)
	}
	return nil
}
