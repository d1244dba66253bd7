package datadisk

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestChoose(t *testing.T) {
	ours := Disk{Name: "sdb", Type: "ext4", Label: Label}
	blank := Disk{Name: "sdc"}
	pending := Disk{Name: "sdd", Type: "ext4", Label: pendingLabel}
	foreign := Disk{Name: "sde", Type: "xfs", Label: "backup"}
	partitioned := Disk{Name: "sdf", PartitionTable: "gpt"}
	for _, c := range []struct {
		name   string
		disks  []Disk
		want   string // chosen disk, "" for none
		format bool
		err    string
	}{
		{"a worker: no disk", nil, "", false, ""},
		{"the first boot: one blank disk", []Disk{blank}, "sdc", true, ""},
		{"a moved disk", []Disk{ours}, "sdb", false, ""},
		{"ours and a blank one: ours, the blank left alone", []Disk{blank, ours}, "sdb", false, ""},
		{"a format that did not finish", []Disk{pending}, "sdd", true, ""},
		{"two blank disks: no guess", []Disk{blank, {Name: "sdg"}}, "", false, "2 blank disks"},
		{"a pending and a blank disk: no guess", []Disk{blank, pending}, "", false, "2 blank disks"},
		{"two of ours", []Disk{ours, {Name: "sdh", Type: "ext4", Label: Label}}, "", false, "2 disks are labelled"},
		{"another file system is never formatted", []Disk{foreign}, "", false, ""},
		{"a partitioned disk is never formatted", []Disk{partitioned}, "", false, ""},
	} {
		d, err := Choose(c.disks)
		got := ""
		if d.Disk != nil {
			got = d.Disk.Name
		}
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %v, want an error with %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want || d.Format != c.format {
			t.Errorf("%s: disk %q format %v (%s), %v; want %q format %v", c.name, got, d.Format, d.Why, err, c.want, c.format)
		}
	}
}

// image makes a disk image file of 64 MiB; with label it is ext4.
func image(t *testing.T, path, label string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 64<<20); err != nil {
		t.Fatal(err)
	}
	if label != "" {
		if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-L", label, path).CombinedOutput(); err != nil {
			t.Fatalf("mkfs: %v: %s", err, out)
		}
	}
}

// List reads a sysfs tree and probes each disk with the real blkid; the
// tree is made here, the disks are image files blkid reads as it would
// devices.
func TestList(t *testing.T) {
	sys, dev := t.TempDir(), t.TempDir()
	disk := func(name string, removable, size string) {
		if err := os.MkdirAll(filepath.Join(sys, name), 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(sys, name, "removable"), []byte(removable+"\n"), 0o644)
		os.WriteFile(filepath.Join(sys, name, "size"), []byte(size+"\n"), 0o644)
	}
	for _, name := range []string{"sda", "sdb", "sdc", "loop0", "sr0", "sdd", "sde"} {
		disk(name, "0", "131072")
	}
	disk("sdf", "1", "131072") // removable
	disk("sdg", "0", "0")      // no medium
	image(t, filepath.Join(dev, "sda"), "root")
	image(t, filepath.Join(dev, "sdb"), "")
	image(t, filepath.Join(dev, "sdc"), Label)
	image(t, filepath.Join(dev, "loop0"), "")
	image(t, filepath.Join(dev, "sdf"), "")
	image(t, filepath.Join(dev, "sdg"), "")
	image(t, filepath.Join(dev, "sde"), "")
	sfdisk := exec.Command("sfdisk", "-q", filepath.Join(dev, "sde"))
	sfdisk.Stdin = strings.NewReader("label: gpt\n")
	if out, err := sfdisk.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk: %v %s", err, out)
	}
	// sdd has no device node.
	disks, err := List(context.Background(), sys, dev, "sda")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range disks {
		got = append(got, d.Name+":"+d.Type+":"+d.Label+":"+d.PartitionTable)
	}
	want := "sdb:::,sdc:ext4:" + Label + ":,sde:::gpt"
	if strings.Join(got, ",") != want {
		t.Errorf("disks %v, want %s", got, want)
	}
}

// A blank disk is formatted and mounted; a crash between mkfs and the
// label leaves a disk that is formatted again; a mounted disk keeps its
// data across a second mount, as it does across a reimage.
func TestFormatAndMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a loop device and mount")
	}
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "data.img")
	image(t, file, "")
	out, err := exec.Command("losetup", "--find", "--show", file).Output()
	if err != nil {
		t.Fatalf("losetup: %v", err)
	}
	loop := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("losetup", "-d", loop).Run() })
	probed := func() Disk {
		t.Helper()
		d := Disk{Name: filepath.Base(loop), Dev: loop}
		if err := probe(ctx, &d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := probed(); !d.blank() {
		t.Fatalf("a new image probes as %+v", d)
	}
	// mkfs done, the label not yet: a crash there.
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-L", pendingLabel, loop).CombinedOutput(); err != nil {
		t.Fatalf("mkfs: %v %s", err, out)
	}
	if dec, err := Choose([]Disk{probed()}); err != nil || dec.Disk == nil || !dec.Format {
		t.Fatalf("after an unfinished format: %+v, %v; want it formatted again", dec, err)
	}
	if err := Format(ctx, loop); err != nil {
		t.Fatal(err)
	}
	if d := probed(); !d.ours() {
		t.Fatalf("after Format: %+v", d)
	}
	dir := filepath.Join(t.TempDir(), "etcd")
	for round := range 2 {
		if err := mountChecked(ctx, loop, dir); err != nil {
			t.Fatal(err)
		}
		if mounted, _ := IsMountPoint(dir); !mounted {
			t.Errorf("round %d: %s is not a mount point", round, dir)
		}
		if info, _ := os.Stat(dir); info.Mode().Perm() != 0o700 {
			t.Errorf("round %d: %s is %v, want 0700", round, dir, info.Mode().Perm())
		}
		if round == 0 {
			if err := os.WriteFile(filepath.Join(dir, "member"), []byte("kept"), 0o600); err != nil {
				t.Fatal(err)
			}
		} else if data, _ := os.ReadFile(filepath.Join(dir, "member")); string(data) != "kept" {
			t.Errorf("the data did not survive a second mount: %q", data)
		}
		if err := unix.Unmount(dir, 0); err != nil {
			t.Fatal(err)
		}
	}
	// Mount on a directory that is mounted already does nothing.
	if err := unix.Mount(t.TempDir(), dir, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(dir, 0)
	res, err := Mount(ctx, Config{SysBlock: "/sys/block", DevDir: "/dev", Dir: dir})
	if err != nil || !res.Already {
		t.Errorf("a mounted data directory: %+v, %v", res, err)
	}
}
