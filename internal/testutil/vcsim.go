package testutil

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/internal/vcsim"
)

// VCSimProcess runs the simulator as a process of its own (bin/vcsim of
// make build, from $HARMONY_BIN, else a fresh build) with args, and
// returns how to reach it, as a real vCenter is reached; it stops with
// the test. A test keeps vcsim out of its own process where govmomi
// v0.56.0's simulator races with itself: -race blames the test it runs
// in, for the simulator's own data races.
func VCSimProcess(t testing.TB, args ...string) vcsim.Endpoint {
	t.Helper()
	bin := Binary(t, "vcsim", "github.com/harmonykaas/harmony/integration/cmd/vcsim")
	dir := t.TempDir()
	p := StartProc(t, bin, nil, append([]string{"-l", "127.0.0.1:0", "-dir", dir}, args...)...)
	file := filepath.Join(dir, "endpoint.json")
	deadline := time.Now().Add(time.Minute)
	for {
		ep, err := vcsim.ReadEndpoint(file)
		if err == nil {
			return ep
		}
		select {
		case <-p.Done:
			t.Fatalf("vcsim exited; output:\n%s", p.Out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("vcsim wrote no endpoint within a minute (%v); output:\n%s", err, p.Out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
