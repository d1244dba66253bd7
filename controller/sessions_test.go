package controller

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/controller/vsphere"
	"github.com/harmonykaas/harmony/internal/vcsim"
)

// Callers share one session per provider: racing callers (the image
// import, the cluster engine's passes) get the same one, and a replaced
// session stays logged in for the calls that still hold it. Once logging
// the replaced session out at once failed them with NotAuthenticated, and
// a clone's task wait on it hung.
func TestSessionsAreSharedAndRetiredLate(t *testing.T) {
	sim, err := vcsim.Start(vcsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	ctx := context.Background()
	p := sim.Provider("lab", testPool())
	ss := newSessions()
	ss.retireGrace = 200 * time.Millisecond
	t.Cleanup(ss.closeAll)

	got := make([]*vsphere.Session, 8)
	var wg sync.WaitGroup
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := ss.get(ctx, p)
			if err != nil {
				t.Error(err)
			}
			got[i] = s
		}()
	}
	wg.Wait()
	for _, s := range got[1:] {
		if s != got[0] {
			t.Fatal("racing callers got different sessions")
		}
	}

	// The provider changes: a new session, while the old one still works
	// for a while and is logged out after the grace.
	old := got[0]
	p.Folder = "harmony-other"
	fresh, err := ss.get(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if fresh == old {
		t.Fatal("a changed provider kept its session")
	}
	if !old.Active(ctx) {
		t.Error("the replaced session was logged out at once, under its users")
	}
	deadline := time.Now().Add(10 * time.Second)
	for old.Active(ctx) {
		if time.Now().After(deadline) {
			t.Fatal("the replaced session was never logged out")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !fresh.Active(ctx) {
		t.Error("the new session is not active")
	}
}
