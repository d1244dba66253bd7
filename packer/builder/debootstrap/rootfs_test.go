package debootstrap

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/packer-plugin-sdk/multistep"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"
	"golang.org/x/sys/unix"

	"github.com/harmonykaas/harmony/packer/internal/disk"
)

// These tests run the real cache code (stepRootfs, saveTree, restoreTree)
// and the real disk writer on a small tree made here instead of a
// debootstrapped one: the same tools, seconds instead of minutes, and no
// mirror.

// requireTools fails, rather than skips, without what the tests need:
// scripts/install-deps.sh installs it and make test runs as root.
func requireTools(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root (file capabilities, tar --same-owner, as the builder), as make test has")
	}
	for _, tool := range []string{"tar", "setfacl", "setfattr", "setcap", "mke2fs", "debugfs", "dumpe2fs", "sfdisk", "mkfs.fat", "mmd", "mcopy", "dd"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s: %v (scripts/install-deps.sh installs it)", tool, err)
		}
	}
}

func mustRun(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// staleSocket is a file type tar does not carry ("socket ignored") and
// mke2fs -d does: a tree that did not go through the tarball shows it.
const staleSocket = "run/stale.sock"

// fakeBase makes a small root in dir with what a debootstrapped base
// carries beyond plain files: systemd's ACL on /var/log/journal, a file
// capability, a user xattr, a hard link, a symlink, and the boot files
// the disk writer wants (stand-ins). With socket, also a stale socket.
func fakeBase(t *testing.T, dir string, socket bool) {
	t.Helper()
	files := map[string]string{
		"boot/vmlinuz-6.1.0-test":                      "kernel",
		"boot/initrd.img-6.1.0-test":                   "initrd",
		"usr/lib/systemd/boot/efi/systemd-bootx64.efi": "systemd-boot",
		"etc/hostname":                                 "localhost\n",
		"etc/machine-id":                               "",
		"etc/harmony-test":                             "tagged\n",
		"usr/bin/ping":                                 "#!/bin/sh\n",
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "usr/bin/ping"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "var/log/journal"), 0o2755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "usr/bin/ping"), filepath.Join(dir, "usr/bin/ping4")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("ping", filepath.Join(dir, "usr/bin/ping6")); err != nil {
		t.Fatal(err)
	}
	// As systemd's tmpfiles.d/systemd.conf sets it when systemd installs.
	mustRun(t, "setfacl", "-m", "g:adm:r-x,d:g:adm:r-x,d:group::r-x", filepath.Join(dir, "var/log/journal"))
	mustRun(t, "setcap", "cap_net_bind_service+ep", filepath.Join(dir, "usr/bin/ping"))
	mustRun(t, "setfattr", "-n", "user.harmony-test", "-v", "kept", filepath.Join(dir, "etc/harmony-test"))
	if socket {
		p := filepath.Join(dir, staleSocket)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mknod(p, unix.S_IFSOCK|0o755, 0); err != nil {
			t.Fatalf("mknod %s: %v", p, err)
		}
	}
}

