package testutil

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestHeavyTestsTakeTurns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "turn.lock")
	holder, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(holder.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	got := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		t.Run("second", func(t *testing.T) {
			takeTurn(t, path)
			close(got)
		})
	}()
	select {
	case <-got:
		t.Fatal("took its turn while another test held it")
	case <-time.After(300 * time.Millisecond):
	}
	holder.Close()
	select {
	case <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("never got its turn after the other test ended")
	}
	<-ended
	// Its turn ended with it: the lock is free again.
	again, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if err := syscall.Flock(int(again.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Errorf("the lock is still held after the test that took it ended: %v", err)
	}
}
