package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// bindPasswordEnv supplies the LDAP bind password when the file has none.
const bindPasswordEnv = "HARMONY_LDAP_BIND_PASSWORD"

func ldapApplyCommand(g *globals) *cobra.Command {
	var file, output string
	cmd := &cobra.Command{
		Use:   "apply -f ldap.yaml",
		Short: "Set the LDAP or Active Directory source of users",
		Long: `Set where directory users sign in from: the directory's URL (ldaps://, or
ldap:// with startTLS: true), its CA, the service account that searches,
how users and their groups are found, and which groups make admins and
users. The controller connects, binds and reads both search bases before
it stores anything.

The bind password is kept by the controller as a secret and never shown
again. Leave bindPassword out of the file and set $` + bindPasswordEnv + `
instead; on an update, leaving it out keeps the stored one (unless url or
bindDN changed).`,
		Example: `  HARMONY_LDAP_BIND_PASSWORD=... harmonyctl ldap apply -f docs/examples/ldap.yaml  # Active Directory`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := readDocument(file)
			if err != nil {
				return err
			}
			l, err := v1.DecodeLDAP(bytes.NewReader(data))
			if err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			if l.BindPassword == "" {
				l.BindPassword = os.Getenv(bindPasswordEnv)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			applied, err := c.ApplyLDAP(cmd.Context(), l)
			if err != nil {
				return err
			}
			return printOutput(output, applied, func(w io.Writer) { printLDAP(w, applied) })
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "LDAP settings (YAML or JSON); - for stdin")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, json or yaml")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

func printLDAP(w io.Writer, l *v1.LDAP) {
	roles := make([]string, 0, len(l.GroupRoles))
	for _, gr := range l.GroupRoles {
		roles = append(roles, gr.Group+"="+string(gr.Role))
	}
	fmt.Fprintln(w, "URL\tSTARTTLS\tBIND DN\tUSERS\tGROUPS\tGROUP ROLES")
	fmt.Fprintf(w, "%s\t%v\t%s\t%s\t%s\t%s\n", l.URL, l.StartTLS, l.BindDN, l.UserSearch.BaseDN, l.GroupSearch.BaseDN, strings.Join(roles, ","))
}
