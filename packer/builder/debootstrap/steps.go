package debootstrap

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/packer-plugin-sdk/chroot"
	"github.com/hashicorp/packer-plugin-sdk/multistep"
	"github.com/hashicorp/packer-plugin-sdk/multistep/commonsteps"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"
	"golang.org/x/sys/unix"

	"github.com/harmonykaas/harmony/packer/internal/disk"
)

// stepRootfs makes the root file system. The root always comes out of
// the cache tarball: when there is none, debootstrap makes a base in a
// scratch directory, the base is saved to the cache and deleted, and the
// root is restored from the tarball just made. A first build and a cached
// one thus get their tree the same way, and whatever the tarball does not
// carry, neither has (a first image with an ACL its rebuild lacked made
// `make reproducible` fail on a cold machine).
type stepRootfs struct {
	// bootstrap makes a base in dir; nil is debootstrapBase. Tests
	// substitute a small tree to run the real cache path without a mirror.
	bootstrap func(ctx context.Context, ui packersdk.Ui, c *Config, dir string) error
}

func (s *stepRootfs) Run(ctx context.Context, state multistep.StateBag) multistep.StepAction {
	c := state.Get("config").(*Config)
	ui := state.Get("ui").(packersdk.Ui)
	root := state.Get("root").(string)

	if err := os.MkdirAll(c.CacheDir, 0o755); err != nil {
		return halt(state, fmt.Errorf("harmony-debootstrap: cache_dir: %w", err))
	}
	tarball := filepath.Join(c.CacheDir, "debootstrap-"+cacheKey(c)+".tar")
	if _, err := os.Stat(tarball); err == nil {
		ui.Say("harmony-debootstrap: root file system from the cache: " + tarball)
	} else if err := s.makeBase(ctx, ui, c, scratchDir(root), tarball); err != nil {
		return halt(state, err)
	}
	if err := restoreTree(ctx, ui, tarball, root); err != nil {
		return halt(state, err)
	}
	return multistep.ActionContinue
}

func (s *stepRootfs) Cleanup(state multistep.StateBag) {
	c := state.Get("config").(*Config)
	ui := state.Get("ui").(packersdk.Ui)
	root := state.Get("root").(string)
	dirs := []string{scratchDir(root)}
	if !c.KeepRootfs {
		dirs = append(dirs, root)
	}
	for _, dir := range dirs {
		if err := removeTree(dir); err != nil {
			ui.Error(err.Error())
		}
	}
}

// scratchDir is where debootstrap makes a base before it is cached.
func scratchDir(root string) string { return root + ".debootstrap" }

// makeBase debootstraps a base in dir, saves it as tarball and deletes
// dir: the build's root comes from the tarball, never from dir.
func (s *stepRootfs) makeBase(ctx context.Context, ui packersdk.Ui, c *Config, dir, tarball string) error {
	bootstrap := s.bootstrap
	if bootstrap == nil {
		bootstrap = debootstrapBase
	}
	if err := removeTree(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("harmony-debootstrap: %w", err)
	}
	err := bootstrap(ctx, ui, c, dir)
	if err == nil {
		err = saveTree(ctx, ui, dir, tarball)
	}
	if rerr := removeTree(dir); err == nil {
		err = rerr
	}
	return err
}

// cacheTarFlags keep everything mke2fs -d copies from a tree into the
// disk: owners by number, modes, and every extended attribute in every
// namespace (security.capability for file capabilities, user.*, and the
// POSIX ACLs in system.posix_acl_*, which --acls carries as well). On
// extraction GNU tar restores only user.* unless --xattrs-include says
// otherwise; it sets them after chown, which would clear a capability.
var cacheTarFlags = []string{"--numeric-owner", "--xattrs", "--xattrs-include=*", "--acls"}

