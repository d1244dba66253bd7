package main

import (
	"io"
	"net/url"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

func providerListCommand(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List providers (passwords are never shown)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			var list v1.ProviderList
			if err := c.Do(cmd.Context(), "GET", v1.PathProviders, nil, &list); err != nil {
				return err
			}
			return printOutput(output, list, func(w io.Writer) { printProviders(w, list.Items) })
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, json or yaml")
	return cmd
}

func providerGetCommand(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:               "get NAME",
		Short:             "Show one provider",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.complete(v1.PathProviders),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			var p v1.Provider
			if err := c.Do(cmd.Context(), "GET", v1.PathProviders+"/"+url.PathEscape(args[0]), nil, &p); err != nil {
				return err
			}
			return printOutput(output, p, func(w io.Writer) { printProviders(w, []v1.Provider{p}) })
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "yaml", "table, json or yaml")
	return cmd
}

func providerDeleteCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:               "delete NAME",
		Short:             "Delete a provider no cluster uses (its image records go with it; templates stay in vCenter)",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.complete(v1.PathProviders),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			return c.Do(cmd.Context(), "DELETE", v1.PathProviders+"/"+url.PathEscape(args[0]), nil, nil)
		},
	}
}
