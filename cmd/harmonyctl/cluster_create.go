package main

import (
	"bytes"
	"context"
	"fmt"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/client"
)

func clusterCreateCommand(g *globals) *cobra.Command {
	var file string
	var wf waitFlags
	cmd := &cobra.Command{
		Use:   "create -f cluster.yaml",
		Short: "Create a multi-master Kubernetes cluster from a node image",
		Long: `Create a cluster from a YAML or JSON spec. The spec is validated and vCenter
is checked (template, datastore space, CPU and memory, network, free
addresses) before anything is created; every error names its field.

Then the controller clones each VM (linked when the template has a
snapshot), sizes it, gives masters a persistent data disk, writes the
one-time bootstrap and the static address into guestinfo, powers it on,
and keeps the masters apart with a DRS anti-affinity rule.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := readDocument(file)
			if err != nil {
				return err
			}
			spec, err := v1.DecodeClusterSpec(bytes.NewReader(data))
			if err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			return g.startOperation(cmd, wf, func(ctx context.Context, c *client.Client) (*v1.Operation, error) {
				return c.CreateCluster(ctx, spec)
			})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "cluster spec (YAML or JSON); - for stdin")
	_ = cmd.MarkFlagRequired("file")
	addWaitFlags(cmd, &wf, false)
	return cmd
}
