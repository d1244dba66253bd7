package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
)

func certListCommand(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the admin and scraper certificates the controller issued, revoked ones too",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			list, err := c.Certificates(cmd.Context())
			if err != nil {
				return err
			}
			return printOutput(output, list, func(w io.Writer) {
				fmt.Fprintln(w, "SERIAL\tKIND\tNAME\tISSUED\tEXPIRES\tSTATE")
				now := time.Now()
				for _, c := range list.Items {
					state := "valid"
					switch {
					case !c.RevokedAt.IsZero():
						state = "revoked by " + c.RevokedBy
					case !now.Before(c.NotAfter):
						state = "expired"
					}
					if c.Current {
						state += " (this one)"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", c.Serial, c.Kind, c.Name,
						c.IssuedAt.Format(time.DateOnly), c.NotAfter.Format(time.DateOnly), state)
				}
			})
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, json or yaml")
	return cmd
}
