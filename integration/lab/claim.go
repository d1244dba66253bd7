package lab

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"syscall"
)

// ErrBusy says another lab up or down is working on the same state
// directory.
var ErrBusy = errors.New("another harmonyctl lab up or down is working on this state directory; wait for it to end, or stop it")

// claim makes sure that one lab up or down at a time acts on stateDir: it
// binds an abstract unix socket named after the lab's ID, which the kernel
// frees when this process ends, however it ends, so no lock file is left
// behind or taken away with the state directory. release frees it.
func claim(stateDir string) (release func(), err error) {
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		return nil, fmt.Errorf("state dir %q: %w", stateDir, err)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: "@harmony-lab-" + labID(abs), Net: "unix"})
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("%s: %w", abs, ErrBusy)
	}
	if err != nil {
		return nil, fmt.Errorf("claim the state directory %s: %w", abs, err)
	}
	return func() { l.Close() }, nil
}
