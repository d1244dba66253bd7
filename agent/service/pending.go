package service

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Pending is a Manager still being found: connecting to systemd took a
// booting VM up to 0.8 s under emulation, and nothing the agent does
// before its first node-stack pass (enrolling, fetching its role) needs
// it. Every call waits for the manager; Wait says why there is none.
type Pending struct {
	cancel  context.CancelFunc
	done    chan struct{}
	m       Manager
	release func() error
	err     error

	closeOnce sync.Once
	closeErr  error
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
		p.m, p.release, p.err = find(ctx)
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
func (p *Pending) Ensure(ctx context.Context, u Unit) (changed bool, err error) {
	err = p.with(ctx, func(m Manager) (err error) {
		changed, err = m.Ensure(ctx, u)
		return err
	})
	return changed, err
}

// Reload implements Manager.
func (p *Pending) Reload(ctx context.Context, name string) error {
	return p.with(ctx, func(m Manager) error { return m.Reload(ctx, name) })
}

// Restart implements Manager.
func (p *Pending) Restart(ctx context.Context, name string) error {
	return p.with(ctx, func(m Manager) error { return m.Restart(ctx, name) })
}

// Stop implements Manager.
func (p *Pending) Stop(ctx context.Context, name string) error {
	return p.with(ctx, func(m Manager) error { return m.Stop(ctx, name) })
}

// State implements Manager.
func (p *Pending) State(ctx context.Context, name string) (st State, err error) {
	err = p.with(ctx, func(m Manager) (err error) {
		st, err = m.State(ctx, name)
		return err
	})
	return st, err
}

// with calls f with the manager once it is found.
func (p *Pending) with(ctx context.Context, f func(Manager) error) error {
	m, err := p.Wait(ctx)
	if err != nil {
		return err
	}
	return f(m)
}

// Close gives up a search still under way and releases what it found,
// once however often it is called; the units keep running.
func (p *Pending) Close() error {
	p.cancel()
	<-p.done
	p.closeOnce.Do(func() {
		if p.release != nil {
			p.closeErr = p.release()
		}
	})
	return p.closeErr
}