// writeDisk writes root's disk with the real writer and returns it and
// the root file system's offset in it.
func writeDisk(t *testing.T, root, out string) ([]byte, int64) {
	t.Helper()
	l, err := disk.Write(context.Background(), disk.Options{
		Output: out, Root: root, Size: 256 << 20, ESPSize: 40 << 20, Epoch: time.Unix(1700000000, 0), Seed: "rootfs-test",
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b, l.RootOffset
}

// checkXattrs reads the attributes fakeBase set back out of the ext4
// root in raw, as the booted image would see them.
func checkXattrs(t *testing.T, what, raw string, offset int64) {
	t.Helper()
	fsys := raw + "?offset=" + strconv.FormatInt(offset, 10)
	for _, c := range []struct{ path, want, what string }{
		{"/var/log/journal", "system.posix_acl_access", "the journal's ACL"},
		{"/var/log/journal", "system.posix_acl_default", "the journal's default ACL"},
		// VFS_CAP_REVISION_2 with the effective flag, then the permitted
		// set: bit 10, cap_net_bind_service.
		{"/usr/bin/ping", "security.capability (20) = 01 00 00 02 00 04 00 00 ", "ping's file capability"},
		{"/etc/harmony-test", `user.harmony-test (4) = "kept"`, "the user xattr"},
	} {
		out := mustRun(t, "debugfs", "-R", "ea_list "+c.path, fsys)
		if !strings.Contains(out, c.want) {
			t.Errorf("%s disk: %s is missing: debugfs ea_list %s has no %q:\n%s", what, c.what, c.path, c.want, out)
		}
	}
}

// A saved and restored tree writes the same disk as the tree itself:
// the cache loses nothing mke2fs -d copies.
func TestCacheRoundTripKeepsXattrs(t *testing.T) {
	requireTools(t)
	ctx, ui, dir := context.Background(), packersdk.TestUi(t), t.TempDir()
	orig := filepath.Join(dir, "orig")
	if err := os.Mkdir(orig, 0o755); err != nil {
		t.Fatal(err)
	}
	fakeBase(t, orig, false)
	tarball := filepath.Join(dir, "base.tar")
	if err := saveTree(ctx, ui, orig, tarball); err != nil {
		t.Fatal(err)
	}
	restored := filepath.Join(dir, "restored")
	if err := restoreTree(ctx, ui, tarball, restored); err != nil {
		t.Fatal(err)
	}
	want, offset := writeDisk(t, orig, filepath.Join(dir, "orig.raw"))
	got, _ := writeDisk(t, restored, filepath.Join(dir, "restored.raw"))
	checkXattrs(t, "the original tree's", filepath.Join(dir, "orig.raw"), offset)
	checkXattrs(t, "the restored tree's", filepath.Join(dir, "restored.raw"), offset)
	if !bytes.Equal(want, got) {
		t.Errorf("the disk from the tree saved to and restored from the cache differs from the tree's own at byte %d", firstDiff(want, got))
	}
}

// The first build (a fresh base) and the next (the cache) give the same
// disk. This is make reproducible on a cold machine, in seconds.
func TestRootfsFreshAndCachedBuildsAreIdentical(t *testing.T) {
	requireTools(t)
	dir := t.TempDir()
	c := &Config{
		CacheDir: filepath.Join(dir, "cache"), Suite: "bookworm", Mirror: "http://deb.example", SecurityMirror: "http://security.example",
		Variant: "minbase", Include: []string{"systemd"},
	}
	root := filepath.Join(dir, "out", ".rootfs-test")
	bootstraps := 0
	step := &stepRootfs{bootstrap: func(_ context.Context, _ packersdk.Ui, _ *Config, base string) error {
		bootstraps++
		fakeBase(t, base, true)
		return nil
	}}
	build := func(name string) ([]byte, string, int64) {
		state := new(multistep.BasicStateBag)
		state.Put("config", c)
		state.Put("ui", packersdk.TestUi(t))
		state.Put("root", root)
		if action := step.Run(context.Background(), state); action != multistep.ActionContinue {
			t.Fatalf("%s build: stepRootfs: %v", name, state.Get("error"))
		}
		defer step.Cleanup(state)
		if _, err := os.Lstat(filepath.Join(root, staleSocket)); err == nil {
			t.Errorf("%s build: the root has the base's socket, which tar does not carry: it did not come from the cache tarball", name)
		}
		if _, err := os.Lstat(scratchDir(root)); !os.IsNotExist(err) {
			t.Errorf("%s build: the scratch base %s is left behind (%v)", name, scratchDir(root), err)
		}
		raw := filepath.Join(dir, name+".raw")
		b, offset := writeDisk(t, root, raw)
		return b, raw, offset
	}

	fresh, freshRaw, offset := build("fresh")
	if bootstraps != 1 {
		t.Fatalf("the fresh build bootstrapped %d times, want 1", bootstraps)
	}
	if _, err := os.Stat(filepath.Join(c.CacheDir, "debootstrap-"+cacheKey(c)+".tar")); err != nil {
		t.Fatalf("the fresh build cached no base: %v", err)
	}
	cached, cachedRaw, _ := build("cached")
	if bootstraps != 1 {
		t.Fatalf("the cached build bootstrapped again (%d in all)", bootstraps)
	}
	checkXattrs(t, "the fresh build's", freshRaw, offset)
	checkXattrs(t, "the cached build's", cachedRaw, offset)
	if !bytes.Equal(fresh, cached) {
		t.Errorf("the fresh and the cached build's disks differ at byte %d", firstDiff(fresh, cached))
	}
}

// Tarballs from before cacheFormat lost every xattr: their key must not
// come back.
func TestCacheKeyIsNotTheXattrLessOnes(t *testing.T) {
	c := &Config{Suite: "bookworm", Mirror: "http://m", SecurityMirror: "http://s", Variant: "minbase", Include: []string{"a", "b"}}
	h := sha256.New()
	fmt.Fprintf(h, "nodoc\n%s\n%s\n%s\n%s\namd64\n%s\n", c.Suite, c.Mirror, c.SecurityMirror, c.Variant, "a,b")
	if legacy := hex.EncodeToString(h.Sum(nil))[:16]; cacheKey(c) == legacy {
		t.Errorf("cacheKey is %s, the key of an xattr-less tarball", legacy)
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i + 1 // cmp counts from 1
		}
	}
	return min(len(a), len(b)) + 1
}
