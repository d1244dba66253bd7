package main

import (
	"context"
	"errors"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/client"
)

func clusterScaleCommand(g *globals) *cobra.Command {
	var masters, workers int
	var wf waitFlags
	cmd := &cobra.Command{
		Use:   "scale NAME [--workers N] [--masters N]",
		Short: "Add or remove workers, or masters in pairs (the count stays odd)",
		Long: `Scale a cluster. New nodes go through the same pre-checks and steps as a
create. Removed nodes (the newest first) leave the cluster and their VMs
are destroyed; masters' data disks stay on the datastore.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.complete(clusterNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			var req v1.ScaleRequest
			if cmd.Flags().Changed("masters") {
				req.Masters = &masters
			}
			if cmd.Flags().Changed("workers") {
				req.Workers = &workers
			}
			if req.Masters == nil && req.Workers == nil {
				return errors.New("give --workers, --masters or both")
			}
			return g.startOperation(cmd, wf, func(ctx context.Context, c *client.Client) (*v1.Operation, error) {
				return c.ScaleCluster(ctx, args[0], req)
			})
		},
	}
	cmd.Flags().IntVar(&masters, "masters", 0, "number of masters (odd)")
	cmd.Flags().IntVar(&workers, "workers", 0, "number of workers")
	addWaitFlags(cmd, &wf, false)
	return cmd
}
