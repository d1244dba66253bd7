package access

import (
	"sync"
	"time"
)

// throttle counts failed logins per key (a user name, a source address).
// After free failures each further one locks the key for twice as long
// as the last, from base up to max. A locked key is refused without its
// password being checked, so the lock also holds for the right password,
// and guessing costs the controller nothing while it lasts.
type throttle struct {
	free      int
	base, max time.Duration
	// forget drops a key this long after its last failure, once unlocked.
	forget time.Duration
	// capacity bounds the keys kept: names an attacker makes up must not
	// grow the controller's memory without end.
	capacity int

	mu      sync.Mutex
	strikes map[string]*strikes
}

type strikes struct {
	failures    int
	last        time.Time
	lockedUntil time.Time
}

func newThrottle(free int, base, max time.Duration) *throttle {
	return &throttle{free: free, base: base, max: max, forget: 2 * max, capacity: 10000, strikes: map[string]*strikes{}}
}

// wait is how long key must still wait before it may try; 0 if it may.
func (t *throttle) wait(key string, now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.strikes[key]
	if s == nil || !now.Before(s.lockedUntil) {
		return 0
	}
	return s.lockedUntil.Sub(now)
}

// fail records a failed attempt of key.
func (t *throttle) fail(key string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.strikes[key]
	if s == nil {
		if len(t.strikes) >= t.capacity {
			t.evict(now)
		}
		s = &strikes{}
		t.strikes[key] = s
	} else if now.Sub(s.last) > t.forget && !now.Before(s.lockedUntil) {
		*s = strikes{}
	}
	s.failures++
	s.last = now
	if over := s.failures - t.free; over > 0 {
		lock := t.max
		if over <= 30 {
			lock = min(t.base<<(over-1), t.max)
		}
		s.lockedUntil = now.Add(lock)
	}
}

// succeed forgets key's failures.
func (t *throttle) succeed(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.strikes, key)
}

// evict makes room: forgotten keys first, else the one idle longest.
func (t *throttle) evict(now time.Time) {
	var oldest string
	for k, s := range t.strikes {
		if now.Sub(s.last) > t.forget && !now.Before(s.lockedUntil) {
			delete(t.strikes, k)
			continue
		}
		if oldest == "" || s.last.Before(t.strikes[oldest].last) {
			oldest = k
		}
	}
	if len(t.strikes) >= t.capacity && oldest != "" {
		delete(t.strikes, oldest)
	}
}
