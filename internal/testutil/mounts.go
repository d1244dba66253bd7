package testutil

import (
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/harmonykaas/harmony/internal/procfs"
)

// UnmountUnder detaches every mount at or under dir when the test ends,
// deepest first, before a t.TempDir's removal (cleanups run last-in,
// first-out): call it right after t.TempDir in a test whose code mounts.
// os.RemoveAll descends into a mount, so a directory of the machine's that
// the code under test bound there by mistake would otherwise be emptied.
func UnmountUnder(t *testing.T, dir string) {
	t.Helper()
	dir = filepath.Clean(dir)
	t.Cleanup(func() {
		ms, err := procfs.Mounts()
		if err != nil {
			t.Errorf("unmount under %s: %v", dir, err)
			return
		}
		for i := len(ms) - 1; i >= 0; i-- {
			p := ms[i].Point
			if p != dir && !strings.HasPrefix(p, dir+"/") {
				continue
			}
			if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v; %s is not removed", p, err, dir)
			}
		}
	})
}
