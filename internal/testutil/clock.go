package testutil

import (
	"sync"
	"time"
)

// Clock is a test clock, so that expiry can be tested without sleeping:
// the wall clock moved by Advance, or, with Base set, a stopped clock at
// Base moved only by Advance.
type Clock struct {
	Base time.Time

	mu     sync.Mutex
	offset time.Duration
}

// Now is the clock's time; pass it as a Now func.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.Base.IsZero() {
		return c.Base.Add(c.offset)
	}
	return time.Now().Add(c.offset)
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.offset += d
	c.mu.Unlock()
}
