package main

import (
	"io"

	"github.com/spf13/cobra"
)

func ldapGetCommand(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "get",
		Short: "Show the LDAP settings (never the bind password)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			l, err := c.LDAP(cmd.Context())
			if err != nil {
				return err
			}
			return printOutput(output, l, func(w io.Writer) { printLDAP(w, l) })
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, json or yaml")
	return cmd
}
