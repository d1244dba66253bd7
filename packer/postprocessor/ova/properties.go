package ova

import (
	"github.com/harmonykaas/harmony/images/components"
	"github.com/harmonykaas/harmony/ova/ovf"
)

// applianceProperties are what the vCenter deploy wizard asks for when the
// control-plane appliance is deployed: its network identity, the
// controller's VIP and the first admin's password hash.
var applianceProperties = []ovf.Property{
	{Key: "harmony.hostname", Type: ovf.TypeString, UserConfigurable: true, Label: "Hostname",
		Description: "The appliance VM's host name (a DNS label, e.g. harmony-cp-1)."},
	{Key: "harmony.ip", Type: ovf.TypeString, UserConfigurable: true, Label: "IP address/prefix",
		Description: "The appliance's static IPv4 address with its prefix length, e.g. 198.18.0.11/24."},
	{Key: "harmony.gateway", Type: ovf.TypeIP, UserConfigurable: true, Label: "Default gateway",
		Description: "The IPv4 default gateway."},
	{Key: "harmony.dns", Type: ovf.TypeString, UserConfigurable: true, Label: "DNS servers",
		Description: "Comma-separated IPv4 addresses of the DNS servers."},
	{Key: "harmony.ntp", Type: ovf.TypeString, UserConfigurable: true, Label: "NTP servers",
		Description: "Comma-separated NTP server names or addresses."},
	{Key: "harmony.controller_vip", Type: ovf.TypeIP, UserConfigurable: true, Label: "Controller VIP",
		Description: "The virtual IP the three appliance VMs share for the controller API, on the appliance's subnet."},
	{Key: "harmony.admin_password_hash", Type: ovf.TypeString, UserConfigurable: true, Label: "Admin password hash",
		Description: "crypt(3) hash of the initial admin password (e.g. from `mkpasswd -m sha-512`); never the password itself."},
}

// properties are the role's vApp properties: the appliance's form, then
// the fixed facts every image records.
func properties(role string, image *components.ImageManifest) []ovf.Property {
	var props []ovf.Property
	if role == RoleControlPlane {
		props = append(props, applianceProperties...)
	}
	props = append(props,
		ovf.Property{Key: "harmony.image.role", Type: ovf.TypeString, Label: "Image role",
			Description: "What this image is for.", Default: role},
		ovf.Property{Key: "harmony.image.version", Type: ovf.TypeString, Label: "Image version",
			Description: "The image's version.", Default: image.Version},
	)
	for _, c := range image.Components {
		props = append(props, ovf.Property{
			Key: "harmony.version." + c.Name, Type: ovf.TypeString,
			Label:       c.Name + " version",
			Description: "Version of " + c.Name + " in this image (" + c.Source + ").",
			Default:     c.Version,
		})
	}
	return props
}
