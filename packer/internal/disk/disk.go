// Package disk writes a root file system directory as a bootable raw GPT
// disk: an EFI system partition with systemd-boot, the kernel and the
// initrd, and an ext4 root. It needs no VM, no loop device and no mount,
// and the same tree and epoch give the same bytes: partition and file
// system UUIDs derive from a seed, every timestamp is the epoch, and the
// tools run with their reproducibility switches (mkfs.fat --invariant,
// mtools' SOURCE_DATE_EPOCH, mke2fs's E2FSPROGS_FAKE_TIME and hash_seed).
package disk

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

const (
	mib = 1 << 20
	// The GPT types of an EFI system partition and an x86-64 Linux root.
	espType  = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"
	rootType = "4F68BCE3-E8CD-4C31-B96B-EFF1C3FC6E8F"
	// bootloader is systemd-boot as the image's own systemd-boot-efi
	// package installs it.
	bootloader = "usr/lib/systemd/boot/efi/systemd-bootx64.efi"
)

// Options describe one disk.
type Options struct {
	// Output is the raw disk file to write (replaced if it exists).
	Output string
	// Root is the root file system directory.
	Root string
	// Size of the disk in bytes, a multiple of 1 MiB.
	Size int64
	// ESPSize in bytes, a multiple of 1 MiB; 128 MiB by default.
	ESPSize int64
	// Epoch is every timestamp in the disk (SOURCE_DATE_EPOCH).
	Epoch time.Time
	// Seed makes the UUIDs: the same seed, the same UUIDs.
	Seed string
	// KernelArgs are appended to root=PARTUUID=… ro console=ttyS0,115200.
	KernelArgs string
}

// Layout is where things ended up.
type Layout struct {
	DiskUUID   string
	ESPOffset  int64
	ESPSize    int64
	ESPUUID    string
	RootOffset int64
	RootSize   int64
	// RootPartUUID is the GPT partition's UUID (root=PARTUUID=…);
	// RootFSUUID the ext4 file system's.
	RootPartUUID string
	RootFSUUID   string
	Kernel       string
	Initrd       string
}

// Write builds the disk. On error no output file is left behind.
func Write(ctx context.Context, o Options) (*Layout, error) {
	if o.ESPSize == 0 {
		o.ESPSize = 128 * mib
	}
	switch {
	case o.Output == "":
		return nil, errors.New("disk: output: empty")
	case o.Seed == "":
		return nil, errors.New("disk: seed: empty")
	case o.ESPSize%mib != 0 || o.ESPSize < 33*mib:
		return nil, fmt.Errorf("disk: esp size %d: want a multiple of 1 MiB, at least 33 MiB (FAT32)", o.ESPSize)
	case o.Size%mib != 0 || o.Size < o.ESPSize+64*mib:
		return nil, fmt.Errorf("disk: size %d: want a multiple of 1 MiB, at least the ESP plus 64 MiB", o.Size)
	case o.Epoch.Unix() < 0:
		return nil, fmt.Errorf("disk: epoch %v: before 1970", o.Epoch)
	}
	kernel, initrd, err := bootFiles(o.Root)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(o.Root, bootloader)); err != nil {
		return nil, fmt.Errorf("disk: root has no systemd-boot (install systemd-boot-efi): %w", err)
	}

	l := UUIDs(o.Seed)
	l.ESPOffset, l.ESPSize = mib, o.ESPSize
	l.RootOffset = mib + o.ESPSize
	l.Kernel, l.Initrd = kernel, initrd
	// The backup GPT takes the last 33 sectors; keep the last MiB free.
	l.RootSize = o.Size - l.RootOffset - mib

	if used, err := treeSize(o.Root); err != nil {
		return nil, err
	} else if used > l.RootSize*9/10 {
		return nil, fmt.Errorf("disk: the root file system holds %d MiB, too much for a %d MiB root partition: raise the disk size", used/mib, l.RootSize/mib)
	}

	work, err := os.MkdirTemp(filepath.Dir(o.Output), ".disk-")
	if err != nil {
		return nil, fmt.Errorf("disk: %w", err)
	}
	defer os.RemoveAll(work)
	env := []string{
		"SOURCE_DATE_EPOCH=" + strconv.FormatInt(o.Epoch.Unix(), 10),
		"E2FSPROGS_FAKE_TIME=" + strconv.FormatInt(o.Epoch.Unix(), 10),
		"TZ=UTC", "LC_ALL=C", "MTOOLS_SKIP_CHECK=1",
	}
	r := &runner{ctx: ctx, env: env}

	raw := filepath.Join(work, "disk.raw")
	if err := partition(r, raw, o.Size, l); err != nil {
		return nil, err
	}
	esp := filepath.Join(work, "esp.img")
	if err := writeESP(r, esp, o, l); err != nil {
		return nil, err
	}
	// The kernel and initrd live in the ESP, which the boot loader reads;
	// a second copy in the root would only add their size to the image
	// (they barely compress). They go back into the tree afterwards.
	restore, err := setAside(o.Root, work, l.Kernel, l.Initrd)
	if err != nil {
		return nil, err
	}
	root := filepath.Join(work, "root.img")
	err = writeRoot(r, root, o, l)
	if rerr := restore(); err == nil {
		err = rerr
	}
	if err != nil {
		return nil, err
	}
	for _, part := range []struct {
		img string
		off int64
	}{{esp, l.ESPOffset}, {root, l.RootOffset}} {
		if err := r.run("dd", "if="+part.img, "of="+raw, "bs=1M", "seek="+strconv.FormatInt(part.off/mib, 10),
			"conv=notrunc,sparse", "status=none"); err != nil {
			return nil, err
		}
	}
	if err := os.Rename(raw, o.Output); err != nil {
		return nil, fmt.Errorf("disk: %w", err)
	}
	return l, nil
}

