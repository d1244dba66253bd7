package sdnotify

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// listen makes a real notification socket, as systemd's, at a path or,
// for a name starting with "@", in the abstract namespace.
func listen(t *testing.T, name string) (*net.UnixConn, string) {
	t.Helper()
	if name == "" {
		name = filepath.Join(t.TempDir(), "notify")
	}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, name
}

// next reads one datagram; the generous deadline only stops a broken
// test from hanging.
func next(t *testing.T, conn *net.UnixConn) string {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	return string(buf[:n])
}

func TestFromEnvironmentReadsAndClearsTheVariables(t *testing.T) {
	conn, path := listen(t, "")
	t.Setenv("NOTIFY_SOCKET", path)
	t.Setenv("WATCHDOG_USEC", "30000000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	n := FromEnvironment(nil)
	for _, k := range []string{"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"} {
		if _, ok := os.LookupEnv(k); ok {
			t.Errorf("%s is still set: the agent's children would inherit it", k)
		}
	}
	if !n.Enabled() || n.WatchdogInterval() != 30*time.Second {
		t.Fatalf("enabled %v, watchdog %v", n.Enabled(), n.WatchdogInterval())
	}
	if err := n.Status("enrolling"); err != nil {
		t.Fatal(err)
	}
	if got := next(t, conn); got != "STATUS=enrolling" {
		t.Fatalf("got %q", got)
	}
}

func TestReadyIsSentOnce(t *testing.T) {
	conn, path := listen(t, "")
	n := New(Config{Socket: path})
	if err := n.Ready("enrolled; node stack converged"); err != nil {
		t.Fatal(err)
	}
	if got := next(t, conn); got != "READY=1\nSTATUS=enrolled; node stack converged" {
		t.Fatalf("got %q", got)
	}
	// A second Ready (a new role, a re-enrollment) only updates the
	// status; datagrams arrive in order, so the next one tells.
	if err := n.Ready("again"); err != nil {
		t.Fatal(err)
	}
	if got := next(t, conn); got != "STATUS=again" {
		t.Fatalf("second Ready sent %q", got)
	}
	if err := n.Stopping(); err != nil {
		t.Fatal(err)
	}
	if got := next(t, conn); got != "STOPPING=1" {
		t.Fatalf("got %q", got)
	}
}

func TestStatusCannotSetOtherVariables(t *testing.T) {
	conn, path := listen(t, "")
	n := New(Config{Socket: path})
	if err := n.Status("role master\nREADY=1\r\nMAINPID=1"); err != nil {
		t.Fatal(err)
	}
	if got := next(t, conn); got != "STATUS=role master READY=1  MAINPID=1" {
		t.Fatalf("got %q", got)
	}
}

func TestAbstractSocket(t *testing.T) {
	b := make([]byte, 6)
	rand.Read(b)
	conn, name := listen(t, "@harmony-sdnotify-test-"+hex.EncodeToString(b))
	n := New(Config{Socket: name})
	if err := n.Status("abstract"); err != nil {
		t.Fatal(err)
	}
	if got := next(t, conn); got != "STATUS=abstract" {
		t.Fatalf("got %q", got)
	}
}

func TestOutsideSystemdNothingIsSent(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	n := FromEnvironment(nil)
	if n.Enabled() || n.WatchdogInterval() != 0 {
		t.Fatal("enabled without a socket")
	}
	if err := n.Ready("x"); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		n.Watchdog(context.Background(), nil)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Watchdog did not return with the watchdog off")
	}
	// A relative socket name is refused rather than resolved against the
	// working directory.
	t.Setenv("NOTIFY_SOCKET", "notify")
	if FromEnvironment(nil).Enabled() {
		t.Fatal("relative NOTIFY_SOCKET accepted")
	}
}

func TestWatchdogInterval(t *testing.T) {
	self := os.Getpid()
	for _, c := range []struct {
		usec, pid string
		want      time.Duration
		ok        bool
	}{
		{"2000000", "", 2 * time.Second, true},
		{"2000000", strconv.Itoa(self), 2 * time.Second, true},
		{"2000000", strconv.Itoa(self + 1), 0, false},
		{"2000000", "x", 0, false},
		{"0", "", 0, false},
		{"-5", "", 0, false},
		{"soon", "", 0, false},
	} {
		got, err := watchdogInterval(c.usec, c.pid, self)
		if got != c.want || (err == nil) != c.ok {
			t.Errorf("watchdogInterval(%q, %q) = %v, %v", c.usec, c.pid, got, err)
		}
	}
}

func TestWatchdogPingsWhileAlive(t *testing.T) {
	conn, path := listen(t, "")
	n := New(Config{Socket: path, WatchdogInterval: 200 * time.Millisecond})
	// The first three checks fail: no keep-alive may go out before the
	// fourth check passes.
	var checks atomic.Int64
	alive := func() error {
		if checks.Add(1) <= 3 {
			return errors.New("role watch stuck")
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		n.Watchdog(ctx, alive)
		close(done)
	}()
	for i := range 3 {
		if got := next(t, conn); got != "WATCHDOG=1" {
			t.Fatalf("keep-alive %d: %q", i, got)
		}
		if i == 0 && checks.Load() < 4 {
			t.Fatalf("a keep-alive went out after %d checks, while the agent was not alive", checks.Load())
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Watchdog did not stop with its context")
	}
}
