// Command packer-plugin-harmony is Harmony's Packer plugin: the
// harmony-debootstrap builder, the harmony-node provisioner and the
// harmony-ova post-processor.
package main

import (
	"fmt"
	"os"

	"github.com/hashicorp/packer-plugin-sdk/plugin"

	"github.com/harmonykaas/harmony/packer/builder/debootstrap"
	"github.com/harmonykaas/harmony/packer/postprocessor/ova"
	"github.com/harmonykaas/harmony/packer/provisioner/node"
	"github.com/harmonykaas/harmony/packer/version"
)

func main() {
	set := plugin.NewSet()
	set.RegisterBuilder("debootstrap", new(debootstrap.Builder))
	set.RegisterProvisioner("node", new(node.Provisioner))
	set.RegisterPostProcessor("ova", new(ova.PostProcessor))
	set.SetVersion(version.PluginVersion)
	if err := set.Run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
