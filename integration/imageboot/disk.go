// Package imageboot boots a built Harmony image the way a hypervisor
// would, for tests and benchmarks: it turns an OVA's disk back into a raw
// disk, writes files into its root file system without mounting it, and
// runs it under QEMU (TCG, OVMF) with a serial console log.
package imageboot

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/harmonykaas/harmony/ova/vmdk"
)

// RawFromOVA writes disk number index (0 is the first .vmdk) of an OVA as
// a sparse raw disk at dst. The VMDK is copied out of the archive first
// (the reader needs random access); only non-zero chunks are written.
func RawFromOVA(ctx context.Context, ova string, index int, dst string) error {
	f, err := os.Open(ova)
	if err != nil {
		return err
	}
	defer f.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".vmdk-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	tr := tar.NewReader(f)
	for n := 0; ; {
		h, err := tr.Next()
		if err == io.EOF {
			return fmt.Errorf("%s: no disk %d", ova, index)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", ova, err)
		}
		if !strings.HasSuffix(h.Name, ".vmdk") {
			continue
		}
		if n++; n-1 == index {
			if _, err := io.Copy(tmp, tr); err != nil {
				return fmt.Errorf("%s: %s: %w", ova, h.Name, err)
			}
			break
		}
	}
	st, err := tmp.Stat()
	if err != nil {
		return err
	}
	rd, err := vmdk.NewReader(tmp, st.Size())
	if err != nil {
		return fmt.Errorf("%s: %w", ova, err)
	}
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer out.Close()
	if err := out.Truncate(rd.Capacity()); err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	zero := make([]byte, len(buf))
	for off := int64(0); off < rd.Capacity(); off += int64(len(buf)) {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := int(min(int64(len(buf)), rd.Capacity()-off))
		if _, err := rd.ReadAt(buf[:n], off); err != nil && err != io.EOF {
			return fmt.Errorf("read disk at %d: %w", off, err)
		}
		if bytes.Equal(buf[:n], zero[:n]) {
			continue
		}
		if _, err := out.WriteAt(buf[:n], off); err != nil {
			return err
		}
	}
	return out.Close()
}

// CopySparse copies a raw disk, leaving its zero runs as holes.
func CopySparse(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer out.Close()
	if err := out.Truncate(st.Size()); err != nil {
		return err
	}
	buf, zero := make([]byte, 1<<20), make([]byte, 1<<20)
	for off := int64(0); off < st.Size(); off += int64(len(buf)) {
		n, err := in.ReadAt(buf, off)
		if err != nil && err != io.EOF {
			return err
		}
		if n > 0 && !bytes.Equal(buf[:n], zero[:n]) {
			if _, err := out.WriteAt(buf[:n], off); err != nil {
				return err
			}
		}
	}
	return out.Close()
}

// GPT partition types, as GPT stores them (the first three fields
// little-endian): an x86-64 Linux root, 4F68BCE3-E8CD-4C31-B96B-EFF1C3FC6E8F,
// and the EFI system partition, C12A7328-F81F-11D2-BA4B-00A0C93EC93B.
var (
	linuxRootType = [16]byte{0xe3, 0xbc, 0x68, 0x4f, 0xcd, 0xe8, 0x31, 0x4c, 0xb9, 0x6b, 0xef, 0xf1, 0xc3, 0xfc, 0x6e, 0x8f}
	espType       = [16]byte{0x28, 0x73, 0x2a, 0xc1, 0x1f, 0xf8, 0xd2, 0x11, 0xba, 0x4b, 0x00, 0xa0, 0xc9, 0x3e, 0xc9, 0x3b}
)

// RootOffset finds the x86-64 root partition in the disk's GPT and returns
// its byte offset.
func RootOffset(disk string) (int64, error) {
	return partitionOffset(disk, linuxRootType, "x86-64 root")
}

// ESPOffset finds the EFI system partition, where the kernel, the initrd
// and systemd-boot's entry live.
func ESPOffset(disk string) (int64, error) {
	return partitionOffset(disk, espType, "EFI system")
}

func partitionOffset(disk string, typ [16]byte, what string) (int64, error) {
	f, err := os.Open(disk)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	hdr := make([]byte, 512)
	if _, err := f.ReadAt(hdr, 512); err != nil {
		return 0, fmt.Errorf("%s: GPT header: %w", disk, err)
	}
	if string(hdr[:8]) != "EFI PART" {
		return 0, fmt.Errorf("%s: no GPT", disk)
	}
	le := binary.LittleEndian
	entries, count, size := int64(le.Uint64(hdr[72:])), le.Uint32(hdr[80:]), le.Uint32(hdr[84:])
	if count > 256 || size < 128 || size > 1024 {
		return 0, fmt.Errorf("%s: GPT with %d entries of %d bytes", disk, count, size)
	}
	table := make([]byte, int(count)*int(size))
	if _, err := f.ReadAt(table, entries*512); err != nil {
		return 0, fmt.Errorf("%s: GPT entries: %w", disk, err)
	}
	for i := 0; i < int(count); i++ {
		e := table[i*int(size):]
		if bytes.Equal(e[:16], typ[:]) {
			return int64(le.Uint64(e[32:])) * 512, nil
		}
	}
	return 0, fmt.Errorf("%s: no %s partition", disk, what)
}

