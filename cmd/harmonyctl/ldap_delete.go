package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func ldapDeleteCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "delete",
		Short: "Remove the LDAP settings; every directory user's session ends",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			n, err := c.DeleteLDAP(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "LDAP settings removed; %d directory user session(s) ended\n", n)
			return nil
		},
	}
}
