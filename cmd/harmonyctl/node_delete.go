package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func nodeDeleteCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a node record; its certificate stops working at once",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.DeleteNode(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "node %s deleted\n", args[0])
			return nil
		},
	}
}
