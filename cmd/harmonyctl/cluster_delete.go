package main

import (
	"net/url"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

func clusterDeleteCommand(g *globals) *cobra.Command {
	var purge bool
	var wf waitFlags
	cmd := &cobra.Command{
		Use:               "delete NAME",
		Short:             "Delete a cluster's VMs; data disks stay unless --purge",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.complete(v1.PathClusters),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := v1.PathClusters + "/" + url.PathEscape(args[0])
			if purge {
				path += "?purge=true"
			}
			return g.startOperation(cmd, wf, "DELETE", path, nil)
		},
	}
	cmd.Flags().BoolVar(&purge, "purge", false, "also delete the masters' data disks")
	addWaitFlags(cmd, &wf, false)
	return cmd
}
