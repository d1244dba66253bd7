package store

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/internal/testutil"
)

// batchRun holds a store's commits open: the first Batch call blocks
// inside its transaction until release, so that the calls started after
// it queue for the next commit.
type batchRun struct {
	s       *testStore
	release chan struct{}
	first   chan error

	mu        sync.Mutex
	committed map[string]int // key → the transaction that committed it
}

func holdCommits(t *testing.T) *batchRun {
	t.Helper()
	r := &batchRun{s: openTestStore(t), release: make(chan struct{}), first: make(chan error, 1), committed: map[string]int{}}
	entered := make(chan struct{})
	go func() {
		r.first <- r.s.Batch(func(tx *Tx) error {
			close(entered)
			<-r.release
			return r.put(tx, "first")
		})
	}()
	<-entered
	return r
}

// put writes key and notes which transaction committed it.
func (r *batchRun) put(tx *Tx, key string) error {
	id := tx.tx.ID()
	tx.OnCommit(func() {
		r.mu.Lock()
		r.committed[key] = id
		r.mu.Unlock()
	})
	return tx.Put(Settings, key, key)
}

// waitPending waits until n calls queue behind the held commit.
func (r *batchRun) waitPending(t *testing.T, n int) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, fmt.Sprintf("%d calls pending", n), func() bool {
		r.s.batch.mu.Lock()
		defer r.s.batch.mu.Unlock()
		return len(r.s.batch.pending) == n
	})
}

func (r *batchRun) has(t *testing.T, key string) bool {
	t.Helper()
	var found bool
	if err := r.s.View(func(tx *Tx) error { found = tx.Has(Settings, key); return nil }); err != nil {
		t.Fatal(err)
	}
	return found
}

// The writes that arrive while a commit runs share the next one: one
// transaction, one fsync.
func TestBatchSharesTheNextCommitAmongWritesThatArriveDuringOne(t *testing.T) {
	r := holdCommits(t)
	const n = 50
	errs := make(chan error, n)
	for i := range n {
		key := fmt.Sprintf("k%02d", i)
		go func() { errs <- r.s.Batch(func(tx *Tx) error { return r.put(tx, key) }) }()
	}
	r.waitPending(t, n)
	close(r.release)
	if err := <-r.first; err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	txs := map[int]bool{}
	for i := range n {
		id, ok := r.committed[fmt.Sprintf("k%02d", i)]
		if !ok {
			t.Fatalf("k%02d not committed", i)
		}
		txs[id] = true
	}
	if len(txs) != 1 {
		t.Errorf("%d writes that queued during one commit took %d commits, want 1", n, len(txs))
	}
	if txs[r.committed["first"]] {
		t.Error("the queued writes joined the commit that was already running")
	}
}

// A write on an idle store commits at once. bbolt's own Batch would wait
// MaxBatchDelay first; set to an hour here, it must not be what runs.
func TestBatchOnAnIdleStoreDoesNotWaitForATimer(t *testing.T) {
	s := openTestStore(t)
	s.db.MaxBatchDelay = time.Hour
	s.db.MaxBatchSize = 1 << 20
	done := make(chan error, 1)
	go func() { done <- s.Batch(func(tx *Tx) error { return tx.Put(Settings, "k", "v") }) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a write on an idle store waited for a batch timer")
	}
}

// One failing write gets its own error; the others in its transaction
// commit without it, and nothing of the failed one is kept.
func TestBatchFailureIsTheFailingCallersAlone(t *testing.T) {
	r := holdCommits(t)
	refused := errors.New("refused")
	errs := make(chan error, 3)
	for i, key := range []string{"a", "bad", "b"} {
		go func() {
			errs <- r.s.Batch(func(tx *Tx) error {
				if err := r.put(tx, key); err != nil {
					return err
				}
				if key == "bad" {
					return refused
				}
				return nil
			})
		}()
		r.waitPending(t, i+1)
	}
	close(r.release)
	<-r.first
	var got []error
	for range 3 {
		got = append(got, <-errs)
	}
	var nRefused, nOK int
	for _, err := range got {
		switch {
		case errors.Is(err, refused):
			nRefused++
		case err == nil:
			nOK++
		default:
			t.Errorf("unexpected error %v", err)
		}
	}
	if nRefused != 1 || nOK != 2 {
		t.Errorf("errors %v: want the failing call's own error once and two successes", got)
	}
	for key, want := range map[string]bool{"a": true, "b": true, "bad": false} {
		if r.has(t, key) != want {
			t.Errorf("%s stored: %v, want %v", key, !want, want)
		}
	}
}

// A panicking write panics in its own caller's goroutine; the others
// commit.
func TestBatchPanicStaysWithItsCaller(t *testing.T) {
	r := holdCommits(t)
	panicked := make(chan any, 1)
	ok := make(chan error, 1)
	go func() {
		defer func() { panicked <- recover() }()
		r.s.Batch(func(*Tx) error { panic("boom") })
	}()
	r.waitPending(t, 1)
	go func() { ok <- r.s.Batch(func(tx *Tx) error { return r.put(tx, "other") }) }()
	r.waitPending(t, 2)
	close(r.release)
	<-r.first
	if p := <-panicked; p != "boom" {
		t.Errorf("the panicking caller recovered %v, want its own panic", p)
	}
	if err := <-ok; err != nil {
		t.Fatal(err)
	}
	if !r.has(t, "other") {
		t.Error("the other write was lost with the panicking one")
	}
}
