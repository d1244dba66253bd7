package main

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

func nodeListCommand(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List node records with their enrollment and status",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := outputFlag(output, "table", "json"); err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			items, err := c.Nodes(cmd.Context())
			if err != nil {
				return err
			}
			if output == "json" {
				return printJSON(os.Stdout, v1.NodeList{Items: items})
			}
			return printNodeTable(items)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	return cmd
}

func nodeGetCommand(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "get NAME",
		Short: "Show one node record with its enrollment and status",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := outputFlag(output, "table", "json"); err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			n, err := c.Node(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if output == "json" {
				return printJSON(os.Stdout, n)
			}
			return printNodeTable([]v1.Node{*n})
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "json", "table or json")
	return cmd
}

func printNodeTable(nodes []v1.Node) error {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tCLUSTER\tROLE\tIPS\tENROLLED\tCERT EXPIRES\tREVISION\tPHASE")
	for _, n := range nodes {
		enrolled, expires, phase := "no", "-", "-"
		if !n.EnrolledAt.IsZero() {
			enrolled = n.EnrolledAt.Local().Format(time.DateTime)
		}
		if !n.CertificateNotAfter.IsZero() {
			expires = n.CertificateNotAfter.Local().Format(time.DateTime)
		}
		if n.Status != nil {
			phase = n.Status.Phase
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", n.Name, n.Cluster, n.Role,
			strings.Join(n.IPs, ","), enrolled, expires, n.RoleRevision, phase)
	}
	return w.Flush()
}
