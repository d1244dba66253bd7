package main

import (
	"github.com/spf13/cobra"
)

func operationGetCommand(g *globals) *cobra.Command {
	var watch bool
	var wf waitFlags
	cmd := &cobra.Command{
		Use:   "get ID",
		Short: "Show an operation, or with --watch follow it to its end",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			op, err := c.Operation(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if watch {
				wf.wait = true
				return wf.finish(cmd.Context(), c, *op)
			}
			if wf.output == "table" {
				wf.output = "yaml"
			}
			return printOutput(wf.output, op, nil)
		},
	}
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "follow the operation to its end")
	cmd.Flags().DurationVar(&wf.timeout, "timeout", 0, "with --watch, stop after this long")
	cmd.Flags().StringVarP(&wf.output, "output", "o", "yaml", "json or yaml")
	return cmd
}
