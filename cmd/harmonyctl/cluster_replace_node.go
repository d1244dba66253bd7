package main

import (
	"context"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/client"
)

func clusterReplaceNodeCommand(g *globals) *cobra.Command {
	var req v1.ReplaceNodeRequest
	var wf waitFlags
	cmd := &cobra.Command{
		Use:   "replace-node CLUSTER MASTER [--fresh-disk]",
		Short: "Replace a broken master's VM by a new one of the same name, address and image",
		Long: `Replace one master whose VM is broken (a guest that no longer boots, a
VM that misbehaves) by a new VM of the same name, address, BIOS UUID and
image, as an upgrade replaces a master, one recorded step at a time.
Every other master must be a healthy etcd member first.

The old VM hands over if its agent still answers. One that is powered
off, whose agent stays silent for two minutes, or that has not handed over
by the leave timeout, is powered off without. The new VM takes the old
VM's data disk and comes back as the same etcd member; then the old VM is
destroyed. If the new VM is not Ready in time, it is rolled back: the old
VM gets its name and disk back and powers on, and the operation fails.

--fresh-disk is for a data disk that is lost or damaged: the new VM gets a
new, empty one and joins etcd as a new member in place of the old, which
it removes. The old disk's file is kept. A replacement that stopped on a
missing disk is put on this path by asking again with --fresh-disk.

Workers are replaced by removing them (remove-node) and scaling back up.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.startOperation(cmd, wf, func(ctx context.Context, c *client.Client) (*v1.Operation, error) {
				return c.ReplaceClusterNode(ctx, args[0], args[1], req)
			})
		},
	}
	cmd.Flags().BoolVar(&req.FreshDisk, "fresh-disk", false, "give the new VM a new, empty data disk; it joins etcd as a new member")
	addWaitFlags(cmd, &wf, false)
	return cmd
}
