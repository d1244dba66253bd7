//go:generate go tool packer-sdc mapstructure-to-hcl2 -type Config

package debootstrap

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/hashicorp/packer-plugin-sdk/common"
	"github.com/hashicorp/packer-plugin-sdk/template/config"
	"github.com/hashicorp/packer-plugin-sdk/template/interpolate"
)

// Config is the harmony-debootstrap builder's configuration.
type Config struct {
	common.PackerConfig `mapstructure:",squash"`

	// ImageName names the output files (<image_name>.raw) and seeds the
	// disk's UUIDs.
	ImageName string `mapstructure:"image_name" required:"true"`
	// Suite is the Debian release; bookworm by default.
	Suite string `mapstructure:"suite"`
	// Mirror is the Debian mirror; http://deb.debian.org/debian by default.
	Mirror string `mapstructure:"mirror"`
	// SecurityMirror serves <suite>-security; the base gets every security
	// update when it is made. http://deb.debian.org/debian-security by
	// default.
	SecurityMirror string `mapstructure:"security_mirror"`
	// Variant is debootstrap's --variant; minbase by default.
	Variant string `mapstructure:"variant"`
	// Include are the packages debootstrap installs. The kernel, systemd,
	// udev, initramfs-tools and systemd-boot-efi are always added: the
	// disk cannot boot without them.
	Include []string `mapstructure:"include"`
	// CacheDir keeps each debootstrap result as a tarball named by a hash
	// of suite, mirror, variant and packages; a warm cache skips the
	// download.
	CacheDir string `mapstructure:"cache_dir" required:"true"`
	// OutputDir receives <image_name>.raw and image.json.
	OutputDir string `mapstructure:"output_dir" required:"true"`
	// DiskSize is the raw disk's size, e.g. "6GiB" or "4096MiB".
	DiskSize string `mapstructure:"disk_size"`
	// ESPSizeMiB is the EFI system partition's size; 128 by default.
	ESPSizeMiB int `mapstructure:"esp_size_mib"`
	// KernelArgs are added to the kernel command line.
	KernelArgs string `mapstructure:"kernel_args"`
	// InitrdModules, when set, are the only modules the initrd carries,
	// with what they depend on (initramfs-tools MODULES=list): the
	// drivers of the disk controller the root sits behind, and of any
	// device wanted before udev's coldplug in the root. Unset, the
	// initrd is Debian's default (MODULES=most), nearly every storage
	// and network driver of the kernel, which a VM unpacks and probes at
	// every boot.
	InitrdModules []string `mapstructure:"initrd_modules"`
	// SourceDateEpoch is every timestamp in the disk; SOURCE_DATE_EPOCH
	// by default. Required one way or the other.
	SourceDateEpoch string `mapstructure:"source_date_epoch"`
	// KeepRootfs leaves the root file system directory (debugging).
	KeepRootfs bool `mapstructure:"keep_rootfs"`

	ctx       interpolate.Context
	diskBytes int64
	epoch     int64
}

// bootPackages make the disk bootable; they are always included.
var bootPackages = []string{"linux-image-cloud-amd64", "systemd-sysv", "udev", "initramfs-tools", "zstd", "systemd-boot-efi"}

var (
	packageName = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)
	moduleName  = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,55}$`)
	sizePattern = regexp.MustCompile(`^([0-9]+)(MiB|GiB)$`)
)

func (c *Config) prepare(raws ...any) error {
	if err := config.Decode(c, &config.DecodeOpts{
		PluginType:         "harmony-debootstrap",
		Interpolate:        true,
		InterpolateContext: &c.ctx,
	}, raws...); err != nil {
		return err
	}
	if c.Suite == "" {
		c.Suite = "bookworm"
	}
	if c.Mirror == "" {
		c.Mirror = "http://deb.debian.org/debian"
	}
	if c.SecurityMirror == "" {
		c.SecurityMirror = "http://deb.debian.org/debian-security"
	}
	if c.Variant == "" {
		c.Variant = "minbase"
	}
	if c.DiskSize == "" {
		c.DiskSize = "4GiB"
	}
	if c.ESPSizeMiB == 0 {
		c.ESPSizeMiB = 128
	}
	if c.SourceDateEpoch == "" {
		c.SourceDateEpoch = os.Getenv("SOURCE_DATE_EPOCH")
	}
	for _, p := range bootPackages {
		if !contains(c.Include, p) {
			c.Include = append(c.Include, p)
		}
	}

	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`).MatchString(c.ImageName) {
		bad("image_name %q: required, lowercase letters, digits and '-'", c.ImageName)
	}
	if !packageName.MatchString(c.Suite) {
		bad("suite %q: want a Debian suite name such as bookworm", c.Suite)
	}
	for field, mirror := range map[string]string{"mirror": c.Mirror, "security_mirror": c.SecurityMirror} {
		if u, err := url.Parse(mirror); err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "file") {
			bad("%s %q: want an http(s) or file URL", field, mirror)
		}
	}
	switch c.Variant {
	case "minbase", "buildd", "-":
	default:
		bad("variant %q: want minbase, buildd or - (debootstrap's)", c.Variant)
	}
	for i, p := range c.Include {
		if !packageName.MatchString(p) {
			bad("include[%d] %q: not a Debian package name", i, p)
		}
	}
	for i, m := range c.InitrdModules {
		if !moduleName.MatchString(m) {
			bad("initrd_modules[%d] %q: not a kernel module name", i, m)
		}
	}
	if c.CacheDir == "" {
		bad("cache_dir: required")
	}
	if c.OutputDir == "" {
		bad("output_dir: required")
	}
	if m := sizePattern.FindStringSubmatch(c.DiskSize); m == nil {
		bad("disk_size %q: want a size such as 6GiB or 4096MiB", c.DiskSize)
	} else {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		c.diskBytes = n << 20
		if m[2] == "GiB" {
			c.diskBytes = n << 30
		}
		if c.diskBytes < 1<<30 || c.diskBytes > 2<<40 {
			bad("disk_size %q: want 1GiB to 2048GiB", c.DiskSize)
		}
	}
	if c.ESPSizeMiB < 64 || c.ESPSizeMiB > 1024 {
		bad("esp_size_mib %d: want 64-1024", c.ESPSizeMiB)
	}
	if strings.ContainsAny(c.KernelArgs, "\n\r") {
		bad("kernel_args: must be one line")
	}
	if c.SourceDateEpoch == "" {
		bad("source_date_epoch: required (or set SOURCE_DATE_EPOCH): the disk's bytes depend on it")
	} else if n, err := strconv.ParseInt(c.SourceDateEpoch, 10, 64); err != nil || n < 0 {
		bad("source_date_epoch %q: want seconds since 1970", c.SourceDateEpoch)
	} else {
		c.epoch = n
	}
	return errors.Join(errs...)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
