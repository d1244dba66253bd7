package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

func applianceRollbackCommand(g *globals) *cobra.Command {
	var f applianceFlags
	cmd := &cobra.Command{
		Use:   "rollback NAME --provider FILE",
		Short: "Go back to the appliance VM an upgrade replaced",
		Long: `Undo "harmonyctl appliance upgrade NAME", finished or stopped midway: the
new VM is shut down and gives the data disk back to the old one, which takes
the name NAME again and is powered on. The new VM stays, powered off and
without the data disk, as NAME-VERSION-rolled-back; delete it.

The old controller starts on the data disk as the new one left it. Roll back
before the new controller has changed its store in a way the old one cannot
read, or restore into the old one the backup taken before the upgrade
(the appliance keeps its daily backups on the data disk).

A rollback stopped anywhere is finished by running it again. Afterwards it
waits until the controller answers this client config (--wait 0 does not).`,
		Example: `  harmonyctl appliance rollback harmony-cp-1 --provider my-appliance-provider.yaml`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			s, c, log, err := f.session(ctx, g)
			if err != nil {
				return err
			}
			defer s.Logout(context.WithoutCancel(ctx))
			done, err := s.RollBackAppliance(ctx, args[0], f.shutdownTimeout, log)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "appliance %s rolled back to %s with its data disk %s; %s is powered off: delete it\n",
				args[0], done.Version, done.DataDisk, done.Replacement)
			return waitForController(ctx, out, c, f.wait, 5*time.Second)
		},
	}
	f.register(cmd)
	return cmd
}
