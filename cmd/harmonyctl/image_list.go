package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

func imageListCommand(g *globals) *cobra.Command {
	var provider, output string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List imported images with the Kubernetes versions they carry",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			items, err := c.Images(cmd.Context(), provider)
			if err != nil {
				return err
			}
			list := v1.ImageList{Items: items}
			return printOutput(output, list, func(w io.Writer) {
				fmt.Fprintln(w, "PROVIDER\tNAME\tROLE\tSTATE\tKUBERNETES\tTEMPLATE\tLINKED CLONES")
				for _, i := range list.Items {
					linked := "no"
					if i.Snapshot != "" {
						linked = "yes (" + i.Snapshot + ")"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", i.Provider, i.Name, i.Role, i.State,
						strings.Join(i.KubernetesVersions, ","), dash(i.Template), linked)
				}
			})
		},
	}
	cmd.Flags().StringVar(&provider, "provider", "", "only this provider's images")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, json or yaml")
	return cmd
}
