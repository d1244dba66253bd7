package main

import (
	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

func nodeTokenCommand(g *globals) *cobra.Command {
	var req v1.TokenRequest
	var out, encoding string
	cmd := &cobra.Command{
		Use:   "token NAME",
		Short: "Issue a new bootstrap token for an existing node and print its document",
		Long: `Issue a new one-time bootstrap token for an existing node, revoking its
unused tokens, and print the node's bootstrap document. Give it to a node
whose token expired, or whose certificate expired, or to re-key a node: a
running agent picks a replaced bootstrap file up without a restart.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkBootstrapOutput(out); err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.NewToken(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			return writeBootstrap(cmd.OutOrStdout(), cmd.ErrOrStderr(), &res.Bootstrap, out, encoding)
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.TokenTTL, "token-ttl", "", "token lifetime (default 1h)")
	f.BoolVar(&req.CAPinOnly, "ca-pin-only", false, "put only the CA's SHA-256 pin into the document")
	f.StringVarP(&out, "output-file", "o", "", outputFileUsage)
	f.StringVar(&encoding, "encoding", "json", "json, or base64 (the guestinfo form)")
	return cmd
}
