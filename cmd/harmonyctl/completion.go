package main

import (
	"strings"

	"github.com/spf13/cobra"
)

// complete lists the names under an API path for shell completion; errors
// just mean no suggestions. (The completion command itself is cobra's:
// harmonyctl completion bash|zsh|fish|powershell.)
func (g *globals) complete(path string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		c, err := g.client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var list struct {
			Items []struct {
				Name string `json:"name"`
				Spec struct {
					Name string `json:"name"`
				} `json:"spec"`
			} `json:"items"`
		}
		if err := c.Do(cmd.Context(), "GET", path, nil, &list); err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, it := range list.Items {
			name := it.Name
			if name == "" {
				name = it.Spec.Name
			}
			if strings.HasPrefix(name, prefix) {
				out = append(out, name)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
