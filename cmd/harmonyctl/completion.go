package main

import (
	"context"
	"strings"

	"github.com/spf13/cobra"

	"github.com/harmonykaas/harmony/controller/client"
)

// complete suggests the names list returns for shell completion; errors
// just mean no suggestions. (The completion command itself is cobra's:
// harmonyctl completion bash|zsh|fish|powershell.)
func (g *globals) complete(list func(context.Context, *client.Client) ([]string, error)) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		c, err := g.client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		names, err := list(cmd.Context(), c)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, name := range names {
			if strings.HasPrefix(name, prefix) {
				out = append(out, name)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// clusterNames lists the clusters' names for completion.
func clusterNames(ctx context.Context, c *client.Client) ([]string, error) {
	clusters, err := c.Clusters(ctx)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(clusters))
	for i, cl := range clusters {
		names[i] = cl.Spec.Name
	}
	return names, nil
}

// leftoverIDs lists the deleted clusters' leftovers for completion.
func leftoverIDs(ctx context.Context, c *client.Client) ([]string, error) {
	items, err := c.Leftovers(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(items))
	for i, l := range items {
		ids[i] = l.ID
	}
	return ids, nil
}

// providerNames lists the providers' names for completion.
func providerNames(ctx context.Context, c *client.Client) ([]string, error) {
	providers, err := c.Providers(ctx)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(providers))
	for i, p := range providers {
		names[i] = p.Name
	}
	return names, nil
}
