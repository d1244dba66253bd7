package main

import (
	"io"

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
			items, err := c.Providers(cmd.Context())
			if err != nil {
				return err
			}
			list := v1.ProviderList{Items: items}
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
		ValidArgsFunction: g.complete(providerNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			p, err := c.Provider(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printOutput(output, p, func(w io.Writer) { printProviders(w, []v1.Provider{*p}) })
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
		ValidArgsFunction: g.complete(providerNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			return c.DeleteProvider(cmd.Context(), args[0])
		},
	}
}
