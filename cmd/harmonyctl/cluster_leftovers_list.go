package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

func clusterLeftoversListCommand(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List what clusters deleted without --purge left: their data disks' folders and etcd snapshot copies",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			items, err := c.Leftovers(cmd.Context())
			if err != nil {
				return err
			}
			list := v1.ClusterLeftoversList{Items: items}
			return printOutput(output, list, func(w io.Writer) {
				fmt.Fprintln(w, "ID\tCLUSTER\tPROVIDER\tDELETED\tDATA DISK FOLDERS\tSNAPSHOT COPIES")
				for _, l := range list.Items {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s ago\t%s\t%d\n", l.ID, l.Cluster, l.Provider,
						time.Since(l.DeletedAt).Round(time.Second), strings.Join(l.DataDiskFolders, ", "), l.EtcdSnapshotCopies)
				}
			})
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, json or yaml")
	return cmd
}
