package main

import (
	"fmt"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

func userAddCommand(g *globals) *cobra.Command {
	var role string
	var passwordStdin bool
	cmd := &cobra.Command{
		Use:   "add NAME",
		Short: "Create a local user (asks for the password)",
		Example: `  harmonyctl user add alice
  harmonyctl user add bob --role admin`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := v1.ValidateUserName("NAME", args[0]); err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			password, err := readPassword(cmd, "Password for "+args[0]+": ", passwordStdin, true)
			if err != nil {
				return err
			}
			u, err := c.CreateUser(cmd.Context(), v1.UserCreate{Name: args[0], Role: v1.UserRole(role), Password: password})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "user %s created (%s)\n", u.Name, u.Role)
			return nil
		},
	}
	cmd.Flags().StringVar(&role, "role", string(v1.UserRoleUser), "user or admin")
	cmd.Flags().BoolVar(&passwordStdin, "password-stdin", false, "read the password from stdin")
	return cmd
}
