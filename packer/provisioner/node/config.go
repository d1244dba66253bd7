//go:generate go tool packer-sdc mapstructure-to-hcl2 -type Config

package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/template"

	"github.com/hashicorp/packer-plugin-sdk/common"
	"github.com/hashicorp/packer-plugin-sdk/template/config"
	"github.com/hashicorp/packer-plugin-sdk/template/interpolate"
)

// Roles an image can be built for.
const (
	RoleNode         = "node"
	RoleControlPlane = "control-plane"
)

// Config is the harmony-node provisioner's configuration.
type Config struct {
	common.PackerConfig `mapstructure:",squash"`

	// Role is "node" (tenant masters and workers) or "control-plane" (the
	// appliance, which also carries the controller).
	Role string `mapstructure:"role" required:"true"`
	// ImageVersion is recorded in /etc/harmony/image.json.
	ImageVersion string `mapstructure:"image_version" required:"true"`
	// ComponentsFile is images/components.yaml: the pinned versions.
	ComponentsFile string `mapstructure:"components_file" required:"true"`
	// BundleDir holds the Kubernetes binaries and container images
	// (`make bundle`).
	BundleDir string `mapstructure:"bundle_dir" required:"true"`
	// AgentBinary is the harmony-agent built for linux/amd64.
	AgentBinary string `mapstructure:"agent_binary" required:"true"`
	// ControllerBinary is harmony-controller; control-plane images only.
	ControllerBinary string `mapstructure:"controller_binary"`
	// UnitsDir is the repository's systemd/ directory.
	UnitsDir string `mapstructure:"units_dir" required:"true"`
	// OverlayDir is copied over the root file system (images/rootfs).
	OverlayDir string `mapstructure:"overlay_dir"`
	// ExecuteCommand runs each of the provisioner's scripts on the
	// machine; {{.Path}} is the script. Users who connect as non-root set
	// it to "sudo /bin/sh -eu {{.Path}}".
	ExecuteCommand string `mapstructure:"execute_command"`
	// StagingDir is where files wait on the machine before they are
	// installed; it is removed afterwards.
	StagingDir string `mapstructure:"staging_dir"`
	// SkipSysprep leaves machine-id, host keys and logs alone (debugging).
	SkipSysprep bool `mapstructure:"skip_sysprep"`
	// SourceDateEpoch is the build time recorded in image.json; the
	// SOURCE_DATE_EPOCH environment variable by default.
	SourceDateEpoch string `mapstructure:"source_date_epoch"`

	ctx interpolate.Context
}

func (c *Config) prepare(raws ...any) error {
	err := config.Decode(c, &config.DecodeOpts{
		PluginType:         "harmony-node",
		Interpolate:        true,
		InterpolateContext: &c.ctx,
		InterpolateFilter:  &interpolate.RenderFilter{Exclude: []string{"execute_command"}},
	}, raws...)
	if err != nil {
		return err
	}
	if c.ExecuteCommand == "" {
		c.ExecuteCommand = "/bin/sh -eu {{.Path}}"
	}
	if c.StagingDir == "" {
		c.StagingDir = "/tmp/harmony-node"
	}
	if c.SourceDateEpoch == "" {
		c.SourceDateEpoch = os.Getenv("SOURCE_DATE_EPOCH")
	}

	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch c.Role {
	case RoleNode, RoleControlPlane:
	case "":
		bad("role: required (%q or %q)", RoleNode, RoleControlPlane)
	default:
		bad("role %q: want %q or %q", c.Role, RoleNode, RoleControlPlane)
	}
	if c.ImageVersion == "" || strings.ContainsAny(c.ImageVersion, " \t\r\n\"") {
		bad("image_version %q: required, without spaces or quotes", c.ImageVersion)
	}
	for _, f := range []struct{ name, path string }{
		{"components_file", c.ComponentsFile}, {"agent_binary", c.AgentBinary},
	} {
		if err := regularFile(f.path); err != nil {
			bad("%s: %w", f.name, err)
		}
	}
	if c.Role == RoleControlPlane {
		if err := regularFile(c.ControllerBinary); err != nil {
			bad("controller_binary: %w (control-plane images carry the controller)", err)
		}
	} else if c.ControllerBinary != "" {
		bad("controller_binary: only control-plane images carry the controller")
	}
	for _, d := range []struct{ name, path string }{{"bundle_dir", c.BundleDir}, {"units_dir", c.UnitsDir}} {
		if err := directory(d.path); err != nil {
			bad("%s: %w", d.name, err)
		}
	}
	if c.OverlayDir != "" {
		if err := directory(c.OverlayDir); err != nil {
			bad("overlay_dir: %w", err)
		}
	}
	if !filepath.IsAbs(c.StagingDir) || filepath.Clean(c.StagingDir) == "/" || strings.ContainsAny(c.StagingDir, " '\"$`\\") {
		bad("staging_dir %q: want an absolute path other than /, without spaces or shell quoting", c.StagingDir)
	}
	if _, err := template.New("execute_command").Parse(c.ExecuteCommand); err != nil {
		bad("execute_command: %w", err)
	} else if !strings.Contains(c.ExecuteCommand, "{{.Path}}") {
		bad("execute_command %q: must contain {{.Path}}", c.ExecuteCommand)
	}
	if c.SourceDateEpoch == "" {
		bad("source_date_epoch: required (or set SOURCE_DATE_EPOCH): image.json records the build time from it")
	} else if n, err := strconv.ParseInt(c.SourceDateEpoch, 10, 64); err != nil || n < 0 {
		bad("source_date_epoch %q: want seconds since 1970", c.SourceDateEpoch)
	}
	return errors.Join(errs...)
}

func regularFile(path string) error {
	if path == "" {
		return errors.New("required")
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", path)
	}
	return nil
}

func directory(path string) error {
	if path == "" {
		return errors.New("required")
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s: not a directory", path)
	}
	return nil
}
