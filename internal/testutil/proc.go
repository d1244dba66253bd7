package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Proc is a binary a test runs, whose combined output it can search.
type Proc struct {
	Cmd  *exec.Cmd
	Out  *LogBuffer
	Done chan struct{} // closed when the process has exited
}

// StartProc starts bin with args, the test's environment plus env, and
// stops it when the test ends.
func StartProc(t testing.TB, bin string, env []string, args ...string) *Proc {
	t.Helper()
	p := &Proc{Out: &LogBuffer{}, Done: make(chan struct{})}
	p.Cmd = exec.Command(bin, args...)
	p.Cmd.Env = append(os.Environ(), env...)
	p.Cmd.Stdout, p.Cmd.Stderr = p.Out, p.Out
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() {
		p.Cmd.Wait()
		close(p.Done)
	}()
	t.Cleanup(func() { p.Stop(t) })
	return p
}

// Stop sends SIGTERM and waits; a process still running after 15 s is
// killed and fails the test, since each binary promises to stop on it.
func (p *Proc) Stop(t testing.TB) {
	select {
	case <-p.Done:
		return
	default:
	}
	p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.Done:
	case <-time.After(15 * time.Second):
		p.Cmd.Process.Kill()
		<-p.Done
		t.Errorf("%s did not stop on SIGTERM", p.Cmd.Path)
	}
}

// WaitLog waits up to 30 s for a line of output that holds every one of
// parts, and returns it; the test fails if the process exits first.
func (p *Proc) WaitLog(t testing.TB, parts ...string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, line := range strings.Split(p.Out.String(), "\n") {
			all := true
			for _, part := range parts {
				all = all && strings.Contains(line, part)
			}
			if all {
				return line
			}
		}
		select {
		case <-p.Done:
			t.Fatalf("%s exited; output:\n%s", filepath.Base(p.Cmd.Path), p.Out.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("no line of %s has %q; output:\n%s", filepath.Base(p.Cmd.Path), parts, p.Out.String())
	return ""
}

// Binary is the program name of package pkg: $HARMONY_BIN's (make build,
// make test), else a fresh build for the test.
func Binary(t testing.TB, name, pkg string) string {
	t.Helper()
	if dir := os.Getenv("HARMONY_BIN"); dir != "" {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return filepath.Join(dir, name)
		}
	}
	bin := filepath.Join(t.TempDir(), name)
	if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, out)
	}
	return bin
}