// saveTree writes dir to tarball whole, or not at all.
func saveTree(ctx context.Context, ui packersdk.Ui, dir, tarball string) error {
	partial := tarball + ".partial"
	args := append(slices.Clone(cacheTarFlags), "-cpf", partial, "-C", dir, ".")
	if err := run(ctx, ui, "tar", args...); err != nil {
		os.Remove(partial)
		return fmt.Errorf("harmony-debootstrap: save the base to the cache: %w", err)
	}
	if err := os.Rename(partial, tarball); err != nil {
		os.Remove(partial)
		return fmt.Errorf("harmony-debootstrap: save the base to the cache: %w", err)
	}
	return nil
}

// restoreTree replaces dir with the tree in tarball.
func restoreTree(ctx context.Context, ui packersdk.Ui, tarball, dir string) error {
	if err := removeTree(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("harmony-debootstrap: %w", err)
	}
	args := append(slices.Clone(cacheTarFlags), "-xpf", tarball, "-C", dir)
	if err := run(ctx, ui, "tar", args...); err != nil {
		return fmt.Errorf("harmony-debootstrap: restore the root from %s: %w", tarball, err)
	}
	return nil
}

// removeTree deletes dir. A build killed while provisioning leaves its
// mounts: never delete through them (a bind-mounted /dev).
func removeTree(dir string) error {
	if err := unmountUnder(dir); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("harmony-debootstrap: remove %s: %w", dir, err)
	}
	return nil
}

