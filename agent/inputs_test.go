package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A pass is kicked when an input file appears in a directory that did not
// exist when the watch began (flanneld makes /run/flannel), when it
// changes, and when it goes; a file beside it kicks nothing.
func TestWatchInputsKicks(t *testing.T) {
	root := t.TempDir()
	lease := filepath.Join(root, "run", "flannel", "subnet.env")
	kicks := make(chan struct{}, 16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go watchInputs(ctx, []string{lease}, func() { kicks <- struct{}{} }, slog.New(slog.DiscardHandler))
	time.Sleep(200 * time.Millisecond) // the watch is armed

	expect := func(what string) {
		t.Helper()
		select {
		case <-kicks:
		case <-time.After(10 * time.Second):
			t.Fatalf("no pass kicked after %s", what)
		}
		// Drain the events of the same change.
		for {
			select {
			case <-kicks:
			case <-time.After(300 * time.Millisecond):
				return
			}
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "run"), 0o755); err != nil {
		t.Fatal(err)
	}
	expect("its grandparent appeared")
	if err := os.MkdirAll(filepath.Dir(lease), 0o755); err != nil {
		t.Fatal(err)
	}
	expect("its directory appeared")
	if err := os.WriteFile(lease, []byte("FLANNEL_SUBNET=198.19.3.1/24\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	expect("the lease was written")
	if err := os.WriteFile(filepath.Join(filepath.Dir(lease), "other"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-kicks:
		t.Fatal("a file that is no input kicked a pass")
	case <-time.After(time.Second):
	}
	if err := os.Remove(lease); err != nil {
		t.Fatal(err)
	}
	expect("the lease was removed")
}
