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
	failures int
	// inflight are attempts begun and not yet judged.
	inflight    int
	last        time.Time
	lockedUntil time.Time
}

func newThrottle(free int, base, max time.Duration) *throttle {
	return &throttle{free: free, base: base, max: max, forget: 2 * max, capacity: 10000, strikes: map[string]*strikes{}}
}

// begin reserves an attempt of key: it returns how long key must wait
// instead, or 0, and then end must be called once the attempt is judged.
// Attempts still being checked count as failures to come, so concurrent
// guesses get no more checks than sequential ones: one more is begun only
// if the key would be unlocked were all of them to fail.
func (t *throttle) begin(key string, now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.current(key, now)
	if now.Before(s.lockedUntil) {
		return s.lockedUntil.Sub(now)
	}
	if s.inflight > 0 && s.failures+s.inflight > t.free {
		return t.base
	}
	s.inflight++
	s.last = now
	return 0
}

// end closes an attempt begun at now; a failed one counts.
func (t *throttle) end(key string, failed bool, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !failed && t.strikes[key] == nil {
		return // forgotten meanwhile: by a success, or evicted
	}
	s := t.current(key, now)
	if s.inflight > 0 {
		s.inflight--
	}
	if !failed {
		return
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

// current is key's record, made or reset as needed; t.mu is held.
func (t *throttle) current(key string, now time.Time) *strikes {
	s := t.strikes[key]
	if s == nil {
		if len(t.strikes) >= t.capacity {
			t.evict(now)
		}
		s = &strikes{last: now}
		t.strikes[key] = s
	} else if now.Sub(s.last) > t.forget && !now.Before(s.lockedUntil) {
		*s = strikes{inflight: s.inflight, last: now}
	}
	return s
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
		if s.inflight == 0 && now.Sub(s.last) > t.forget && !now.Before(s.lockedUntil) {
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
