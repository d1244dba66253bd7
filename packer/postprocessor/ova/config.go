//go:generate go tool packer-sdc mapstructure-to-hcl2 -type Config

package ova

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hashicorp/packer-plugin-sdk/common"
	"github.com/hashicorp/packer-plugin-sdk/template/config"
	"github.com/hashicorp/packer-plugin-sdk/template/interpolate"

	"github.com/harmonykaas/harmony/ova/archive"
)

// Roles, as the harmony-node provisioner records them in image.json.
const (
	RoleNode         = "node"
	RoleControlPlane = "control-plane"
)

// Config is the harmony-ova post-processor's configuration.
type Config struct {
	common.PackerConfig `mapstructure:",squash"`

	// Output is the OVA file to write.
	Output string `mapstructure:"output" required:"true"`
	// Role is "node" or "control-plane"; by default the role image.json
	// records.
	Role string `mapstructure:"role"`
	// VMName is the virtual system's name; harmony-<role> by default.
	VMName string `mapstructure:"vm_name"`
	// CPUs and MemoryMiB are the VM's defaults (2 and 4096; the
	// control-plane appliance 4 and 8192).
	CPUs      int `mapstructure:"cpus"`
	MemoryMiB int `mapstructure:"memory_mib"`
	// HardwareVersion is NN in vmx-NN; 15 by default (ESXi 6.7 U2+).
	HardwareVersion int `mapstructure:"hardware_version"`
	// Network is the OVF's logical network name, mapped to a vSphere
	// network at import; "nic0" by default.
	Network string `mapstructure:"network"`
	// OSType is the VMware guest id; debian12_64Guest by default.
	OSType string `mapstructure:"os_type"`
	// DataDiskGiB is the empty data disk the control-plane appliance
	// carries (20 by default; node images have none). Upgrades move it
	// from the old VM to the new.
	DataDiskGiB int `mapstructure:"data_disk_gib"`
	// ManifestHash is "sha256" (default) or "sha1" for old ESXi.
	ManifestHash string `mapstructure:"manifest_hash"`
	// ImageJSON overrides the image.json the builder copied out.
	ImageJSON string `mapstructure:"image_json"`
	// SourceDateEpoch is every archive entry's mtime; SOURCE_DATE_EPOCH
	// by default.
	SourceDateEpoch string `mapstructure:"source_date_epoch"`
	// Vendor is the ProductSection's vendor.
	Vendor string `mapstructure:"vendor"`

	ctx interpolate.Context
}

func (c *Config) prepare(raws ...any) error {
	err := config.Decode(c, &config.DecodeOpts{
		PluginType:         "harmony-ova",
		Interpolate:        true,
		InterpolateContext: &c.ctx,
	}, raws...)
	if err != nil {
		return err
	}
	if c.SourceDateEpoch == "" {
		c.SourceDateEpoch = os.Getenv("SOURCE_DATE_EPOCH")
	}
	if c.HardwareVersion == 0 {
		c.HardwareVersion = 15
	}
	if c.Network == "" {
		c.Network = "nic0"
	}
	if c.OSType == "" {
		c.OSType = "debian12_64Guest"
	}
	if c.ManifestHash == "" {
		c.ManifestHash = "sha256"
	}
	if c.Vendor == "" {
		c.Vendor = "Harmony"
	}

	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Output == "" {
		bad("output: required")
	} else if !strings.HasSuffix(c.Output, ".ova") {
		bad("output %q: want a file name ending in .ova", c.Output)
	}
	switch c.Role {
	case "", RoleNode, RoleControlPlane:
	default:
		bad("role %q: want %q or %q", c.Role, RoleNode, RoleControlPlane)
	}
	if c.CPUs < 0 || c.CPUs > 768 {
		bad("cpus %d: want 1-768", c.CPUs)
	}
	if c.MemoryMiB < 0 || (c.MemoryMiB > 0 && c.MemoryMiB < 512) {
		bad("memory_mib %d: want at least 512", c.MemoryMiB)
	}
	if c.HardwareVersion < 10 || c.HardwareVersion > 99 {
		bad("hardware_version %d: want 10-99 (vmx-10 to vmx-99)", c.HardwareVersion)
	}
	if c.DataDiskGiB < 0 || c.DataDiskGiB > 2047 {
		bad("data_disk_gib %d: want 0-2047", c.DataDiskGiB)
	}
	if _, err := hashOf(c.ManifestHash); err != nil {
		bad("manifest_hash: %w", err)
	}
	if c.SourceDateEpoch == "" {
		bad("source_date_epoch: required (or set SOURCE_DATE_EPOCH): the OVA's bytes depend on it")
	} else if _, err := archive.SourceDateEpoch(c.SourceDateEpoch); err != nil {
		bad("source_date_epoch: %w", err)
	}
	if c.ImageJSON != "" {
		if _, err := os.Stat(c.ImageJSON); err != nil {
			bad("image_json: %w", err)
		}
	}
	return errors.Join(errs...)
}

// forRole fills the role's defaults once the role is known.
func (c *Config) forRole(role string) {
	if c.VMName == "" {
		c.VMName = "harmony-" + role
	}
	appliance := role == RoleControlPlane
	if c.CPUs == 0 {
		c.CPUs = map[bool]int{false: 2, true: 4}[appliance]
	}
	if c.MemoryMiB == 0 {
		c.MemoryMiB = map[bool]int{false: 4096, true: 8192}[appliance]
	}
	if appliance && c.DataDiskGiB == 0 {
		c.DataDiskGiB = 20
	}
}

func hashOf(name string) (archive.Hash, error) {
	switch strings.ToLower(name) {
	case "sha256":
		return archive.SHA256, nil
	case "sha1":
		return archive.SHA1, nil
	}
	return 0, fmt.Errorf("%q: want sha256 or sha1", name)
}

// outputPath makes a relative output absolute against the working
// directory, as Packer users expect.
func outputPath(p string) (string, error) {
	if filepath.IsAbs(p) {
		return p, nil
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("output %q: %w", p, err)
	}
	return abs, nil
}

func itoa(n int) string { return strconv.Itoa(n) }
