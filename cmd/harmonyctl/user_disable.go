package main

import (
	"fmt"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// userDisableCommand is "user disable" (disable true) or "user enable".
func userDisableCommand(g *globals, disable bool) *cobra.Command {
	verb, short := "enable", "Let a disabled user sign in again"
	if disable {
		verb, short = "disable", "Stop a user from signing in; their sessions end at once"
	}
	return &cobra.Command{
		Use:   verb + " NAME",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			if _, err := c.UpdateUser(cmd.Context(), args[0], v1.UserUpdate{Disabled: &disable}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "user %s %sd\n", args[0], verb)
			return nil
		},
	}
}
