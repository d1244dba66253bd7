package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// subjectFlags name a grant's user or group.
type subjectFlags struct{ user, group string }

func (f *subjectFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.user, "user", "", "a user")
	cmd.Flags().StringVar(&f.group, "group", "", "a group (an LDAP group)")
	cmd.MarkFlagsMutuallyExclusive("user", "group")
	cmd.MarkFlagsOneRequired("user", "group")
}

func (f *subjectFlags) kindAndName() (string, string) {
	if f.group != "" {
		return v1.GrantKindGroup, f.group
	}
	return v1.GrantKindUser, f.user
}

func clusterGrantCommand(g *globals) *cobra.Command {
	var who subjectFlags
	var role string
	cmd := &cobra.Command{
		Use:   "grant NAME (--user U | --group G) --role view|edit|admin",
		Short: "Give a user or a group a role on a cluster (replacing their earlier one)",
		Long: `A grant lets a user see a cluster and get a kubeconfig for it. view and edit
map to the Kubernetes roles of those names in the cluster; admin maps to
cluster-admin and also lets the user scale the cluster, retry it, remove
nodes, and grant and revoke on it. A user sees only clusters granted to
them, directly or through a group.`,
		Example:           `  harmonyctl cluster grant prod --user alice --role view`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.complete(clusterNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			gr, err := c.Grant(cmd.Context(), args[0], v1.GrantRequest{User: who.user, Group: who.group, Role: v1.GrantRole(role)})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s has %s on cluster %s\n", gr.Kind, gr.Subject, gr.Role, gr.Cluster)
			return nil
		},
	}
	who.add(cmd)
	cmd.Flags().StringVar(&role, "role", "", "view, edit or admin (required)")
	_ = cmd.MarkFlagRequired("role")
	return cmd
}

func clusterRevokeCommand(g *globals) *cobra.Command {
	var who subjectFlags
	cmd := &cobra.Command{
		Use:               "revoke NAME (--user U | --group G)",
		Short:             "Remove a user's or a group's grant on a cluster",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.complete(clusterNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			kind, name := who.kindAndName()
			if err := c.Revoke(cmd.Context(), args[0], kind, name); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s has no grant on cluster %s now\n", kind, name, args[0])
			return nil
		},
	}
	who.add(cmd)
	return cmd
}

func printGrants(w io.Writer, grants []v1.Grant) {
	fmt.Fprintln(w, "GRANT\tSUBJECT\tROLE\tBY\tSINCE")
	for _, g := range grants {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", g.Kind, g.Subject, g.Role, g.By, g.CreatedAt.Local().Format(time.DateTime))
	}
}