// BootEntry is what systemd-boot starts: the files, copied out of the
// ESP, and the kernel's command line.
type BootEntry struct {
	Kernel, Initrd, Options string
}

// ReadBootEntry copies the kernel and initrd of the ESP's one boot entry
// (loader/entries/harmony.conf, as the builder writes it) into dir, with
// mtools: no mount.
func ReadBootEntry(ctx context.Context, disk, dir string) (BootEntry, error) {
	esp, err := ESPOffset(disk)
	if err != nil {
		return BootEntry{}, err
	}
	image := fmt.Sprintf("%s@@%d", disk, esp)
	conf, err := exec.CommandContext(ctx, "mtype", "-i", image, "::/loader/entries/harmony.conf").Output()
	if err != nil {
		return BootEntry{}, fmt.Errorf("%s: boot entry: %w", disk, err)
	}
	var e BootEntry
	for _, line := range strings.Split(string(conf), "\n") {
		key, value, _ := strings.Cut(strings.TrimSpace(line), " ")
		value = strings.TrimSpace(value)
		switch key {
		case "linux", "initrd":
			dst := filepath.Join(dir, filepath.Base(value))
			if out, err := exec.CommandContext(ctx, "mcopy", "-o", "-i", image, "::"+value, dst).CombinedOutput(); err != nil {
				return BootEntry{}, fmt.Errorf("%s: copy %s out of the ESP: %w: %s", disk, value, err, out)
			}
			if key == "linux" {
				e.Kernel = dst
			} else {
				e.Initrd = dst
			}
		case "options":
			e.Options = value
		}
	}
	if e.Kernel == "" || e.Initrd == "" || e.Options == "" {
		return BootEntry{}, fmt.Errorf("%s: boot entry without a kernel, an initrd or options:\n%s", disk, conf)
	}
	return e, nil
}

// InjectFile writes data into the ext4 file system at offset in disk as
// path (its directory must exist), owned by root with mode, through
// debugfs: no mount, no loop device.
func InjectFile(ctx context.Context, disk string, offset int64, path string, data []byte, mode os.FileMode) error {
	src, err := os.CreateTemp("", "inject-")
	if err != nil {
		return err
	}
	defer os.Remove(src.Name())
	if _, err := src.Write(data); err != nil {
		return err
	}
	src.Close()
	script := fmt.Sprintf("rm %s\nwrite %s %s\nsif %s mode 0%o\nsif %s uid 0\nsif %s gid 0\n",
		path, src.Name(), path, path, 0o100000|uint32(mode.Perm()), path, path)
	if _, err := debugfs(ctx, disk, offset, true, script); err != nil {
		return err
	}
	got, err := ReadFile(ctx, disk, offset, path)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, data) {
		return fmt.Errorf("inject %s: read back %d bytes, wrote %d", path, len(got), len(data))
	}
	return nil
}

// ReadFile reads a file out of the ext4 file system at offset in disk.
func ReadFile(ctx context.Context, disk string, offset int64, path string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, "debugfs", "-R", "cat "+path, fsPath(disk, offset)).Output()
	if err != nil {
		return nil, fmt.Errorf("debugfs cat %s: %w", path, err)
	}
	return out, nil
}

// ReadLink reads a symbolic link's target out of the ext4 file system at
// offset in disk. Targets under 60 bytes live in the inode ("fast"
// links), as every link the images make does; longer ones are refused.
func ReadLink(ctx context.Context, disk string, offset int64, path string) (string, error) {
	out, err := Debugfs(ctx, disk, offset, "stat "+path+"\n")
	if err != nil {
		return "", err
	}
	m := fastLinkDest.FindStringSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("%s: not a fast symbolic link in the image:\n%s", path, out)
	}
	return m[1], nil
}

var fastLinkDest = regexp.MustCompile(`Fast link dest: "([^"]*)"`)

// Debugfs runs debugfs commands read-only and returns the output.
func Debugfs(ctx context.Context, disk string, offset int64, commands string) (string, error) {
	return debugfs(ctx, disk, offset, false, commands)
}

func debugfs(ctx context.Context, disk string, offset int64, write bool, commands string) (string, error) {
	args := []string{"-f", "-"}
	if write {
		args = append([]string{"-w"}, args...)
	}
	cmd := exec.CommandContext(ctx, "debugfs", append(args, fsPath(disk, offset))...)
	cmd.Stdin = strings.NewReader(commands)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("debugfs: %w: %s", err, out)
	}
	if strings.Contains(string(out), "Filesystem opened read/only") && write {
		return string(out), errors.New("debugfs: could not open the file system for writing")
	}
	return string(out), nil
}

func fsPath(disk string, offset int64) string {
	return disk + "?offset=" + strconv.FormatInt(offset, 10)
}
