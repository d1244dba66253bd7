package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func certRevokeCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke SERIAL",
		Short: "Revoke an admin or scraper certificate: the controller refuses it from now on",
		Long: `Revoke an admin or scraper certificate by its serial (harmonyctl cert list
shows them). Every later request with it is refused with
certificate_revoked. The last valid admin certificate cannot be revoked;
renew first (harmonyctl cert renew-admin). Node certificates are revoked by
deleting the node.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			cert, err := c.RevokeCert(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "revoked %s certificate %s (%s)\n", cert.Kind, cert.Serial, cert.Name)
			return nil
		},
	}
}
