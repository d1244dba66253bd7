// Package testutil holds the helpers the project's tests share. Only tests
// import it.
package testutil

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

// LogBuffer is a goroutine-safe buffer for a logger's output that tests
// can read while the code under test writes.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Count is how many times substr occurs in the log.
func (b *LogBuffer) Count(substr string) int { return strings.Count(b.String(), substr) }

// Eventually polls cond until it holds, failing the test after timeout.
// The bounds are generous on purpose: these tests check correctness, and
// speed is measured in make bench. explain runs before the failure, to
// show what the test saw.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool, explain ...func()) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			for _, e := range explain {
				e()
			}
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
