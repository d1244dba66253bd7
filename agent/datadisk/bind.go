package datadisk

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/harmonykaas/harmony/internal/procfs"
)

// Bind puts one directory of the data disk at a path of the system, so
// that a disk can hold the state of more than one service (the
// appliance's: etcd, the controller and its backups) and a reimage, which
// replaces everything but this disk, keeps all of it.
type Bind struct {
	// Dir is a directory at the top of the data disk ("controller").
	Dir string
	// Target is where it is mounted ("/var/lib/private/harmony-controller").
	Target string
}

func (b Bind) String() string { return b.Dir + ":" + b.Target }

var bindDirName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// ParseBind reads "DIR:TARGET".
func ParseBind(s string) (Bind, error) {
	dir, target, ok := strings.Cut(s, ":")
	if !ok {
		return Bind{}, fmt.Errorf("%q: want DIR:TARGET", s)
	}
	if !bindDirName.MatchString(dir) {
		return Bind{}, fmt.Errorf("%q: DIR %q must be one name of lower-case letters, digits and dashes", s, dir)
	}
	if !path.IsAbs(target) || path.Clean(target) != target || target == "/" {
		return Bind{}, fmt.Errorf("%q: TARGET %q must be a clean absolute path other than /", s, target)
	}
	return Bind{Dir: dir, Target: target}, nil
}

// BindAll mounts each bind's directory of the data disk mounted at
// dataDir at its target, making the directory (0700) the first time. A
// target that is that directory's mount already is left as it is, so a
// second run does nothing. With no data disk at dataDir it fails: a
// service whose state is meant to be on the disk must not start with it
// on the system disk, where a reimage would lose it.
func BindAll(dataDir string, binds []Bind, log *slog.Logger) error {
	disk, mounted, err := procfs.MountAt(filepath.Clean(dataDir))
	if err != nil {
		return err
	}
	if !mounted {
		return fmt.Errorf("no data disk is mounted at %s, and %s keep their state on it: attach the image's data disk", dataDir, bindNames(binds))
	}
	for _, b := range binds {
		if err := bind(disk, dataDir, b, log); err != nil {
			return fmt.Errorf("bind %s: %w", b, err)
		}
	}
	return nil
}

func bind(disk procfs.Mount, dataDir string, b Bind, log *slog.Logger) error {
	source := filepath.Join(dataDir, b.Dir)
	info, err := os.Lstat(source)
	if errors.Is(err, fs.ErrNotExist) {
		err = os.Mkdir(source, 0o700)
		if err == nil {
			info, err = os.Lstat(source)
		}
	}
	if err != nil {
		return err
	}
	if !info.IsDir() {
		return fmt.Errorf("%s is a %v, not a directory; left alone", source, info.Mode().Type())
	}
	// The parents are private too: systemd wants /var/lib/private 0700.
	if err := os.MkdirAll(b.Target, 0o700); err != nil {
		return err
	}
	there, mounted, err := procfs.MountAt(b.Target)
	if err != nil {
		return err
	}
	if mounted {
		if there.Major == disk.Major && there.Minor == disk.Minor && there.Root == path.Join(disk.Root, b.Dir) {
			return nil
		}
		return fmt.Errorf("%s is a mount point already, of %s %s, not the data disk's %s", b.Target, there.Source, there.Root, b.Dir)
	}
	if entries, err := os.ReadDir(b.Target); err == nil && len(entries) > 0 {
		// Not an error: a package's empty-but-for-defaults directory
		// (etcd's /var/lib/etcd) is hidden the same way.
		log.Warn("the system disk's directory is not empty; the data disk's hides it", "target", b.Target, "entries", len(entries))
	}
	if err := unix.Mount(source, b.Target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("mount %s at %s: %w", source, b.Target, err)
	}
	log.Info("data disk directory bound", "dir", b.Dir, "target", b.Target)
	return nil
}

func bindNames(binds []Bind) string {
	names := make([]string, len(binds))
	for i, b := range binds {
		names[i] = b.Target
	}
	return strings.Join(names, ", ")
}
