package main

import (
	"fmt"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

func userPasswdCommand(g *globals) *cobra.Command {
	var passwordStdin bool
	cmd := &cobra.Command{
		Use:   "passwd NAME",
		Short: "Set a user's password; their sessions end",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			password, err := readPassword(cmd, "New password for "+args[0]+": ", passwordStdin, true)
			if err != nil {
				return err
			}
			if _, err := c.UpdateUser(cmd.Context(), args[0], v1.UserUpdate{Password: &password}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "password of %s changed; their sessions ended\n", args[0])
			return nil
		},
	}
	cmd.Flags().BoolVar(&passwordStdin, "password-stdin", false, "read the password from stdin")
	return cmd
}
