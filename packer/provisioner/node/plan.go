package node

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/harmonykaas/harmony/images/components"
)

// Where things go in the image.
const (
	imagesDir = components.ContainerImagesDir
	unitDir   = "/etc/systemd/system"
	// A link to /dev/null here masks the systemd generator of its name.
	generatorDir = "/etc/systemd/system-generators"
)

// maskedGenerators are systemd's generators with nothing to find on these
// images: no encrypted, integrity or verity volumes, no swap to resume
// from, no rc.local, no offline updates, the root named on the kernel's
// command line and the ESP in /etc/fstab rather than found by partition
// type, and no SysV script without a native unit (the few in /etc/init.d
// all have one, or are masked). systemd runs every generator at each boot
// and each daemon-reload before it loads a unit: an exec of a binary
// linked to libsystemd-shared each, milliseconds on a VM and about 0.1 s
// under TCG, for nothing. The fstab, getty, debug (systemd.mask= on the
// kernel's command line, for rescue) and run generators stay.
var maskedGenerators = []string{
	"systemd-cryptsetup-generator", "systemd-integritysetup-generator", "systemd-veritysetup-generator",
	"systemd-hibernate-resume-generator", "systemd-rc-local-generator", "systemd-system-update-generator",
	"systemd-gpt-auto-generator", "systemd-sysv-generator",
}

// upload is one local file staged on the machine.
type upload struct {
	local  string
	remote string // relative to the staging directory
}

// installed is one staged file and where install.sh puts it.
type installed struct {
	Staged string
	Dest   string
	Mode   string
}

type link struct{ Path, Target string }

// plan is everything one provisioning run stages and installs; the
// scripts are rendered from it.
type plan struct {
	Role    string
	Staging string
	// Packages are name=version pins; PackageNames the names alone.
	Packages     []string
	PackageNames []string
	Files        []installed
	Links        []link
	Mask         []string
	Enable       []string
	// CNIPlugins are the only plugins kept in CNIBinDir; Remove are files
	// and directories the packages install and a node never uses.
	CNIPlugins []string
	CNIBinDir  string
	Remove     []string

	uploads []upload
	inputs  *inputs
}

func newPlan(c *Config) (*plan, error) {
	in, err := loadInputs(c)
	if err != nil {
		return nil, fmt.Errorf("harmony-node: %w", err)
	}
	p := &plan{Role: c.Role, Staging: c.StagingDir, inputs: in}
	for _, pkg := range in.Packages {
		p.Packages = append(p.Packages, pkg.Name+"="+pkg.Version)
		p.PackageNames = append(p.PackageNames, pkg.Name)
	}

	p.add(c.AgentBinary, "bin/harmony-agent", "/usr/local/bin/harmony-agent", "0755")
	// The network comes up with the static address from guestinfo
	// (harmony-network.service), else by DHCP
	// (images/rootfs/etc/systemd/network).
	p.Enable = append(p.Enable, "systemd-networkd.service")
	// The agent runs etcd, keepalived and HAProxy as harmony-* units.
	// e2scrub checks ext4 file systems on LVM, which no image has; its
	// reaper would still run at every boot. systemd loads drm, fuse,
	// loop and dm_mod early in case something wants them: nothing here
	// uses drm, and the others load when their device is first opened
	// (/dev/fuse, /dev/loop-control, /dev/mapper/control).
	p.Mask = []string{"etcd.service", "keepalived.service", "haproxy.service",
		"e2scrub_reap.service", "e2scrub_all.timer",
		"modprobe@drm.service", "modprobe@fuse.service", "modprobe@loop.service", "modprobe@dm_mod.service"}
	for _, g := range maskedGenerators {
		p.Links = append(p.Links, link{Path: path.Join(generatorDir, g), Target: "/dev/null"})
	}
	if c.Role == RoleControlPlane {
		p.add(c.ControllerBinary, "bin/harmony-controller", "/usr/local/bin/harmony-controller", "0755")
	} else {
		p.Enable = append(p.Enable, "containerd.service")
		// ipvsadm's LSB script only restores saved IPVS rules; kube-proxy
		// owns IPVS here. Unmasked, it runs at every boot to say it is not
		// configured, beside the agent's start.
		p.Mask = append(p.Mask, "ipvsadm.service")
		p.CNIPlugins, p.CNIBinDir = components.CNIPlugins(), components.CNIBinDir
		p.Remove = []string{
			// containerd's v1 shims: the CRI runs every pod with runc v2.
			"/usr/bin/containerd-shim", "/usr/bin/containerd-shim-runc-v1",
			// Perl's library (perl-modules), there for keepalived's SNMP
			// library, which links libperl but runs no Perl unless SNMP
			// is configured; it never is. perl-base stays.
			"/usr/share/perl",
			// udev's hardware database: vendor and model names for
			// devices, which neither interface naming nor anything on a
			// node reads.
			"/usr/lib/udev/hwdb.bin", "/usr/lib/udev/hwdb.d",
		}
	}
	for _, u := range unitsFor(c.Role) {
		p.add(filepath.Join(c.UnitsDir, u), "units/"+u, path.Join(unitDir, u), "0644")
		p.Enable = append(p.Enable, u)
		if timer, ok := strings.CutSuffix(u, ".timer"); ok {
			svc := timer + ".service"
			p.add(filepath.Join(c.UnitsDir, svc), "units/"+svc, path.Join(unitDir, svc), "0644")
		}
	}
	for _, d := range dropInsFor(c.Role) {
		p.add(filepath.Join(c.UnitsDir, d), "units/"+d, path.Join(unitDir, d), "0644")
	}

	// Every Kubernetes version under /opt; the newest (n) on PATH, where
	// the agent's --kubeadm default and the units look. The kubelet goes
	// through the link the agent repoints to the cluster's version.
	// A multi-call version is one file, each binary a link to it.
	for i, k := range in.Kubernetes {
		if k.Multicall != "" {
			p.add(filepath.Join(k.Dir, k.Multicall), path.Join("kubernetes", k.Version, k.Multicall),
				components.KubernetesBinary(k.Version, k.Multicall), "0755")
		}
		for _, b := range k.Binaries {
			dest := components.KubernetesBinary(k.Version, b)
			if k.Multicall != "" {
				p.Links = append(p.Links, link{Path: dest, Target: k.Multicall})
			} else {
				p.add(filepath.Join(k.Dir, b), path.Join("kubernetes", k.Version, b), dest, "0755")
			}
			switch {
			case i > 0:
			case b == "kubelet":
				p.Links = append(p.Links, link{Path: "/usr/bin/" + b, Target: components.KubeletLink},
					link{Path: components.KubeletLink, Target: dest})
			default:
				p.Links = append(p.Links, link{Path: "/usr/bin/" + b, Target: dest})
			}
		}
	}
	for _, b := range in.Binaries {
		p.add(b.Path, "binaries/"+path.Base(b.Dest), b.Dest, "0755")
	}
	// Images of one layer share one archive.
	staged := map[string]bool{}
	for _, img := range in.Images {
		if !staged[img.File] {
			staged[img.File] = true
			p.add(img.Path, "images/"+img.File, path.Join(imagesDir, img.File), "0644")
		}
	}

	if c.OverlayDir != "" {
		if err := p.addOverlay(c.OverlayDir); err != nil {
			return nil, fmt.Errorf("harmony-node: overlay_dir: %w", err)
		}
	}
	return p, nil
}

