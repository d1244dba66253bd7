package main

import (
	"context"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/client"
)

func clusterRemoveNodeCommand(g *globals) *cobra.Command {
	var keepVM bool
	var wf waitFlags
	cmd := &cobra.Command{
		Use:   "remove-node CLUSTER NODE",
		Short: "Remove one worker: it leaves the cluster, then its VM is destroyed or, with --keep-vm, kept powered off",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.startOperation(cmd, wf, func(ctx context.Context, c *client.Client) (*v1.Operation, error) {
				return c.RemoveClusterNode(ctx, args[0], args[1], keepVM)
			})
		},
	}
	cmd.Flags().BoolVar(&keepVM, "keep-vm", false, "keep the VM powered off for troubleshooting")
	addWaitFlags(cmd, &wf, false)
	return cmd
}
