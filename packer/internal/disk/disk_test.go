package disk

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeRoot is a small tree shaped like an image's root: the boot files
// are stand-ins (this test checks the layout and the bytes; booting a
// real root is the image boot test's job).
func fakeRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"boot/vmlinuz-6.1.0-test":    "kernel",
		"boot/initrd.img-6.1.0-test": "initrd",
		bootloader:                   "systemd-boot",
		"etc/hostname":               "localhost\n",
		`usr/lib/systemd/system/system-systemd\x2dcryptsetup.slice`: "[Unit]\n",
		"etc/harmony/image.json":                                    `{"role":"node"}`,
		"usr/bin/tool":                                              strings.Repeat("x", 100000),
	}
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/usr/bin/tool", filepath.Join(root, "usr/bin/alias")); err != nil {
		t.Fatal(err)
	}
	return root
}

func write(t *testing.T, root, out string, epoch int64) *Layout {
	t.Helper()
	l, err := Write(context.Background(), Options{
		Output: out, Root: root, Size: 256 * mib, ESPSize: 40 * mib, Epoch: time.Unix(epoch, 0), Seed: "test",
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func output(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

func TestWriteIsReproducible(t *testing.T) {
	root := fakeRoot(t)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.raw"), filepath.Join(dir, "b.raw")
	write(t, root, a, 1700000000)
	// Reading the tree (and time passing) must not change the result.
	now := time.Now()
	if err := os.Chtimes(filepath.Join(root, "etc/hostname"), now, now); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	write(t, root, b, 1700000000)
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if !bytes.Equal(ab, bb) {
		t.Fatal("two disks from the same tree and epoch differ")
	}
	c := filepath.Join(dir, "c.raw")
	write(t, root, c, 1700000001)
	if cb, _ := os.ReadFile(c); bytes.Equal(ab, cb) {
		t.Fatal("a different epoch gave the same disk: the epoch is not carried")
	}
}

func TestLayoutIsWhatItSays(t *testing.T) {
	root := fakeRoot(t)
	raw := filepath.Join(t.TempDir(), "disk.raw")
	l := write(t, root, raw, 1700000000)

	dump := output(t, "sfdisk", "--dump", raw)
	for _, want := range []string{
		"label: gpt", "label-id: " + strings.ToUpper(l.DiskUUID),
		"start=        2048, size=       81920, type=" + espType + ", uuid=" + strings.ToUpper(l.ESPUUID),
		"type=" + rootType + ", uuid=" + strings.ToUpper(l.RootPartUUID),
	} {
		if !strings.Contains(dump, want) {
			t.Errorf("sfdisk --dump lacks %q:\n%s", want, dump)
		}
	}

	esp := "-i" + raw + "@@" + strconv.FormatInt(l.ESPOffset, 10)
	listing := output(t, "mdir", esp, "-/", "::/")
	for _, want := range []string{"BOOTX64  EFI", "vmlinuz", "initrd   img", "harmony.conf"} {
		if !strings.Contains(listing, want) {
			t.Errorf("the ESP lacks %q:\n%s", want, listing)
		}
	}
	entry := output(t, "mtype", esp, "::/loader/entries/harmony.conf")
	if !strings.Contains(entry, "root=PARTUUID="+l.RootPartUUID+" ro") || !strings.Contains(entry, "console=ttyS0,115200") {
		t.Errorf("loader entry:\n%s", entry)
	}
	if got := output(t, "mtype", esp, "::/vmlinuz"); got != "kernel" {
		t.Errorf("the ESP's kernel is %q", got)
	}

	fsys := raw + "?offset=" + strconv.FormatInt(l.RootOffset, 10)
	if got := output(t, "debugfs", "-R", "cat /etc/harmony/image.json", fsys); !strings.Contains(got, `{"role":"node"}`) {
		t.Errorf("debugfs cat image.json: %q", got)
	}
	if got := output(t, "debugfs", "-R", "ls /boot", fsys); strings.Contains(got, "vmlinuz") || strings.Contains(got, "initrd") {
		t.Errorf("the root carries the kernel or initrd the ESP already has:\n%s", got)
	}
	if _, err := os.Stat(filepath.Join(root, "boot/vmlinuz-6.1.0-test")); err != nil {
		t.Errorf("the kernel was not put back into the tree: %v", err)
	}
	stat := output(t, "debugfs", "-R", "stat /etc/hostname", fsys)
	if !strings.Contains(stat, "mtime: 0x6553f100") || !strings.Contains(stat, "atime: 0x6553f100") || !strings.Contains(stat, "ctime: 0x6553f100") {
		t.Errorf("/etc/hostname's times are not the epoch:\n%s", stat)
	}
	if !strings.Contains(output(t, "debugfs", "-R", "stats", fsys), "Filesystem UUID:          "+l.RootFSUUID) {
		t.Error("the root file system's UUID is not the layout's")
	}
}

func TestWriteRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		mutate func(root string, o *Options)
		want   string
	}{
		"no kernel":       {func(root string, _ *Options) { os.Remove(filepath.Join(root, "boot/vmlinuz-6.1.0-test")) }, "0 kernels"},
		"no initrd":       {func(root string, _ *Options) { os.Remove(filepath.Join(root, "boot/initrd.img-6.1.0-test")) }, "no initrd"},
		"no systemd-boot": {func(root string, _ *Options) { os.Remove(filepath.Join(root, bootloader)) }, "systemd-boot"},
		"disk too small":  {func(_ string, o *Options) { o.Size = 100 * mib }, "size"},
		"tree too big": {func(root string, o *Options) {
			os.WriteFile(filepath.Join(root, "big"), bytes.Repeat([]byte{1}, 200*mib), 0o644)
		}, "raise the disk size"},
	} {
		t.Run(name, func(t *testing.T) {
			root := fakeRoot(t)
			o := Options{Output: filepath.Join(dir, "x.raw"), Root: root, Size: 256 * mib, ESPSize: 40 * mib, Epoch: time.Unix(1, 0), Seed: "s"}
			tc.mutate(root, &o)
			_, err := Write(context.Background(), o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
			if _, err := os.Stat(o.Output); !os.IsNotExist(err) {
				t.Fatal("a failed write left an output file")
			}
		})
	}
}
