package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/atomicfile"
)

func nodeAddCommand(g *globals) *cobra.Command {
	var spec v1.NodeSpec
	var role, out, encoding string
	cmd := &cobra.Command{
		Use:   "add NAME --cluster C --role master|worker|appliance --ip IP [--ip IP] [--dns NAME]",
		Short: "Create a node record and print its one-time bootstrap document",
		Long: `Create a node record and print its bootstrap document: the controller URLs,
the CA, the node's name and a one-time token (at least 128 random bits,
stored only as a hash, single use). The node's certificate may carry only
the node's name, its --dns names and its --ip addresses.

The document holds a secret: -o writes it to a file with mode 0600.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec.Name = args[0]
			spec.Role = v1.NodeRole(role)
			if err := checkBootstrapOutput(out); err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.AddNode(cmd.Context(), spec)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "node %s added (cluster %s, role %s)\n", res.Node.Name, res.Node.Cluster, res.Node.Role)
			return writeBootstrap(cmd.OutOrStdout(), cmd.ErrOrStderr(), &res.Bootstrap, out, encoding)
		},
	}
	f := cmd.Flags()
	f.StringVar(&spec.Cluster, "cluster", "", "cluster the node belongs to (required)")
	f.StringVar(&role, "role", "", "master, worker or appliance (required)")
	f.StringSliceVar(&spec.IPs, "ip", nil, "node IP address (repeatable, at least one)")
	f.StringSliceVar(&spec.DNSNames, "dns", nil, "extra DNS name of the node (repeatable)")
	f.StringVar(&spec.TokenTTL, "token-ttl", "", "bootstrap token lifetime (default 1h)")
	f.BoolVar(&spec.CAPinOnly, "ca-pin-only", false, "put only the CA's SHA-256 pin into the document, not the CA itself")
	f.StringVarP(&out, "output-file", "o", "", outputFileUsage)
	f.StringVar(&encoding, "encoding", "json", "json, or base64 (the guestinfo form)")
	_ = cmd.MarkFlagRequired("cluster")
	_ = cmd.MarkFlagRequired("role")
	_ = cmd.MarkFlagRequired("ip")
	return cmd
}

// outputFileUsage is the help of -o of the commands that print a bootstrap
// document.
const outputFileUsage = "write the document to this file instead of stdout: a regular or new file gets mode 0600, " +
	"a device or fifo is written into, a symlink is followed, - is stdout"

// checkBootstrapOutput refuses a bad -o before a token is issued, which
// cannot be taken back.
func checkBootstrapOutput(out string) error {
	if out == "" {
		return nil
	}
	return atomicfile.CheckOutput(out)
}

// writeBootstrap prints a bootstrap document to stdout, or writes it to out,
// a path the user named: a regular file with mode 0600, since it holds a
// token, but never replacing a device, fifo or symlink.
func writeBootstrap(stdout, stderr io.Writer, b *v1.Bootstrap, out, encoding string) error {
	var data []byte
	switch encoding {
	case "json":
		var err error
		if data, err = json.MarshalIndent(b, "", "  "); err != nil {
			return err
		}
	case "base64":
		s, err := b.EncodeGuestinfo()
		if err != nil {
			return err
		}
		data = []byte(s)
	default:
		return fmt.Errorf("--encoding %q: want json or base64", encoding)
	}
	data = append(data, '\n')
	if out == "" {
		out = atomicfile.Stdout
	}
	if err := atomicfile.WriteOutput(out, stdout, data, 0o600); err != nil {
		return err
	}
	if out == atomicfile.Stdout {
		return nil
	}
	id, _, _ := v1.SplitToken(b.Token)
	fmt.Fprintf(stderr, "bootstrap document for %s written to %s (token %s)\n", b.NodeName, out, id)
	return nil
}
