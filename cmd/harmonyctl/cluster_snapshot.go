package main

import (
	"context"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/client"
)

func clusterSnapshotCommand(g *globals) *cobra.Command {
	var wf waitFlags
	cmd := &cobra.Command{
		Use:   "snapshot NAME",
		Short: "Take an etcd snapshot of a cluster now, copied to the controller",
		Long: `Take an etcd snapshot now, beside the schedule (etcdSnapshots), before
a risky change say. Every master takes one onto its data disk; the first
taken after the request is copied to the controller, whatever its copy
schedule, and answers it (the operation's message, and cluster get:
ETCD SNAPSHOT ASKED). Restore it with

  harmonyctl cluster restore NAME --from-controller --snapshot TIME

"After the request" is by the masters' clocks, which may be up to five
minutes behind the controller's. The masters have 15 minutes
(harmony-controller --etcd-snapshot-timeout); an upgrade or a restore
running refuses the request (an upgrade takes its own snapshot first).`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.complete(clusterNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.startOperation(cmd, wf, func(ctx context.Context, c *client.Client) (*v1.Operation, error) {
				return c.SnapshotCluster(ctx, args[0])
			})
		},
	}
	addWaitFlags(cmd, &wf, false)
	return cmd
}
