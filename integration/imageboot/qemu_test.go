package imageboot

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// console is a VM whose console the test writes, with no QEMU behind it:
// what waitSystemd reads is only the log.
func console(t *testing.T, stall time.Duration) (*VM, func(string)) {
	t.Helper()
	log := filepath.Join(t.TempDir(), "serial.log")
	if err := os.WriteFile(log, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	vm := &VM{opts: Options{SerialLog: log, EarlyStall: stall}, started: time.Now(), done: make(chan struct{})}
	write := func(line string) {
		f, err := os.OpenFile(log, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		if _, err := f.WriteString(line + "\r\n"); err != nil {
			t.Error(err)
		}
	}
	return vm, write
}

func TestWaitSystemdStalled(t *testing.T) {
	vm, write := console(t, 300*time.Millisecond)
	write("[    0.000000] Linux version 6.1.0-40-amd64")
	write("[    1.842302] IP idents hash table entries: 32768")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	early, err := vm.waitSystemd(ctx)
	if !errors.Is(err, errStalled) {
		t.Fatalf("a console silent before systemd: %v, want a stall", err)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("a stall declared after %s, before the console had been silent for 300 ms", took)
	}
	if early.Kernel == 0 || early.Systemd != 0 {
		t.Errorf("early boot %+v: want the kernel's banner seen, systemd's not", early)
	}
}

// A console that keeps growing is not stalled, however long the boot
// takes: here four times the stall limit, in steps under it.
func TestWaitSystemdSlowButGrowing(t *testing.T) {
	vm, write := console(t, 300*time.Millisecond)
	write("[    0.000000] Linux version 6.1.0-40-amd64")
	go func() {
		for range 12 {
			time.Sleep(100 * time.Millisecond)
			write("[    1.000000] still booting")
		}
		write("Welcome to Debian GNU/Linux 12 (bookworm)!")
	}()
	early, err := vm.waitSystemd(context.Background())
	if err != nil {
		t.Fatalf("a slow, growing console: %v", err)
	}
	if early.Kernel == 0 || early.Systemd < early.Kernel || early.Systemd < time.Second {
		t.Errorf("early boot %+v: want the kernel's banner, then systemd's after the 1.2 s of lines", early)
	}
}

// QEMU exiting is a failure of its own, not a stall to boot again.
func TestWaitSystemdExited(t *testing.T) {
	vm, write := console(t, time.Minute)
	write("[    0.000000] Linux version 6.1.0-40-amd64")
	vm.err = errors.New("exit status 1")
	close(vm.done)
	if _, err := vm.waitSystemd(context.Background()); err == nil || errors.Is(err, errStalled) {
		t.Fatalf("QEMU gone before systemd: %v, want an error that is not a stall", err)
	}
}
