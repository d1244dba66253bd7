package main

import (
	"context"
	"errors"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/harmonykaas/harmony/agent/bootstrap"
	"github.com/harmonykaas/harmony/agent/staticnet"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// networkCommand holds what runs before the network is up, from
// harmony-network.service.
func networkCommand() *cobra.Command {
	network := &cobra.Command{Use: "network", Short: "The node's network configuration at boot"}
	var root string
	var logs logFlags
	var timeout time.Duration
	apply := &cobra.Command{
		Use:   "apply",
		Short: "Write a static systemd-networkd file from guestinfo.harmony.network",
		Long: `Reads guestinfo.harmony.network (base64 JSON of a NetworkConfig) through
the VMware backdoor, else vmware-rpctool on PATH, and writes
/etc/systemd/network/10-harmony-static.network (before the image's DHCP
file), /etc/hostname and, with DNS servers, /etc/resolv.conf. Without the
key it writes nothing and DHCP stays. An invalid value is reported, names
its field, and writes nothing. Rerunning with the same value changes
nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logs.logger()
			if err != nil {
				return err
			}
			root, err := filepath.Abs(root)
			if err != nil {
				return err
			}
			reader, how := bootstrap.DetectGuestinfo()
			log.Info("guestinfo access", "via", how)
			a := staticnet.Applier{Root: root, Reader: reader, Log: log}
			// Only the machine's own root renames the machine.
			if root == "/" {
				a.SetHostname = func(name string) error { return unix.Sethostname([]byte(name)) }
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			if _, err := a.Apply(ctx); err != nil {
				var fe *v1.FieldError
				field := ""
				if errors.As(err, &fe) {
					field = fe.Field
				}
				log.Error("static network configuration not applied; DHCP stays the fallback", "field", field, "err", err)
				return err
			}
			return nil
		},
	}
	f := apply.Flags()
	f.StringVar(&root, "root", "/", "prefix for every path written (tests); the hostname is set only when it is /")
	f.DurationVar(&timeout, "timeout", 20*time.Second, "how long reading guestinfo may take")
	logs.add(f)
	network.AddCommand(apply)
	return network
}