// unitsFor lists the unit files from the repository's systemd/ directory
// that an image of role installs and enables.
func unitsFor(role string) []string {
	// harmony-network.service applies guestinfo.harmony.network before
	// systemd-networkd starts, and harmony-data-disk.service mounts the
	// data disk, on both images.
	units := []string{"harmony-agent.service", "harmony-network.service", "harmony-data-disk.service"}
	if role == RoleControlPlane {
		// The controller's daily backup: the timer is enabled, and its
		// service comes with it.
		return append(units, "harmony-controller.service", "harmony-controller-backup.timer")
	}
	return append(units, components.KubeletUnit, "harmony-images-import.service")
}

// dropInsFor returns the drop-ins (UNIT.d/NAME.conf under systemd/) that
// change a shared unit for one image.
func dropInsFor(role string) []string {
	if role == RoleControlPlane {
		// The appliance's data disk holds the controller's state and
		// backups beside etcd's, so that a reimage keeps them.
		return []string{"harmony-data-disk.service.d/appliance.conf"}
	}
	return []string{components.KubeletUnit + ".d/10-kubeadm.conf"}
}

// add stages a local file and installs it at dest.
func (p *plan) add(local, staged, dest, mode string) {
	p.uploads = append(p.uploads, upload{local: local, remote: staged})
	p.Files = append(p.Files, installed{Staged: staged, Dest: dest, Mode: mode})
}

// addOverlay installs every regular file under dir at the same path in
// the image, 0755 if it is executable here and 0644 otherwise.
func (p *plan) addOverlay(dir string) error {
	return filepath.WalkDir(dir, func(local string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, local)
		switch {
		case d.IsDir():
			return nil
		case !d.Type().IsRegular():
			return fmt.Errorf("%s: only regular files and directories are allowed", rel)
		case strings.ContainsAny(rel, " '\"$`\\"):
			return fmt.Errorf("%s: file names must not need shell quoting", rel)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := "0644"
		if info.Mode()&0o111 != 0 {
			mode = "0755"
		}
		rel = filepath.ToSlash(rel)
		p.add(local, "overlay/"+rel, "/"+rel, mode)
		return nil
	})
}

// dirs are the staging directories the uploads need, for one mkdir.
func (p *plan) dirs(staging string) []string {
	set := map[string]bool{staging: true}
	for _, u := range p.uploads {
		set[path.Join(staging, path.Dir(u.remote))] = true
	}
	return sortedKeys(set)
}

func (p *plan) bytes() int64 {
	var n int64
	for _, u := range p.uploads {
		if st, err := os.Stat(u.local); err == nil {
			n += st.Size()
		}
	}
	return n
}

// validName guards what goes into the scripts unquoted.
func validName(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || slices.Contains([]rune("._+:~-"), r))
	})
}
