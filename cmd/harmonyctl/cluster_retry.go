package main

import (
	"context"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/client"
)

func clusterRetryCommand(g *globals) *cobra.Command {
	var wf waitFlags
	cmd := &cobra.Command{
		Use:               "retry NAME",
		Short:             "Retry the failed steps of a cluster's nodes, after fixing the cause",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.complete(clusterNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.startOperation(cmd, wf, func(ctx context.Context, c *client.Client) (*v1.Operation, error) {
				return c.RetryCluster(ctx, args[0])
			})
		},
	}
	addWaitFlags(cmd, &wf, false)
	return cmd
}