// debootstrapBase makes the base in root: debootstrap, the suite's
// updates, no documentation, no host identity, no caches.
func debootstrapBase(ctx context.Context, ui packersdk.Ui, c *Config, root string) error {
	ui.Say(fmt.Sprintf("harmony-debootstrap: debootstrap %s (%s) from %s", c.Suite, c.Variant, c.Mirror))
	args := []string{"--variant=" + c.Variant, "--include=" + strings.Join(sortedUnique(c.Include), ","), c.Suite, root, c.Mirror}
	if c.Variant == "-" {
		args = args[1:]
	}
	if err := run(ctx, ui, "debootstrap", args...); err != nil {
		return err
	}
	// The suite, its updates and its security updates, all applied now:
	// a golden image starts patched.
	sources := fmt.Sprintf("deb %s %s main\ndeb %s %s-updates main\ndeb %s %s-security main\n",
		c.Mirror, c.Suite, c.Mirror, c.Suite, c.SecurityMirror, c.Suite)
	if err := os.WriteFile(filepath.Join(root, "etc/apt/sources.list"), []byte(sources), 0o644); err != nil {
		return fmt.Errorf("harmony-debootstrap: %w", err)
	}
	ui.Say("harmony-debootstrap: applying " + c.Suite + "-updates and " + c.Suite + "-security")
	upgrade := &chrootMounts{root: root}
	if err := upgrade.mount(); err != nil {
		upgrade.unmount()
		return err
	}
	err := run(ctx, ui, "chroot", root, "apt-get", "update", "-q")
	if err == nil {
		err = run(ctx, ui, "chroot", root, "apt-get", "dist-upgrade", "-y", "-q", "--no-install-recommends")
	}
	if err == nil {
		// An upgraded kernel leaves the old one: keep only the newest, so
		// the disk has one kernel to boot.
		err = run(ctx, ui, "chroot", root, "/bin/sh", "-ec", purgeOldKernels)
	}
	if err == nil && len(c.InitrdModules) > 0 {
		err = listInitrdModules(ctx, ui, root, c.InitrdModules, c.epoch)
	}
	if err == nil {
		err = stripDocs(root)
	}
	if uerr := upgrade.unmount(); err == nil {
		err = uerr
	}
	if err != nil {
		return err
	}
	// What every build wants from the base: no host identity, no caches.
	if err := os.WriteFile(filepath.Join(root, "etc/machine-id"), nil, 0o444); err != nil {
		return fmt.Errorf("harmony-debootstrap: %w", err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/hostname"), []byte("localhost\n"), 0o644); err != nil {
		return fmt.Errorf("harmony-debootstrap: %w", err)
	}
	return run(ctx, ui, "chroot", root, "apt-get", "clean")
}

const purgeOldKernels = `keep=$(ls /boot/vmlinuz-* | sed 's#^/boot/vmlinuz-##' | sort -V | tail -n 1)
for p in $(dpkg-query -W -f='${Package}\n' 'linux-image-[0-9]*'); do
  [ "$p" = "linux-image-$keep" ] || apt-get purge -y -q "$p"
done`

// listInitrdModules makes the initrd carry only modules (and what they
// depend on), now and whenever a package makes it again.
func listInitrdModules(ctx context.Context, ui packersdk.Ui, root string, modules []string, epoch int64) error {
	conf := "# harmony-debootstrap: only the modules listed in /etc/initramfs-tools/modules.\nMODULES=list\n"
	list := "# harmony-debootstrap: the builder's initrd_modules.\n" + strings.Join(modules, "\n") + "\n"
	for path, body := range map[string]string{"etc/initramfs-tools/conf.d/harmony-modules.conf": conf, "etc/initramfs-tools/modules": list} {
		if err := os.WriteFile(filepath.Join(root, path), []byte(body), 0o644); err != nil {
			return fmt.Errorf("harmony-debootstrap: initrd_modules: %w", err)
		}
	}
	ui.Say("harmony-debootstrap: initrd with only " + strings.Join(modules, ", "))
	// mkinitramfs makes the same bytes again when SOURCE_DATE_EPOCH is set.
	args := []string{root, "env", "SOURCE_DATE_EPOCH=" + strconv.FormatInt(epoch, 10), "/bin/sh", "-ec", remakeInitrd, "remake-initrd"}
	out, err := output(ctx, "chroot", append(args, modules...)...)
	if err != nil {
		return err
	}
	// The script's last line: the initrd's size and module count.
	lines := strings.Split(strings.TrimSpace(out), "\n")
	ui.Say(lines[len(lines)-1])
	return nil
}

// remakeInitrd makes the one kernel's initrd again and checks that it
// holds each module given as an argument, or that the kernel has it built
// in: initramfs-tools skips a module it cannot find without a word.
const remakeInitrd = `v=$(ls /lib/modules)
for m in "$@"; do
  modinfo -k "$v" -F name "$m" >/dev/null 2>&1 || { echo "initrd_modules: $m is not a module of kernel $v" >&2; exit 1; }
done
update-initramfs -u -k "$v"
held=$(lsinitramfs "/boot/initrd.img-$v")
for m in "$@"; do
  f=$(modinfo -k "$v" -F filename "$m")
  case "$f" in
  /*) echo "$held" | grep -q "/${f##*/}\$" || { echo "initrd_modules: $m ($f) is not in the initrd" >&2; exit 1; } ;;
  esac
done
echo "harmony-debootstrap: initrd $(du -k "/boot/initrd.img-$v" | cut -f1) KiB, $(echo "$held" | grep -c '\.ko') modules"`

// noDocs keeps documentation out of the image, now and for every package
// installed later; the copyright files stay.
const noDocs = `# harmony-debootstrap: an appliance image carries no documentation.
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/lintian/*
path-exclude=/usr/share/locale/*
path-include=/usr/share/locale/locale.alias
`

func stripDocs(root string) error {
	if err := os.WriteFile(filepath.Join(root, "etc/dpkg/dpkg.cfg.d/harmony-nodoc"), []byte(noDocs), 0o644); err != nil {
		return err
	}
	for _, dir := range []string{"usr/share/man", "usr/share/info", "usr/share/lintian", "usr/share/locale", "usr/share/doc"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			if name := d.Name(); name == "copyright" || name == "locale.alias" {
				return nil
			}
			return os.Remove(p)
		})
		if err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("harmony-debootstrap: strip %s: %w", dir, err)
		}
	}
	return nil
}

// cacheFormat versions the tarball itself: "xattrs" ones carry extended
// attributes and ACLs (cacheTarFlags). Tarballs from before, keyed
// without it, lost them and must not be reused.
const cacheFormat = "xattrs"

