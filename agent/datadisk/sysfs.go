package datadisk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// virtualPrefixes name block devices that are never a VM's disk.
var virtualPrefixes = []string{"loop", "ram", "zram", "sr", "fd", "nbd", "dm-", "md"}

// rootDisk is the whole disk under sysBlock that holds the root file
// system; "" when the root is not on a block device (an overlay).
func rootDisk(sysBlock string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat("/", &st); err != nil {
		return "", fmt.Errorf("stat /: %w", err)
	}
	want := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	devs, err := filepath.Glob(filepath.Join(sysBlock, "*", "dev"))
	if err != nil {
		return "", err
	}
	parts, _ := filepath.Glob(filepath.Join(sysBlock, "*", "*", "dev"))
	for _, f := range append(devs, parts...) {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if strings.TrimSpace(string(data)) == want {
			rel, _ := filepath.Rel(sysBlock, f)
			return strings.SplitN(rel, string(filepath.Separator), 2)[0], nil
		}
	}
	return "", nil
}

// List returns the whole disks under sysBlock other than root, with what
// blkid finds on each. Virtual, removable and empty devices, and ones
// without a device node, are left out.
func List(ctx context.Context, sysBlock, devDir, root string) ([]Disk, error) {
	entries, err := os.ReadDir(sysBlock)
	if err != nil {
		return nil, err
	}
	var out []Disk
	for _, e := range entries {
		name := e.Name()
		if name == root || hasAnyPrefix(name, virtualPrefixes) {
			continue
		}
		if readTrimmed(filepath.Join(sysBlock, name, "removable")) == "1" || readTrimmed(filepath.Join(sysBlock, name, "size")) == "0" {
			continue
		}
		d := Disk{Name: name, Dev: filepath.Join(devDir, name)}
		if _, err := os.Stat(d.Dev); err != nil {
			continue
		}
		if err := probe(ctx, &d); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// probe reads a disk's signatures with blkid's low-level probe, which
// looks at the device itself, not at a cache.
func probe(ctx context.Context, d *Disk) error {
	out, err := exec.CommandContext(ctx, "blkid", "-p", "-o", "export", d.Dev).Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 2 {
		return nil // nothing found: blank
	}
	if err != nil {
		return fmt.Errorf("blkid %s: %w", d.Dev, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		k, v, _ := strings.Cut(line, "=")
		switch k {
		case "TYPE":
			d.Type = v
		case "LABEL":
			d.Label = v
		case "PTTYPE":
			d.PartitionTable = v
		}
	}
	if d.Type == "" && d.PartitionTable == "" {
		// A signature blkid names otherwise (RAID member, LVM): not blank.
		d.Type = "unknown"
	}
	return nil
}

func readTrimmed(path string) string {
	data, _ := os.ReadFile(path)
	return strings.TrimSpace(string(data))
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
