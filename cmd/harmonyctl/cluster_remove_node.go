package main

import (
	"net/url"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

func clusterRemoveNodeCommand(g *globals) *cobra.Command {
	var keepVM bool
	var wf waitFlags
	cmd := &cobra.Command{
		Use:   "remove-node CLUSTER NODE",
		Short: "Remove one worker: it leaves the cluster, then its VM is destroyed or, with --keep-vm, kept powered off",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := v1.PathClusters + "/" + url.PathEscape(args[0]) + "/nodes/" + url.PathEscape(args[1])
			if keepVM {
				path += "?keepVM=true"
			}
			return g.startOperation(cmd, wf, "DELETE", path, nil)
		},
	}
	cmd.Flags().BoolVar(&keepVM, "keep-vm", false, "keep the VM powered off for troubleshooting")
	addWaitFlags(cmd, &wf, false)
	return cmd
}
