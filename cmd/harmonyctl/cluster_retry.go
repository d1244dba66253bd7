package main

import (
	"net/url"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

func clusterRetryCommand(g *globals) *cobra.Command {
	var wf waitFlags
	cmd := &cobra.Command{
		Use:               "retry NAME",
		Short:             "Retry the failed steps of a cluster's nodes, after fixing the cause",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.complete(v1.PathClusters),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.startOperation(cmd, wf, "POST", v1.PathClusters+"/"+url.PathEscape(args[0])+"/retry", nil)
		},
	}
	addWaitFlags(cmd, &wf, false)
	return cmd
}
