package datadisk

import (
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/harmonykaas/harmony/internal/procfs"
	"github.com/harmonykaas/harmony/internal/testutil"
)

func TestParseBind(t *testing.T) {
	good, err := ParseBind("controller:/var/lib/private/harmony-controller")
	if err != nil || good != (Bind{Dir: "controller", Target: "/var/lib/private/harmony-controller"}) {
		t.Errorf("a good bind: %+v, %v", good, err)
	}
	for in, want := range map[string]string{
		"controller":                "want DIR:TARGET",
		"../etc:/var/lib/x":         `DIR "../etc" must be one name`,
		"a/b:/var/lib/x":            `DIR "a/b" must be one name`,
		":/var/lib/x":               `DIR "" must be one name`,
		"Etcd:/var/lib/etcd":        `DIR "Etcd" must be one name`,
		"etcd:var/lib/etcd":         `TARGET "var/lib/etcd" must be a clean absolute path`,
		"etcd:/var/lib/../lib/etcd": `TARGET "/var/lib/../lib/etcd" must be a clean absolute path`,
		"etcd:/":                    `TARGET "/" must be a clean absolute path other than /`,
	} {
		if _, err := ParseBind(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseBind(%q): %v, want an error saying %q", in, err, want)
		}
	}
}

// The disk's directories are made once and mounted at their targets; a
// second run changes nothing; after a reimage (the targets gone with the
// system disk) the same data is back; and no disk, a target mounted from
// elsewhere, or a directory on the disk that is a symlink are refused.
func TestBindAll(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount")
	}
	log := slog.New(slog.NewTextHandler(&testutil.LogBuffer{}, nil))
	disk, system := t.TempDir(), t.TempDir()
	// Every mount the test and the code make is undone before these are
	// removed.
	testutil.UnmountUnder(t, disk)
	testutil.UnmountUnder(t, system)
	binds := []Bind{
		{Dir: "etcd", Target: filepath.Join(system, "var/lib/etcd")},
		{Dir: "controller", Target: filepath.Join(system, "var/lib/private/harmony-controller")},
	}
	unmountAll := func() {
		for _, b := range binds {
			unix.Unmount(b.Target, unix.MNT_DETACH)
		}
	}

	err := BindAll(disk, binds, log)
	if err == nil || !strings.Contains(err.Error(), "no data disk is mounted at "+disk) {
		t.Fatalf("without a disk: %v, want it refused", err)
	}
	if _, err := os.Stat(filepath.Join(disk, "etcd")); err == nil {
		t.Error("without a disk, a directory was made on the system disk")
	}

	if err := unix.Mount("tmpfs", disk, "tmpfs", 0, "mode=0700"); err != nil {
		t.Fatal(err)
	}
	// The package's directory is not empty; the disk's hides it.
	if err := os.MkdirAll(binds[0].Target, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(binds[0].Target, "from-the-package"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		if err := BindAll(disk, binds, log); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for _, b := range binds {
			if n := mountsAt(t, b.Target); n != 1 {
				t.Errorf("round %d: %d mounts at %s, want 1", round, n, b.Target)
			}
			if info, err := os.Stat(filepath.Join(disk, b.Dir)); err != nil || info.Mode().Perm() != 0o700 {
				t.Errorf("round %d: the disk's %s: %v, %v; want a 0700 directory", round, b.Dir, info, err)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(binds[0].Target, "from-the-package")); err == nil {
		t.Error("the system disk's file shows through the data disk's directory")
	}
	if err := os.WriteFile(filepath.Join(binds[1].Target, "ca.crt"), []byte("the CA"), 0o600); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(disk, "controller", "ca.crt")); string(data) != "the CA" {
		t.Fatalf("written at the target, the disk holds %q, %v", data, err)
	}

	// A reimage: a new system disk, the same data disk.
	unmountAll()
	if err := os.RemoveAll(filepath.Join(system, "var")); err != nil {
		t.Fatal(err)
	}
	if err := BindAll(disk, binds, log); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(binds[1].Target, "ca.crt")); string(data) != "the CA" {
		t.Errorf("after a reimage the controller's directory holds %q, %v", data, err)
	}
	if info, err := os.Stat(filepath.Dir(binds[1].Target)); err != nil || info.Mode().Perm() != 0o700 {
		t.Errorf("the target's parent: %v, %v; want 0700", info, err)
	}

	// A target something else is mounted at is not taken over: another
	// file system, or another directory of the same disk.
	if err := os.Mkdir(filepath.Join(disk, "other"), 0o700); err != nil {
		t.Fatal(err)
	}
	for i, from := range []string{t.TempDir(), filepath.Join(disk, "other")} {
		elsewhere := Bind{Dir: "backups", Target: filepath.Join(system, "backups", strconv.Itoa(i))}
		if err := os.MkdirAll(elsewhere.Target, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(from, elsewhere.Target, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		if err := BindAll(disk, []Bind{elsewhere}, log); err == nil || !strings.Contains(err.Error(), "is a mount point already") {
			t.Errorf("a target mounted from %s: %v, want it refused", from, err)
		}
	}

	// A directory on the disk that is a symlink is not followed. It points
	// at a directory of the test's own, never at the system's: were it
	// followed and mounted, removing the test's directories would remove
	// what it points at.
	pointedAt := t.TempDir()
	if err := os.Symlink(pointedAt, filepath.Join(disk, "linked")); err != nil {
		t.Fatal(err)
	}
	linked := Bind{Dir: "linked", Target: filepath.Join(system, "linked")}
	if err := BindAll(disk, []Bind{linked}, log); err == nil || !strings.Contains(err.Error(), "not a directory; left alone") {
		t.Errorf("a symlink on the disk: %v, want it refused", err)
	}
	if n := mountsAt(t, linked.Target); n != 0 {
		t.Errorf("the symlink was mounted at %s", linked.Target)
	}
}

func mountsAt(t *testing.T, dir string) int {
	t.Helper()
	ms, err := procfs.Mounts()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range ms {
		if m.Point == dir {
			n++
		}
	}
	return n
}
