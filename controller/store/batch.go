package store

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// batcher commits concurrent writes together, one commit and one fsync
// for all, as bbolt's DB.Batch does, but without its timer: a write made
// while no commit runs commits at once, and the writes that arrive while
// a commit runs share the next one. bbolt's Batch waits MaxBatchDelay
// (10 ms) before every batch, even on an idle store, and an enrollment
// paid that twice: its token's commit, then its audit entry's.
type batcher struct {
	db *bolt.DB

	mu      sync.Mutex
	pending []*batchCall
	running bool // a goroutine is committing pending
}

type batchCall struct {
	fn   func(*bolt.Tx) error
	done chan error
}

// maxBatch bounds one transaction, as bbolt's MaxBatchSize does.
const maxBatch = 1000

// errRunAlone tells a caller whose fn failed in a shared transaction to
// run it alone, in its own goroutine, so that its error (or its panic)
// is its own and the others are not held up.
var errRunAlone = errors.New("run alone")

// do runs fn in a read-write transaction that it may share with other
// concurrent calls. fn may run more than once, so it must be idempotent.
func (b *batcher) do(fn func(*bolt.Tx) error) error {
	c := &batchCall{fn: fn, done: make(chan error, 1)}
	b.mu.Lock()
	b.pending = append(b.pending, c)
	if !b.running {
		b.running = true
		go b.commitPending()
	}
	b.mu.Unlock()
	err := <-c.done
	if errors.Is(err, errRunAlone) {
		err = b.db.Update(fn)
	}
	return err
}

// commitPending commits what is pending until nothing is.
func (b *batcher) commitPending() {
	for {
		// Under load, the goroutines that are about to write run first
		// and join this commit: one yield, not a timer, keeps the commits
		// as few (and their CPU as low) as bbolt's 10 ms wait did.
		runtime.Gosched()
		b.mu.Lock()
		n := min(len(b.pending), maxBatch)
		if n == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		calls := b.pending[:n:n]
		b.pending = b.pending[n:]
		b.mu.Unlock()
		b.commit(calls)
	}
}

// commit runs calls in one transaction. A call that fails rolls it back
// for all; it is told to run alone and the others run again without it.
func (b *batcher) commit(calls []*batchCall) {
	for len(calls) > 0 {
		failed := -1
		err := b.db.Update(func(tx *bolt.Tx) error {
			for i, c := range calls {
				if err := callSafely(c.fn, tx); err != nil {
					failed = i
					return err
				}
			}
			return nil
		})
		if failed < 0 {
			// Committed, or the commit itself failed: the same answer
			// for every call in it.
			for _, c := range calls {
				c.done <- err
			}
			return
		}
		calls[failed].done <- errRunAlone
		calls = append(calls[:failed:failed], calls[failed+1:]...)
	}
}

// callSafely turns a panic in fn into an error, so that one call cannot
// stop the commits of the others; the caller then runs fn alone, and
// panics there.
func callSafely(fn func(*bolt.Tx) error, tx *bolt.Tx) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("batch function panicked: %v", p)
		}
	}()
	return fn(tx)
}
