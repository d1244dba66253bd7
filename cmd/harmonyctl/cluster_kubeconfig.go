package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/atomicfile"
)

func clusterKubeconfigCommand(g *globals) *cobra.Command {
	var out string
	var lifetime time.Duration
	cmd := &cobra.Command{
		Use:   "kubeconfig NAME [-o FILE] [--lifetime 12h]",
		Short: "Get a cluster-admin kubeconfig for a cluster's API on its VIP",
		Long: `Have the controller issue a kubeconfig for the cluster: a new key and a
client certificate from the cluster's CA in group system:masters, named
for you, that expires after --lifetime (at most 168h). Each one issued is
recorded in the cluster's events. It goes to standard output, or to -o
FILE with mode 0600.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.complete(clusterNames),
		PreRunE:           func(*cobra.Command, []string) error { return atomicfile.CheckOutput(out) },
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			kc, err := c.Kubeconfig(cmd.Context(), args[0], lifetime)
			if err != nil {
				return err
			}
			if err := atomicfile.WriteOutput(out, nil, []byte(kc.Kubeconfig), 0o600); err != nil {
				return err
			}
			if out != atomicfile.Stdout {
				fmt.Fprintf(os.Stderr, "wrote %s: %s at %s, valid until %s\n", out, kc.User, kc.Server, kc.ExpiresAt.Local().Format(time.RFC1123))
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", atomicfile.Stdout, "file to write the kubeconfig to (0600), or - for standard output")
	cmd.Flags().DurationVar(&lifetime, "lifetime", v1.DefaultKubeconfigLifetime, "how long the certificate is valid")
	return cmd
}
