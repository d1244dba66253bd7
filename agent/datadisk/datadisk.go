// Package datadisk finds a node's persistent data disk at boot, formats it
// the first time, and mounts it where etcd keeps its data. The disk is
// what an upgrade by reimage moves to the new VM, so the decisions here
// are about never formatting a disk that holds anything: only a disk
// with no signature at all is formatted, only when it is the one such
// disk, and a disk already ours is recognised by its label.
package datadisk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/harmonykaas/harmony/internal/procfs"
)

// Label marks a formatted data disk; pendingLabel one whose mkfs has not
// finished (a crash then), which is formatted again.
const (
	Label        = "harmony-data"
	pendingLabel = "harmony-data-new"
)

// Disk is a whole block device that is not the root's.
type Disk struct {
	Name string // sdb
	Dev  string // /dev/sdb
	// Type and Label are what blkid finds on it ("" for a blank disk);
	// PartitionTable is set when it has one.
	Type, Label, PartitionTable string
}

func (d Disk) blank() bool { return d.Type == "" && d.PartitionTable == "" }
func (d Disk) ours() bool  { return d.Type == "ext4" && d.Label == Label }

// Decision is what Choose decided.
type Decision struct {
	// Disk is the data disk; nil when there is none.
	Disk *Disk
	// Format is set for a blank disk (or one whose format did not finish).
	Format bool
	// Why explains the decision, for the log.
	Why string
}

// Choose picks the data disk among the disks that are not the root's. A
// disk with our label wins; otherwise the one blank disk is formatted.
// Anything else is never touched: two blank disks, or a disk with another
// file system or partition table, are an error to look at, not a guess.
func Choose(disks []Disk) (Decision, error) {
	var ours, blank, pending []Disk
	for _, d := range disks {
		switch {
		case d.ours():
			ours = append(ours, d)
		case d.Label == pendingLabel:
			pending = append(pending, d)
		case d.blank():
			blank = append(blank, d)
		}
	}
	switch {
	case len(ours) == 1:
		return Decision{Disk: &ours[0], Why: "labelled " + Label}, nil
	case len(ours) > 1:
		return Decision{}, fmt.Errorf("%d disks are labelled %s (%s): the node has two data disks; detach one", len(ours), Label, names(ours))
	case len(pending) == 1 && len(blank) == 0:
		return Decision{Disk: &pending[0], Format: true, Why: "its first format did not finish"}, nil
	case len(blank) == 1 && len(pending) == 0:
		return Decision{Disk: &blank[0], Format: true, Why: "the one blank disk"}, nil
	case len(blank)+len(pending) > 1:
		return Decision{}, fmt.Errorf("%d blank disks (%s): which is the data disk is not guessed; detach the others", len(blank)+len(pending), names(append(blank, pending...)))
	}
	if len(disks) > 0 {
		return Decision{Why: fmt.Sprintf("no blank disk and none labelled %s; left alone: %s", Label, names(disks))}, nil
	}
	return Decision{Why: "no disk besides the root's"}, nil
}

func names(ds []Disk) string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Name
		if d.Type != "" || d.PartitionTable != "" {
			out[i] += " (" + strings.Trim(d.Type+" "+d.PartitionTable, " ") + ")"
		}
	}
	return strings.Join(out, ", ")
}

// Config is where Mount looks and what it runs.
type Config struct {
	// SysBlock is /sys/block; DevDir /dev.
	SysBlock, DevDir string
	// Dir is the mount point (the etcd data directory).
	Dir string
	Log *slog.Logger
}

// Result says what Mount did.
type Result struct {
	Device    string
	Formatted bool
	// Already is set when Dir was a mount point before (the lab's bodies
	// get their data directory from the host).
	Already bool
	Why     string
}

// Mount finds, formats if it must, checks and mounts the data disk at
// cfg.Dir. With no data disk (a worker) it does nothing.
func Mount(ctx context.Context, cfg Config) (Result, error) {
	if mounted, err := IsMountPoint(cfg.Dir); err != nil {
		return Result{}, err
	} else if mounted {
		return Result{Already: true, Why: cfg.Dir + " is a mount point already"}, nil
	}
	root, err := rootDisk(cfg.SysBlock)
	if err != nil {
		return Result{}, err
	}
	if root == "" {
		// A container's overlay, not a VM's disk: no disk here is the
		// node's to format.
		return Result{Why: "the root file system is not on a disk"}, nil
	}
	disks, err := List(ctx, cfg.SysBlock, cfg.DevDir, root)
	if err != nil {
		return Result{}, err
	}
	d, err := Choose(disks)
	if err != nil {
		return Result{}, err
	}
	if d.Disk == nil {
		return Result{Why: d.Why}, nil
	}
	res := Result{Device: d.Disk.Dev, Formatted: d.Format, Why: d.Why}
	cfg.Log.Info("data disk", "device", d.Disk.Dev, "format", d.Format, "why", d.Why)
	if d.Format {
		if err := Format(ctx, d.Disk.Dev); err != nil {
			return res, err
		}
	}
	return res, mountChecked(ctx, d.Disk.Dev, cfg.Dir)
}

// Format makes an ext4 file system on dev under a pending label and only
// then gives it the data label, so that a crash in between leaves a disk
// that is formatted again, not one taken for finished.
func Format(ctx context.Context, dev string) error {
	// -m 0: no blocks reserved for root; etcd is the only writer.
	if out, err := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-L", pendingLabel, dev).CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.ext4 %s: %v: %s", dev, err, out)
	}
	if out, err := exec.CommandContext(ctx, "e2label", dev, Label).CombinedOutput(); err != nil {
		return fmt.Errorf("e2label %s: %v: %s", dev, err, out)
	}
	return nil
}

// mountChecked runs e2fsck as systemd-fsck would, then mounts.
func mountChecked(ctx context.Context, dev, dir string) error {
	err := exec.CommandContext(ctx, "e2fsck", "-p", dev).Run()
	var exit *exec.ExitError
	// 1: errors corrected; anything above needs a person.
	if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 1) {
		return fmt.Errorf("e2fsck %s: %w; not mounted (run e2fsck by hand)", dev, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := unix.Mount(dev, dir, "ext4", unix.MS_NOATIME, ""); err != nil {
		return fmt.Errorf("mount %s at %s: %w", dev, dir, err)
	}
	// The file system's root is etcd's data directory: etcd wants 0700.
	return os.Chmod(dir, 0o700)
}

// IsMountPoint reports whether something is mounted at dir, bind mounts
// of the same file system included (the lab's bodies get one).
func IsMountPoint(dir string) (bool, error) {
	_, ok, err := procfs.MountAt(filepath.Clean(dir))
	return ok, err
}
