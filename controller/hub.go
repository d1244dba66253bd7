package controller

import "sync"

// hub wakes the watches of a key (a node's name, "op:ID", "cluster:NAME")
// when what it names changes. A watcher subscribes before it reads the
// store, so a change committed between the read and the wait still wakes
// it, and it cancels when it stops waiting, so a key nobody watches any
// more (a finished operation, a deleted node) leaves nothing behind.
type hub struct {
	mu      sync.Mutex
	waiting map[string]*waiters
}

type waiters struct {
	ch chan struct{}
	n  int
}

func newHub() *hub { return &hub{waiting: map[string]*waiters{}} }

// subscribe returns a channel that is closed at the key's next change, and
// a cancel function to call when the caller stops waiting on it.
func (h *hub) subscribe(key string) (<-chan struct{}, func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w, ok := h.waiting[key]
	if !ok {
		w = &waiters{ch: make(chan struct{})}
		h.waiting[key] = w
	}
	w.n++
	var once sync.Once
	return w.ch, func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			w.n--
			// Only the current entry: a notify may have replaced it.
			if w.n == 0 && h.waiting[key] == w {
				delete(h.waiting, key)
			}
		})
	}
}

// notify wakes every watcher of the keys.
func (h *hub) notify(keys ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, k := range keys {
		if w, ok := h.waiting[k]; ok {
			close(w.ch)
			delete(h.waiting, k)
		}
	}
}

// size is the number of keys with watchers (for tests).
func (h *hub) size() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.waiting)
}
