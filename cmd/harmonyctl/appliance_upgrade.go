package main

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/harmonykaas/harmony/controller/client"
	"github.com/harmonykaas/harmony/controller/vsphere"
	"github.com/harmonykaas/harmony/internal/logging"
)

// applianceFlags are what both appliance commands take.
type applianceFlags struct {
	provider        string
	shutdownTimeout time.Duration
	wait            time.Duration
}

func (f *applianceFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.provider, "provider", "", "provider document (YAML or JSON) of the vCenter and folder the appliance is in; the password may come from $"+passwordEnv)
	cmd.Flags().DurationVar(&f.shutdownTimeout, "shutdown-timeout", 5*time.Minute, "how long the guest may take to shut down before it is powered off")
	cmd.Flags().DurationVar(&f.wait, "wait", 15*time.Minute, "how long to wait for the controller to answer this client config afterwards; 0 does not wait")
	_ = cmd.MarkFlagRequired("provider")
}

// session logs in to the provider's vCenter, with a logger for the
// steps; the client config is loaded first when the command is to wait
// for the controller.
func (f *applianceFlags) session(ctx context.Context, g *globals) (*vsphere.Session, *client.Client, *slog.Logger, error) {
	p, err := readProvider(f.provider)
	if err != nil {
		return nil, nil, nil, err
	}
	var c *client.Client
	if f.wait > 0 {
		if c, err = g.client(); err != nil {
			return nil, nil, nil, fmt.Errorf("--wait checks the controller with a client config: %w (--wait 0 does not check)", err)
		}
	}
	log, err := logging.New(os.Stderr, "text", "info")
	if err != nil {
		return nil, nil, nil, err
	}
	s, err := vsphere.Connect(ctx, *p)
	if err != nil {
		return nil, nil, nil, err
	}
	return s, c, log, nil
}

func applianceUpgradeCommand(g *globals) *cobra.Command {
	var f applianceFlags
	var ova string
	cmd := &cobra.Command{
		Use:   "upgrade NAME --provider FILE --ova FILE",
		Short: "Upgrade the control-plane appliance by reimage: a VM of the newer OVA takes its data disk",
		Long: `Upgrade the control-plane appliance VM NAME, in the provider's folder, to a
newer control-plane OVA the way tenant masters are upgraded: nothing on the
running appliance is patched.

The OVA is imported as NAME-VERSION with the appliance's settings (its vApp
properties, guestinfo.harmony.*, CPUs, memory and network) while the
appliance still serves. Then the appliance is shut down, its data disk (the controller's CA,
store and backups, etcd's directory, the agent's identity) moves onto the
new VM in place of the new VM's blank one, the old VM becomes NAME-previous and the new one NAME,
and it is powered on. The first upgrade moves the data disk out of the old
VM's folder to [datastore] harmony-appliance/NAME.vmdk (the provider's first
data datastore, else its first OS one), so that deleting an old VM can never
delete it. The data disk is never deleted and never on two VMs.

Before it changes anything, the command checks that the controller answers
this client config; afterwards it waits until the controller answers it
again, which it can only do with the same CA and store. --wait 0 skips both.

A run stopped anywhere (a crash, ^C, a vCenter fault) is finished by running
it again with the same OVA. NAME-previous stays, powered off, for
"harmonyctl appliance rollback"; delete it once the new appliance serves:
the next upgrade waits for that.`,
		Example: `  export HARMONY_VCENTER_PASSWORD=...
  harmonyctl appliance upgrade harmony-cp-1 --provider my-appliance-provider.yaml \
      --ova harmony-control-plane-1.4.0.ova`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			s, c, log, err := f.session(ctx, g)
			if err != nil {
				return err
			}
			defer s.Logout(context.WithoutCancel(ctx))
			if c != nil {
				if _, err := c.WhoAmI(ctx); err != nil {
					return fmt.Errorf("the controller does not answer this client config before the upgrade, so its return could not be checked: %w (--wait 0 does not check)", err)
				}
			}
			said := time.Now()
			progress := func(n int64) {
				if time.Since(said) >= 5*time.Second {
					said = time.Now()
					fmt.Fprintf(os.Stderr, "  uploading the OVA's disks: %d MiB\n", n>>20)
				}
			}
			done, err := s.UpgradeAppliance(ctx, vsphere.ApplianceUpgrade{Name: args[0], OVA: ova,
				ShutdownTimeout: f.shutdownTimeout, Progress: progress, Log: log})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "appliance %s upgraded from %s to %s; its data disk is %s\n", args[0], done.FromVersion, done.ToVersion, done.DataDisk)
			fmt.Fprintf(out, "the old VM is %s, powered off: delete it once the new one serves, or go back with harmonyctl appliance rollback %s\n", done.Previous, args[0])
			return waitForController(ctx, out, c, f.wait, 5*time.Second)
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&ova, "ova", "", "the control-plane OVA to upgrade to")
	_ = cmd.MarkFlagRequired("ova")
	return cmd
}

// waitForController polls until the controller answers the client, which
// a controller with another CA or another store cannot: those end the wait
// at once. A nil client does not wait.
func waitForController(ctx context.Context, out io.Writer, c *client.Client, timeout, interval time.Duration) error {
	if c == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	for {
		who, err := c.WhoAmI(ctx)
		if err == nil {
			fmt.Fprintf(out, "the controller answers with the same CA and store, after %s (you are %s)\n", time.Since(start).Round(time.Second), who.Name)
			return nil
		}
		var unknownCA x509.UnknownAuthorityError
		var apiErr *client.APIError
		switch {
		case errors.As(err, &unknownCA):
			return fmt.Errorf("the controller answers with a certificate of another CA: it did not start from the data disk's state: %w", err)
		case errors.As(err, &apiErr) && apiErr.Status == http.StatusUnauthorized:
			return fmt.Errorf("the controller does not know this client's credential: its store is not the one from before: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the controller did not answer within %s: %w", timeout, err)
		case <-time.After(interval):
		}
	}
}
