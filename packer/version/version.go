// Package version is the plugin's version, as Packer reports it.
package version

import "github.com/hashicorp/packer-plugin-sdk/version"

// Version is bumped with each release of the plugin; Packer 1.9 reads it
// from the file name the plugin is installed under as well.
const Version = "0.1.0"

// PluginVersion is what the plugin tells Packer.
var PluginVersion = version.NewPluginVersion(Version, "", "")