// partition makes the sparse disk file and its GPT.
func partition(r *runner, raw string, size int64, l *Layout) error {
	f, err := os.Create(raw)
	if err != nil {
		return fmt.Errorf("disk: %w", err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("disk: %w", err)
	}
	script := fmt.Sprintf(`label: gpt
label-id: %s
unit: sectors
first-lba: 2048
start=%d, size=%d, type=%s, uuid=%s, name="EFI system"
start=%d, size=%d, type=%s, uuid=%s, name="root"
`, l.DiskUUID,
		l.ESPOffset/512, l.ESPSize/512, espType, l.ESPUUID,
		l.RootOffset/512, l.RootSize/512, rootType, l.RootPartUUID)
	return r.runInput(script, "sfdisk", "--quiet", "--no-reread", "--no-tell-kernel", raw)
}

// writeESP makes the FAT32 ESP with systemd-boot, one loader entry, the
// kernel and the initrd.
func writeESP(r *runner, img string, o Options, l *Layout) error {
	if err := r.run("mkfs.fat", "-F", "32", "--invariant", "-i", l.ESPUUID[:8], "-n", "ESP", "-C", img,
		strconv.FormatInt(l.ESPSize/1024, 10)); err != nil {
		return err
	}
	loader := "default harmony.conf\ntimeout 0\neditor no\n"
	args := strings.TrimSpace("root=PARTUUID=" + strings.ToLower(l.RootPartUUID) + " ro console=tty0 console=ttyS0,115200 " + o.KernelArgs)
	entry := fmt.Sprintf("title Harmony\nlinux /vmlinuz\ninitrd /initrd.img\noptions %s\n", args)
	dir, err := os.MkdirTemp(filepath.Dir(img), "esp-")
	if err != nil {
		return err
	}
	for name, body := range map[string]string{"loader.conf": loader, "harmony.conf": entry} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	if err := r.run("mmd", "-i", img, "::/EFI", "::/EFI/BOOT", "::/loader", "::/loader/entries"); err != nil {
		return err
	}
	for _, c := range []struct{ src, dst string }{
		{filepath.Join(o.Root, bootloader), "::/EFI/BOOT/BOOTX64.EFI"},
		{filepath.Join(dir, "loader.conf"), "::/loader/loader.conf"},
		{filepath.Join(dir, "harmony.conf"), "::/loader/entries/harmony.conf"},
		{filepath.Join(o.Root, l.Kernel), "::/vmlinuz"},
		{filepath.Join(o.Root, l.Initrd), "::/initrd.img"},
	} {
		if err := r.run("mcopy", "-i", img, c.src, c.dst); err != nil {
			return err
		}
	}
	return nil
}

// writeRoot makes the ext4 root from the tree, then clamps what mke2fs
// copies from the host: every inode's times, and the superblock's
// lifetime write counter.
func writeRoot(r *runner, img string, o Options, l *Layout) error {
	if err := r.run("mke2fs", "-q", "-t", "ext4", "-d", o.Root, "-U", l.RootFSUUID, "-L", "root",
		"-E", "hash_seed="+l.RootFSUUID+",root_owner=0:0", "-F", img,
		strconv.FormatInt(l.RootSize/1024, 10)+"k"); err != nil {
		return err
	}
	out, err := r.output("dumpe2fs", img)
	if err != nil {
		return err
	}
	inodes, err := usedInodes(out)
	if err != nil {
		return err
	}
	cmds := filepath.Join(filepath.Dir(img), "clamp.debugfs")
	if err := clampCommands(cmds, inodes, o.Epoch.Unix()); err != nil {
		return err
	}
	return r.run("debugfs", "-w", "-f", cmds, img)
}

// usedInodes reads dumpe2fs's report: every inode number not in a group's
// free ranges is in use. Numbers, not paths: file names may hold anything
// (systemd's units have backslashes) and debugfs's quoting is limited.
func usedInodes(dumpe2fs string) ([]int, error) {
	var total int
	free := map[int]bool{}
	for _, line := range strings.Split(dumpe2fs, "\n") {
		if v, ok := strings.CutPrefix(line, "Inode count:"); ok {
			total, _ = strconv.Atoi(strings.TrimSpace(v))
		}
		// Per-group lines are indented; the superblock's is a count.
		ranges, ok := strings.CutPrefix(line, "  Free inodes: ")
		ranges = strings.TrimSpace(ranges)
		if !ok || ranges == "" {
			continue
		}
		for _, rg := range strings.Split(ranges, ", ") {
			lo, hi, found := strings.Cut(rg, "-")
			if !found {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil || a > b {
				return nil, fmt.Errorf("disk: dumpe2fs free inode range %q", rg)
			}
			for i := a; i <= b; i++ {
				free[i] = true
			}
		}
	}
	if total == 0 {
		return nil, errors.New("disk: dumpe2fs reported no inode count")
	}
	var used []int
	for i := 1; i <= total; i++ {
		if !free[i] {
			used = append(used, i)
		}
	}
	return used, nil
}

// clampCommands writes a debugfs script that sets every used inode's
// times to epoch.
func clampCommands(path string, inodes []int, epoch int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	t := strconv.FormatInt(epoch, 10)
	for _, ino := range inodes {
		for _, field := range []string{"atime", "mtime", "ctime", "crtime"} {
			fmt.Fprintf(w, "sif <%d> %s %s\nsif <%d> %s_extra 0\n", ino, field, t, ino, field)
		}
	}
	fmt.Fprintln(w, "ssv kbytes_written 0")
	err = w.Flush()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// setAside moves files out of the tree into dir; the returned function
// moves them back.
func setAside(root, dir string, files ...string) (func() error, error) {
	var moved []string
	restore := func() error {
		var errs []error
		for _, f := range moved {
			if err := os.Rename(filepath.Join(dir, filepath.Base(f)), filepath.Join(root, f)); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	for _, f := range files {
		if err := os.Rename(filepath.Join(root, f), filepath.Join(dir, filepath.Base(f))); err != nil {
			return nil, errors.Join(fmt.Errorf("disk: set %s aside: %w", f, err), restore())
		}
		moved = append(moved, f)
	}
	return restore, nil
}

// bootFiles finds the one kernel and its initrd under /boot.
func bootFiles(root string) (kernel, initrd string, err error) {
	kernels, _ := filepath.Glob(filepath.Join(root, "boot", "vmlinuz-*"))
	if len(kernels) != 1 {
		return "", "", fmt.Errorf("disk: %s/boot has %d kernels (vmlinuz-*), want exactly one", root, len(kernels))
	}
	version := strings.TrimPrefix(filepath.Base(kernels[0]), "vmlinuz-")
	kernel = filepath.Join("boot", "vmlinuz-"+version)
	initrd = filepath.Join("boot", "initrd.img-"+version)
	if _, err := os.Stat(filepath.Join(root, initrd)); err != nil {
		return "", "", fmt.Errorf("disk: no initrd for kernel %s: %w", version, err)
	}
	return kernel, initrd, nil
}

// treeSize is the bytes the tree's files take.
func treeSize(root string) (int64, error) {
	var n int64
	err := filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			n += info.Size()
		}
		n += 4096 // an inode and a directory entry, roughly
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("disk: root %s: %w", root, err)
	}
	return n, nil
}

// UUIDs are the identifiers a disk made from seed carries, known before
// it is written (for example for the root's /etc/fstab).
func UUIDs(seed string) *Layout {
	return &Layout{
		DiskUUID:     uuidFrom(seed, "disk"),
		ESPUUID:      uuidFrom(seed, "esp"),
		RootPartUUID: uuidFrom(seed, "root-partition"),
		RootFSUUID:   uuidFrom(seed, "root-filesystem"),
	}
}

// ESPVolumeID is the FAT volume serial as fstab and blkid spell it.
func (l *Layout) ESPVolumeID() string {
	return strings.ToUpper(l.ESPUUID[:4] + "-" + l.ESPUUID[4:8])
}

// uuidFrom derives a version-4-shaped UUID from the seed and a purpose.
func uuidFrom(seed, purpose string) string {
	h := sha256.Sum256([]byte("harmony disk\x00" + seed + "\x00" + purpose))
	h[6] = h[6]&0x0f | 0x40
	h[8] = h[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// runner runs the tools with the reproducibility environment.
type runner struct {
	ctx context.Context
	env []string
}

func (r *runner) run(name string, args ...string) error { return r.runInput("", name, args...) }

// output runs a tool and returns its standard output.
func (r *runner) output(name string, args ...string) (string, error) {
	cmd := exec.CommandContext(r.ctx, name, args...)
	cmd.Env = append(os.Environ(), r.env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("disk: %s: %w: %s", name, err, lastLines(stderr.String(), 6))
	}
	return string(out), nil
}

func (r *runner) runInput(stdin, name string, args ...string) error {
	cmd := exec.CommandContext(r.ctx, name, args...)
	cmd.Env = append(os.Environ(), r.env...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("disk: %s %s: %w: %s", name, strings.Join(args, " "), err, lastLines(string(out), 6))
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
