package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

func userListCommand(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List users",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			users, err := c.Users(cmd.Context())
			if err != nil {
				return err
			}
			list := v1.UserList{Users: users}
			return printOutput(output, list, func(w io.Writer) {
				fmt.Fprintln(w, "NAME\tROLE\tSOURCE\tDISABLED\tCREATED\tPASSWORD CHANGED")
				for _, u := range list.Users {
					changed := "-"
					if !u.PasswordChangedAt.IsZero() {
						changed = u.PasswordChangedAt.Local().Format(time.DateTime)
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%v\t%s\t%s\n", u.Name, u.Role, u.Source, u.Disabled, u.CreatedAt.Local().Format(time.DateTime), changed)
				}
			})
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, json or yaml")
	return cmd
}
