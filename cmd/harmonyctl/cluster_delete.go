package main

import (
	"context"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/client"
)

func clusterDeleteCommand(g *globals) *cobra.Command {
	var purge bool
	var wf waitFlags
	cmd := &cobra.Command{
		Use:               "delete NAME",
		Short:             "Delete a cluster's VMs; data disks stay unless --purge",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.complete(clusterNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.startOperation(cmd, wf, func(ctx context.Context, c *client.Client) (*v1.Operation, error) {
				return c.DeleteCluster(ctx, args[0], purge)
			})
		},
	}
	cmd.Flags().BoolVar(&purge, "purge", false, "also delete the masters' data disks")
	addWaitFlags(cmd, &wf, false)
	return cmd
}
