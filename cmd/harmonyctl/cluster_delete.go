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
			c, err := g.client()
			if err != nil {
				return err
			}
			path := v1.PathClusters + "/" + url.PathEscape(args[0])
			if purge {
				path += "?purge=true"
			}
			var op v1.Operation
			if err := c.Do(cmd.Context(), "DELETE", path, nil, &op); err != nil {
				return err
			}
			return wf.finish(cmd.Context(), c, op)
		},
	}
	cmd.Flags().BoolVar(&purge, "purge", false, "also delete the masters' data disks")
	addWaitFlags(cmd, &wf, false)
	return cmd
}

func clusterRemoveNodeCommand(g *globals) *cobra.Command {
	var keepVM bool
	var wf waitFlags
	cmd := &cobra.Command{
		Use:   "remove-node CLUSTER NODE",
		Short: "Remove one worker: it leaves the cluster, then its VM is destroyed or, with --keep-vm, kept powered off",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			path := v1.PathClusters + "/" + url.PathEscape(args[0]) + "/nodes/" + url.PathEscape(args[1])
			if keepVM {
				path += "?keepVM=true"
			}
			var op v1.Operation
			if err := c.Do(cmd.Context(), "DELETE", path, nil, &op); err != nil {
				return err
			}
			return wf.finish(cmd.Context(), c, op)
		},
	}
	cmd.Flags().BoolVar(&keepVM, "keep-vm", false, "keep the VM powered off for troubleshooting")
	addWaitFlags(cmd, &wf, false)
	return cmd
}

func clusterRetryCommand(g *globals) *cobra.Command {
	var wf waitFlags
	cmd := &cobra.Command{
		Use:               "retry NAME",
		Short:             "Retry the failed steps of a cluster's nodes, after fixing the cause",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.complete(v1.PathClusters),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			var op v1.Operation
			if err := c.Do(cmd.Context(), "POST", v1.PathClusters+"/"+url.PathEscape(args[0])+"/retry", nil, &op); err != nil {
				return err
			}
			return wf.finish(cmd.Context(), c, op)
		},
	}
	addWaitFlags(cmd, &wf, false)
	return cmd
}
