// Package staticnet applies the static address that the controller writes
// to guestinfo.harmony.network. It runs once per boot, before
// systemd-networkd reads its configuration (harmony-network.service), and
// writes a .network file that sorts before the image's DHCP file. Without
// the key it does nothing, and DHCP stays the fallback.
package staticnet

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/harmonykaas/harmony/agent/bootstrap"
	"github.com/harmonykaas/harmony/agent/files"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// Paths under the root the applier writes to.
const (
	// NetworkFile sorts before images/rootfs/etc/systemd/network/
	// 80-harmony-dhcp.network. networkd applies only the first .network
	// file (in lexical order across its directories) that matches a
	// link, so the NIC this file matches runs no DHCP client.
	NetworkFile  = "etc/systemd/network/10-harmony-static.network"
	HostnameFile = "etc/hostname"
	ResolvConf   = "etc/resolv.conf"
)

// Outcome says what Apply did with the network file.
type Outcome string

const (
	// Absent: no key (or no way to read guestinfo); nothing was written.
	Absent Outcome = "absent"
	// Unchanged: the file already held what the key says.
	Unchanged Outcome = "unchanged"
	// Written: the file was created or replaced.
	Written Outcome = "written"
)

// Applier reads guestinfo.harmony.network and writes the node's static
// network configuration under Root.
type Applier struct {
	// Root prefixes every path written; "/" on a node.
	Root string
	// Reader reads guestinfo; nil means guestinfo cannot be read here,
	// which counts as an absent key.
	Reader bootstrap.GuestinfoReader
	// SetHostname sets the running system's hostname; nil leaves it
	// alone (a --root other than "/" must not rename this machine).
	SetHostname func(name string) error
	Log         *slog.Logger
}

// Apply reads the key and, when it holds a valid config, writes the
// network file, /etc/hostname and /etc/resolv.conf. An absent key is not
// an error. A read failure or an invalid value is returned, with nothing
// written; a network file written from an earlier, valid value stays, as
// the last address known good beats none on a network without DHCP.
// Failing to set the hostname or resolv.conf is logged, not returned: the
// address matters more.
func (a *Applier) Apply(ctx context.Context) (Outcome, error) {
	if a.Reader == nil {
		a.Log.Info("guestinfo cannot be read here; DHCP stays", "key", v1.NetworkGuestinfoKey)
		return Absent, nil
	}
	value, err := a.Reader.Get(ctx, v1.NetworkGuestinfoKey)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", v1.NetworkGuestinfoKey, err)
	}
	// RPCTool and the backdoor both answer "" for an unset key.
	if strings.TrimSpace(value) == "" {
		a.Log.Info("no static network configuration in guestinfo; DHCP stays", "key", v1.NetworkGuestinfoKey)
		return Absent, nil
	}
	cfg, err := v1.DecodeNetworkGuestinfo([]byte(value))
	if err != nil {
		return "", fmt.Errorf("%s: %w", v1.NetworkGuestinfoKey, err)
	}
	unit, err := Render(cfg)
	if err != nil {
		return "", fmt.Errorf("%s: %w", v1.NetworkGuestinfoKey, err)
	}
	path := filepath.Join(a.Root, NetworkFile)
	changed, err := files.Write(path, unit, 0o644, nil)
	if err != nil {
		return "", err
	}
	outcome := Unchanged
	if changed {
		outcome = Written
	}
	a.Log.Info("static network configuration", "outcome", outcome, "file", path,
		"address", cfg.Address, "gateway", cfg.Gateway, "dns", cfg.DNS)

	a.applyHostname(cfg.Hostname)
	if len(cfg.DNS) > 0 {
		a.applyResolvConf(cfg.DNS)
	}
	return outcome, nil
}

// maxHostname is the kernel's HOST_NAME_MAX; systemd refuses a longer
// /etc/hostname and falls back to its default.
const maxHostname = 64

func (a *Applier) applyHostname(name string) {
	if len(name) > maxHostname {
		a.Log.Warn("hostname is longer than the kernel allows; not set", "hostname", name, "max", maxHostname)
		return
	}
	path := filepath.Join(a.Root, HostnameFile)
	if _, err := files.Write(path, []byte(name+"\n"), 0o644, nil); err != nil {
		a.Log.Warn("could not write the hostname file", "err", err)
	}
	if a.SetHostname == nil {
		return
	}
	// systemd set the hostname from /etc/hostname before this ran, and
	// hostnamectl needs D-Bus, which is not up yet: set it directly. In a
	// container without CAP_SYS_ADMIN this fails, which is harmless.
	if err := a.SetHostname(name); err != nil {
		a.Log.Warn("could not set the hostname", "hostname", name, "err", err)
		return
	}
	a.Log.Info("hostname set", "hostname", name)
}

// applyResolvConf writes the DNS servers where the resolver reads them:
// the image has no systemd-resolved, so networkd's DNS= alone reaches no
// one. A symlink (resolved's stub, or another manager) is left alone.
func (a *Applier) applyResolvConf(dns []string) {
	path := filepath.Join(a.Root, ResolvConf)
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		a.Log.Info("resolv.conf is a symlink, managed elsewhere; left alone", "file", path)
		return
	}
	var b bytes.Buffer
	b.WriteString("# Written by harmony-agent network apply from " + v1.NetworkGuestinfoKey + ".\n")
	for _, d := range dns {
		b.WriteString("nameserver " + netip.MustParseAddr(d).String() + "\n")
	}
	if _, err := files.Write(path, b.Bytes(), 0o644, nil); err != nil {
		a.Log.Warn("could not write resolv.conf", "err", err)
	}
}

// Render returns the systemd-networkd file for a validated config.
// Every value is written from its parsed form, never copied as text.
func Render(cfg *v1.NetworkConfig) ([]byte, error) {
	prefix, err := netip.ParsePrefix(cfg.Address)
	if err != nil {
		return nil, &v1.FieldError{Field: "address", Problem: err.Error()}
	}
	gw, err := netip.ParseAddr(cfg.Gateway)
	if err != nil {
		return nil, &v1.FieldError{Field: "gateway", Problem: err.Error()}
	}
	var b bytes.Buffer
	b.WriteString(header)
	fmt.Fprintf(&b, "Address=%s\nGateway=%s\n", prefix, gw)
	for i, d := range cfg.DNS {
		addr, err := netip.ParseAddr(d)
		if err != nil {
			return nil, &v1.FieldError{Field: fmt.Sprintf("dns[%d]", i), Problem: err.Error()}
		}
		// A zone is free text to netip: it could carry a newline into
		// the file. The VM's DNS servers have no business with one.
		if addr.Zone() != "" {
			return nil, &v1.FieldError{Field: fmt.Sprintf("dns[%d]", i), Problem: fmt.Sprintf("%q has a zone", d)}
		}
		fmt.Fprintf(&b, "DNS=%s\n", addr)
	}
	b.WriteString("LinkLocalAddressing=no\nIPv6AcceptRA=no\n")
	return b.Bytes(), nil
}

// header is the fixed part of the file. The match is by name because
// Type=ether alone also takes what Kubernetes adds later (CNI bridges,
// pod veths, VXLAN devices are all Ethernet to networkd), and each would
// get the node's address. The VM has one NIC: ens192 and the like on
// vSphere (en*; eth* with net.ifnames=0), a veth named eth0 or host0 in
// a lab body.
const header = `# Written by harmony-agent network apply from guestinfo.harmony.network
# at every boot. It sorts before 80-harmony-dhcp.network and networkd
# applies only the first file that matches a link: this NIC runs no DHCP.
[Match]
Name=en* eth* host0
Type=ether

[Network]
`
