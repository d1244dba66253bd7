package controller

import "sync"

// hub wakes the role watches of a node when its role changes. A watcher
// subscribes before it reads the store, so a change committed between the
// read and the wait still wakes it.
type hub struct {
	mu      sync.Mutex
	waiting map[string]chan struct{}
}

func newHub() *hub { return &hub{waiting: map[string]chan struct{}{}} }

// subscribe returns a channel that is closed at the node's next change.
func (h *hub) subscribe(node string) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch, ok := h.waiting[node]
	if !ok {
		ch = make(chan struct{})
		h.waiting[node] = ch
	}
	return ch
}

// notify wakes every watcher of the node.
func (h *hub) notify(nodes ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range nodes {
		if ch, ok := h.waiting[n]; ok {
			close(ch)
			delete(h.waiting, n)
		}
	}
}
