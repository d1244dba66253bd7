package main

import (
	"fmt"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

func clusterRevokeSessionsCommand(g *globals) *cobra.Command {
	var user string
	cmd := &cobra.Command{
		Use:   "revoke-sessions NAME --user U",
		Short: "End every session of a user of a cluster, so that they get no new credential for it",
		Long: `A cluster admin ends every Harmony session of a user who holds a grant on
the cluster (directly or through a group): their kubeconfig's exec plugin
gets no new certificate until they sign in again. Certificates already
issued end within their ` + v1.DefaultCredentialLifetime.String() + `. To keep the user out, revoke
their grant too (harmonyctl cluster revoke).`,
		Example:           `  harmonyctl cluster revoke-sessions prod --user alice`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.complete(clusterNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			n, err := c.RevokeSessions(cmd.Context(), args[0], user)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d session(s) of %s ended; certificates already issued end within %s\n", n, user, v1.DefaultCredentialLifetime)
			return nil
		},
	}
	cmd.Flags().StringVar(&user, "user", "", "the user (required)")
	_ = cmd.MarkFlagRequired("user")
	return cmd
}
