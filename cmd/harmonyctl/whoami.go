package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func whoamiCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "whoami",
		Short: "Show who the controller takes you for",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			w, err := c.WhoAmI(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s (%s)\n", w.Kind, w.Name, w.Role)
			return nil
		},
	}
}