// cacheKey names a debootstrap result by everything that shapes it.
func cacheKey(c *Config) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\nnodoc\n%s\n%s\n%s\n%s\namd64\n%s\n", cacheFormat, c.Suite, c.Mirror, c.SecurityMirror, c.Variant, strings.Join(sortedUnique(c.Include), ","))
	// Only when set, so the keys of Debian's default initrd stay as they were.
	if len(c.InitrdModules) > 0 {
		fmt.Fprintf(h, "initrd_modules\n%s\n", strings.Join(sortedUnique(c.InitrdModules), ","))
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func sortedUnique(p []string) []string {
	out := slices.Clone(p)
	slices.Sort(out)
	return slices.Compact(out)
}

// chrootMounts are the file systems provisioners need inside the root,
// and the files the builder puts there for the duration.
type chrootMounts struct {
	root    string
	mounted []string
	added   []string
}

// policyRC keeps apt from starting daemons inside the chroot.
const policyRC = "#!/bin/sh\n# harmony-debootstrap: no daemons start while the image is built.\nexit 101\n"

func (m *chrootMounts) mount() error {
	for _, mt := range []struct{ src, dir, fstype string }{
		{"proc", "proc", "proc"},
		{"sysfs", "sys", "sysfs"},
		{"/dev", "dev", ""},
		{"devpts", "dev/pts", "devpts"},
	} {
		target := filepath.Join(m.root, mt.dir)
		if err := os.MkdirAll(target, 0o755); err != nil {
			return err
		}
		var err error
		if mt.fstype == "" {
			err = unix.Mount(mt.src, target, "", unix.MS_BIND, "")
		} else {
			err = unix.Mount(mt.src, target, mt.fstype, unix.MS_NOSUID|unix.MS_NOEXEC, "")
		}
		if err != nil {
			return fmt.Errorf("harmony-debootstrap: mount %s on %s: %w", mt.src, target, err)
		}
		m.mounted = append(m.mounted, target)
	}
	for name, body := range map[string]string{"usr/sbin/policy-rc.d": policyRC} {
		p := filepath.Join(m.root, name)
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			return err
		}
		m.added = append(m.added, p)
	}
	// Name resolution for apt: the host's resolv.conf, removed afterwards.
	resolv := filepath.Join(m.root, "etc/resolv.conf")
	if _, err := os.Lstat(resolv); os.IsNotExist(err) {
		data, err := os.ReadFile("/etc/resolv.conf")
		if err == nil {
			if err := os.WriteFile(resolv, data, 0o644); err != nil {
				return err
			}
			m.added = append(m.added, resolv)
		}
	}
	return nil
}

// unmount undoes mount; it is safe to call more than once.
func (m *chrootMounts) unmount() error {
	for _, p := range m.added {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	m.added = nil
	for i := len(m.mounted) - 1; i >= 0; i-- {
		if err := unix.Unmount(m.mounted[i], 0); err != nil && err != unix.EINVAL {
			// Busy (a provisioner left a process): detach it instead.
			if err := unix.Unmount(m.mounted[i], unix.MNT_DETACH); err != nil && err != unix.EINVAL {
				return fmt.Errorf("harmony-debootstrap: unmount %s: %w", m.mounted[i], err)
			}
		}
	}
	m.mounted = nil
	return unmountUnder(m.root)
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return err
	}
	defer f.Close()
	var under []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 1 {
			p := strings.ReplaceAll(fields[1], `\040`, " ")
			if p == dir || strings.HasPrefix(p, dir+"/") {
				under = append(under, p)
			}
		}
	}
	slices.SortFunc(under, func(a, b string) int { return len(b) - len(a) })
	for _, p := range under {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && err != unix.EINVAL {
			return fmt.Errorf("harmony-debootstrap: unmount %s: %w", p, err)
		}
	}
	return sc.Err()
}

type stepMount struct{ mounts *chrootMounts }

func (s *stepMount) Run(_ context.Context, state multistep.StateBag) multistep.StepAction {
	if err := s.mounts.mount(); err != nil {
		return halt(state, err)
	}
	return multistep.ActionContinue
}

func (s *stepMount) Cleanup(state multistep.StateBag) {
	if err := s.mounts.unmount(); err != nil {
		state.Get("ui").(packersdk.Ui).Error(err.Error())
	}
}

