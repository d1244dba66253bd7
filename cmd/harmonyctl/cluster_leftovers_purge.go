package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

func clusterLeftoversPurgeCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:               "purge ID",
		Short:             "Delete a deleted cluster's data disks (its etcd data) and snapshot copies for good; ID is from leftovers list",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.complete(leftoverIDs),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			gone, err := c.PurgeLeftovers(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "purged what cluster %s (uid %s) left: %s, and %d etcd snapshot copies\n",
				gone.Cluster, gone.UID, strings.Join(gone.DataDiskFolders, ", "), gone.EtcdSnapshotCopies)
			return nil
		},
	}
}
