package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

func ldapLookupCommand(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "lookup USER",
		Short: "Look a directory user up as a sign-in would: their entry, groups (nested ones too) and role",
		Long: `Look a user up with the stored LDAP settings, without their password and
without signing them in: to check the filters and the group mappings. A
user the user filter does not find (unknown, or disabled where the filter
leaves disabled accounts out) is "not found"; a role of "-" means no
mapped group lets them sign in.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			info, err := c.LookupLDAPUser(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printOutput(output, info, func(w io.Writer) {
				role := string(info.Role)
				if role == "" {
					role = "-"
				}
				fmt.Fprintln(w, "USER\tROLE\tDN\tGROUPS")
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", info.Username, role, info.DN, strings.Join(info.Groups, ","))
			})
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, json or yaml")
	return cmd
}
