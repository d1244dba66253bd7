package testutil

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Heavy makes the tests that boot several VM bodies with a real control
// plane (TestLab, TestBody) take turns across test packages, which go
// test runs in parallel: on a 2-core machine two of them at once starve
// each other's joins and boots into timeouts. It blocks until no other
// such test runs on the machine and holds the turn until t ends.
func Heavy(t testing.TB) {
	t.Helper()
	takeTurn(t, filepath.Join(os.TempDir(), "harmony-heavy-tests.lock"))
}

// takeTurn holds an exclusive flock on path from now until t ends.
func takeTurn(t testing.TB, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatalf("heavy-test lock: %v", err)
	}
	start := time.Now()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("heavy-test lock %s: %v", path, err)
	}
	if waited := time.Since(start); waited > time.Second {
		t.Logf("waited %s for another heavy test to end", waited.Round(time.Second))
	}
	t.Cleanup(func() { f.Close() }) // closing releases the lock
}
