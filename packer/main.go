// Command packer-plugin-harmony is Harmony's Packer plugin.
package main

import (
	"fmt"
	"os"

	"github.com/hashicorp/packer-plugin-sdk/plugin"

	_ "github.com/hashicorp/packer-plugin-sdk/chroot"
	_ "github.com/hashicorp/packer-plugin-sdk/common"
	_ "github.com/hashicorp/packer-plugin-sdk/multistep/commonsteps"
	_ "github.com/hashicorp/packer-plugin-sdk/template/config"
	_ "github.com/hashicorp/packer-plugin-sdk/hcl2helper"
	_ "github.com/harmonykaas/harmony/ova/archive"

	"github.com/harmonykaas/harmony/packer/version"
)

func main() {
	set := plugin.NewSet()
	set.SetVersion(version.PluginVersion)
	if err := set.Run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
