package main

import (
	"context"
	"errors"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/client"
)

func clusterUpgradeCommand(g *globals) *cobra.Command {
	var req v1.UpgradeRequest
	var wf waitFlags
	cmd := &cobra.Command{
		Use:   "upgrade NAME --image IMAGE [--kubernetes-version V] [--max-surge N] [--fresh-disk MASTER] | NAME --abort | NAME --fresh-disk MASTER",
		Short: "Move a cluster to another node image by reimage, or stop a running upgrade",
		Long: `Upgrade a cluster by replacing every VM with a clone of a newer image; no
machine is patched in place.

Masters go one at a time. The old VM hands over (drained, the VIP and
HAProxy given up, etcd leadership moved, its member stopped, not removed),
powers off and gives up its data disk; a new VM of the same name, address
and role takes the disk and comes back as the same etcd member. The old VM
is kept, powered off and renamed NAME-old, until the new one reports
Ready, so that a failed replacement rolls back to it.

Workers are surged: a new worker joins first, then the old one drains
(honouring PodDisruptionBudgets) and goes; --max-surge replaces more at
once.

Before anything changes, every node must be Ready and every master a
started etcd member, and Kubernetes may go up one minor, never down.
--abort stops a running upgrade: the master being replaced rolls back,
surge workers not yet serving go.

--fresh-disk MASTER is for a data disk that cannot move (missing, corrupt,
on a lost datastore): that master's new VM gets an empty data disk and
joins etcd as a new member in place of the old one, which it removes; the
old disk's file is kept. It needs three masters or more, and is recorded
as a Warning event. Without --image it amends the running upgrade, for
a master whose replacement stopped on a missing disk.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.complete(clusterNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !req.Abort && req.Image == "" && len(req.FreshDisk) == 0 {
				return errors.New("give --image, --abort to stop a running upgrade, or --fresh-disk to amend it")
			}
			return g.startOperation(cmd, wf, func(ctx context.Context, c *client.Client) (*v1.Operation, error) {
				return c.UpgradeCluster(ctx, args[0], req)
			})
		},
	}
	cmd.Flags().StringVar(&req.Image, "image", "", "the node image to move to (harmonyctl image list)")
	cmd.Flags().StringVar(&req.KubernetesVersion, "kubernetes-version", "", "the Kubernetes version to move to (default: the cluster's); one minor up at most")
	cmd.Flags().IntVar(&req.MaxSurge, "max-surge", 0, "workers replaced at once (default 1)")
	cmd.Flags().BoolVar(&req.Abort, "abort", false, "stop the running upgrade: the node being replaced rolls back")
	cmd.Flags().StringSliceVar(&req.FreshDisk, "fresh-disk", nil, "masters whose new VMs get an empty data disk and a new etcd member (their disks cannot move)")
	addWaitFlags(cmd, &wf, false)
	return cmd
}
