package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/internal/vcsim"
)

// vcsimProcess runs the simulator as a process of its own (bin/vcsim from
// make build, else a fresh build) and returns how to reach it, as a real
// vCenter is reached. A test that destroys VMs while others are being
// reconfigured keeps vcsim out of its own process: govmomi v0.56.0's
// simulator races with itself there (UnregisterVM's RemoveReference
// against Datastore.resolve in ReconfigVM and DeleteDatastoreFile), and
// -race blames the test it runs in.
func vcsimProcess(t *testing.T) vcsim.Endpoint {
	t.Helper()
	bin := filepath.Join(os.Getenv("HARMONY_BIN"), "vcsim")
	if _, err := os.Stat(bin); os.Getenv("HARMONY_BIN") == "" || err != nil {
		bin = filepath.Join(t.TempDir(), "vcsim")
		if out, err := exec.Command("go", "build", "-o", bin, "./cmd/vcsim").CombinedOutput(); err != nil {
			t.Fatalf("build vcsim: %v\n%s", err, out)
		}
	}
	dir := t.TempDir()
	p := startProc(t, bin, nil, "-l", "127.0.0.1:0", "-dir", dir)
	file := filepath.Join(dir, "endpoint.json")
	deadline := time.Now().Add(time.Minute)
	for {
		ep, err := vcsim.ReadEndpoint(file)
		if err == nil {
			return ep
		}
		select {
		case <-p.done:
			t.Fatalf("vcsim exited; output:\n%s", p.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("vcsim wrote no endpoint within a minute (%v); output:\n%s", err, p.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
