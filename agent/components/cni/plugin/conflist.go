package plugin

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/harmonykaas/harmony/agent/files"
)

// ConfListDir is where the container runtime looks for network
// configurations; it loads the first by name, so each plugin's file name
// starts with a number.
const ConfListDir = "/etc/cni/net.d"

// ConfListRule is what a plugin expects of its own network configuration
// list.
type ConfListRule struct {
	// CNIVersion is the spec version the plugin's binaries answer in.
	CNIVersion string
	// Name is the network's name.
	Name string
	// Types are the plugin types of the chain, in order; each names a
	// binary in /opt/cni/bin.
	Types []string
}

// The spec's rule for network names.
var networkName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)

// ValidateConfList parses data as the container runtime will, with
// libcni, and checks it against rule: a list the runtime would accept but
// the plugin could not serve (a spec version its binary does not answer
// in, another binary) is refused too.
func ValidateConfList(data []byte, rule ConfListRule) (*libcni.NetworkConfigList, error) {
	list, err := libcni.ConfListFromBytes(data)
	if err != nil {
		return nil, fmt.Errorf("libcni: %w", err)
	}
	if !slices.Contains(version.All.SupportedVersions(), list.CNIVersion) {
		return nil, fmt.Errorf("cniVersion %q is not a CNI spec version libcni supports (%s)", list.CNIVersion, strings.Join(version.All.SupportedVersions(), ", "))
	}
	if list.CNIVersion != rule.CNIVersion {
		return nil, fmt.Errorf("cniVersion is %q, want %q", list.CNIVersion, rule.CNIVersion)
	}
	if !networkName.MatchString(list.Name) || list.Name != rule.Name {
		return nil, fmt.Errorf("name is %q, want %q", list.Name, rule.Name)
	}
	if len(list.Plugins) != len(rule.Types) {
		return nil, fmt.Errorf("%d plugins in the chain, want %d (%s)", len(list.Plugins), len(rule.Types), strings.Join(rule.Types, ", "))
	}
	for i, p := range list.Plugins {
		if p.Network.Type != rule.Types[i] {
			return nil, fmt.Errorf("plugins[%d].type is %q, want %q", i, p.Network.Type, rule.Types[i])
		}
		if v := p.Network.CNIVersion; v != "" && v != list.CNIVersion {
			return nil, fmt.Errorf("plugins[%d].cniVersion is %q, the list's is %q", i, v, list.CNIVersion)
		}
	}
	return list, nil
}

// ConfListValidator checks a candidate file with ValidateConfList.
func ConfListValidator(rule ConfListRule) files.Validator {
	return func(path string) error {
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if len(data) == 0 {
			return errors.New("empty network configuration")
		}
		_, err = ValidateConfList(data, rule)
		return err
	}
}
