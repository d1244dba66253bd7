package service

import (
	"context"
	"errors"
	"time"
)

// Pending is a Manager still being found: connecting to systemd takes a
// booting VM about a second under emulation, and nothing the agent does
// before its first node-stack pass (enrolling, fetching its role) needs
// it. Every call waits for the manager; Wait says why there is none.
type Pending struct {
	cancel context.CancelFunc
	done   chan struct{}
	m      Manager
	close  func() error
	err    error
}

var _ Manager = (*Pending)(nil)

// NewPending runs find in the background, bounded by timeout, and returns
// at once. find returns the manager and the function that releases it, as
// Detect does.
func NewPending(find func(ctx context.Context) (Manager, func() error, error), timeout time.Duration) *Pending {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	p := &Pending{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer cancel()
		p.m, p.close, p.err = find(ctx)
		if p.err == nil && p.m == nil {
			p.err = errors.New("no service manager found")
		}
	}()
	return p
}

// Wait returns the manager once it is found, or why none was, or ctx's
// error if ctx ends first.
func (p *Pending) Wait(ctx context.Context) (Manager, error) {
	select {
	case <-p.done:
		return p.m, p.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Kind implements Manager: the found manager's kind, "pending" until
// then.
func (p *Pending) Kind() string {
	select {
	case <-p.done:
		if p.m != nil {
			return p.m.Kind()
		}
		return "none"
	default:
		return "pending"
	}
}

// Ensure implements Manager.
func (p *Pending) Ensure(ctx context.Context, u Unit) (bool, error) {
	m, err := p.Wait(ctx)
	if err != nil {
		return false, err
	}
	return m.Ensure(ctx, u)
}

// Reload implements Manager.
func (p *Pending) Reload(ctx context.Context, name string) error {
	m, err := p.Wait(ctx)
	if err != nil {
		return err
	}
	return m.Reload(ctx, name)
}

// Restart implements Manager.
func (p *Pending) Restart(ctx context.Context, name string) error {
	m, err := p.Wait(ctx)
	if err != nil {
		return err
	}
	return m.Restart(ctx, name)
}

// Stop implements Manager.
func (p *Pending) Stop(ctx context.Context, name string) error {
	m, err := p.Wait(ctx)
	if err != nil {
		return err
	}
	return m.Stop(ctx, name)
}

// State implements Manager.
func (p *Pending) State(ctx context.Context, name string) (State, error) {
	m, err := p.Wait(ctx)
	if err != nil {
		return State{}, err
	}
	return m.State(ctx, name)
}

// Close gives up a search still under way and releases what it found;
// the units keep running.
func (p *Pending) Close() error {
	p.cancel()
	<-p.done
	if p.close == nil {
		return nil
	}
	return p.close()
}
