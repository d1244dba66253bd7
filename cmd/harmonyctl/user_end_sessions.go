package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func userEndSessionsCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "end-sessions NAME",
		Short: "End every session of a user at once (they must sign in again)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			n, err := c.EndSessions(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d session(s) of %s ended\n", n, args[0])
			return nil
		},
	}
}