// stepProvision runs the build's provisioners in the chroot.
type stepProvision struct{}

func (s *stepProvision) Run(ctx context.Context, state multistep.StateBag) multistep.StepAction {
	hook := state.Get("hook").(packersdk.Hook)
	ui := state.Get("ui").(packersdk.Ui)
	comm := &chroot.Communicator{
		Chroot:     state.Get("root").(string),
		CmdWrapper: func(command string) (string, error) { return command, nil },
	}
	data := commonsteps.PopulateProvisionHookData(state)
	state.Put("generated_data", data)
	if err := hook.Run(ctx, packersdk.HookProvision, ui, comm, data); err != nil {
		return halt(state, fmt.Errorf("harmony-debootstrap: provisioning: %w", err))
	}
	return multistep.ActionContinue
}

func (s *stepProvision) Cleanup(multistep.StateBag) {}

// stepWriteDisk unmounts, writes fstab, copies image.json out and writes
// the disk.
type stepWriteDisk struct{ mounts *chrootMounts }

func (s *stepWriteDisk) Run(ctx context.Context, state multistep.StateBag) multistep.StepAction {
	c := state.Get("config").(*Config)
	ui := state.Get("ui").(packersdk.Ui)
	root := state.Get("root").(string)
	if err := s.mounts.unmount(); err != nil {
		return halt(state, err)
	}

	art := &Artifact{Disk: filepath.Join(c.OutputDir, c.ImageName+".raw")}
	manifest := filepath.Join(root, "etc/harmony/image.json")
	if _, err := os.Stat(manifest); err == nil {
		art.ImageJSON = filepath.Join(c.OutputDir, "image.json")
		if err := copyFile(manifest, art.ImageJSON); err != nil {
			return halt(state, err)
		}
	}

	// fstab names the file systems by the UUIDs the disk will carry; they
	// derive from the seed alone.
	ids := disk.UUIDs(c.ImageName)
	fstab := fmt.Sprintf("# harmony-debootstrap\nUUID=%s / ext4 defaults,errors=remount-ro 0 1\nUUID=%s /boot/efi vfat umask=0077,noauto,x-systemd.automount 0 2\n",
		ids.RootFSUUID, ids.ESPVolumeID())
	if err := os.MkdirAll(filepath.Join(root, "boot/efi"), 0o755); err != nil {
		return halt(state, err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/fstab"), []byte(fstab), 0o644); err != nil {
		return halt(state, err)
	}

	ui.Say(fmt.Sprintf("harmony-debootstrap: writing %s (%s)", art.Disk, c.DiskSize))
	start := time.Now()
	layout, err := disk.Write(ctx, disk.Options{
		Output:     art.Disk,
		Root:       root,
		Size:       c.diskBytes,
		ESPSize:    int64(c.ESPSizeMiB) << 20,
		Epoch:      time.Unix(c.epoch, 0),
		Seed:       c.ImageName,
		KernelArgs: c.KernelArgs,
	})
	if err != nil {
		return halt(state, err)
	}
	ui.Message(fmt.Sprintf("root partition at byte %d (PARTUUID %s), kernel %s, in %s",
		layout.RootOffset, layout.RootPartUUID, filepath.Base(layout.Kernel), time.Since(start).Round(time.Second)))
	state.Put("artifact", art)
	return multistep.ActionContinue
}

func (s *stepWriteDisk) Cleanup(multistep.StateBag) {}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// run runs a command, its output going to the UI on failure.
func run(ctx context.Context, ui packersdk.Ui, name string, args ...string) error {
	_, err := output(ctx, name, args...)
	return err
}

// output runs name and returns what it printed; on failure, the error
// carries the last lines.
func output(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C", "DEBIAN_FRONTEND=noninteractive")
	out, err := cmd.CombinedOutput()
	if err != nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		return "", fmt.Errorf("harmony-debootstrap: %s: %w\n%s", name, err, strings.Join(lines, "\n"))
	}
	return string(out), nil
}
