package main

import (
	"bytes"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

func nodeRoleCommand(g *globals) *cobra.Command {
	var showSecrets bool
	cmd := &cobra.Command{
		Use:   "role NAME",
		Short: "Show a node's role document (private keys redacted unless --show-secrets)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			role, err := c.Role(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if !showSecrets {
				*role = role.Redacted()
			}
			return printJSON(os.Stdout, role)
		},
	}
	cmd.Flags().BoolVar(&showSecrets, "show-secrets", false, "print private keys too")
	return cmd
}

func nodeSetRoleCommand(g *globals) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "set-role NAME -f role.json",
		Short: "Replace a node's role document; watching agents get it at once",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var in io.Reader = os.Stdin
			if file != "-" {
				f, err := os.Open(file)
				if err != nil {
					return err
				}
				defer f.Close()
				in = f
			}
			data, err := io.ReadAll(io.LimitReader(in, v1.MaxRoleBytes+1))
			if err != nil {
				return err
			}
			// Validate here too, so a typo is reported before any request.
			role, err := v1.DecodeRole(bytes.NewReader(data))
			if err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			updated, err := c.SetRole(cmd.Context(), args[0], role)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "role of %s is now revision %d\n", updated.NodeName, updated.Revision)
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "role document (JSON); - for stdin")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}
