package main

import (
	"crypto/x509"
	"fmt"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/client"
	"github.com/harmonykaas/harmony/controller/clientconfig"
	"github.com/harmonykaas/harmony/internal/atomicfile"
)

func certRenewAdminCommand(g *globals) *cobra.Command {
	var keepOld bool
	cmd := &cobra.Command{
		Use:   "renew-admin",
		Short: "Renew the admin certificate of the client config in use, and revoke the old one",
		Long: `Make a new key here, have the controller issue a new admin certificate for
it under the same name, rewrite the client config in place (a symlinked
config's target), and then revoke the old certificate with the new one.
Admin certificates live 30 days by default (harmony-controller
--admin-cert-lifetime).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, err := clientconfig.Find(g.config)
			if err != nil {
				return err
			}
			if path == atomicfile.Stdout {
				return fmt.Errorf("renew-admin rewrites the client config in place; %q is not a file", path)
			}
			cfg, err := clientconfig.Load(path)
			if err != nil {
				return err
			}
			old, err := leafSerial(cfg.ClientCertificate)
			if err != nil {
				return err
			}
			c, err := client.New(cfg, g.server)
			if err != nil {
				return err
			}
			cred, err := c.RenewAdminCert(cmd.Context())
			if err != nil {
				return err
			}
			next := clientconfig.New(cfg.Server, cred.CABundle, cred.Certificate, cred.Key)
			data, err := next.Marshal()
			if err != nil {
				return err
			}
			if err := atomicfile.WriteOutput(path, nil, data, 0o600); err != nil {
				return fmt.Errorf("the new certificate was issued but the config could not be saved (the old one still works): %w", err)
			}
			serial, _ := leafSerial(string(cred.Certificate))
			fmt.Fprintf(cmd.ErrOrStderr(), "renewed: %s now holds admin certificate %s\n", path, serial)
			if keepOld {
				return nil
			}
			nc, err := client.New(next, g.server)
			if err != nil {
				return err
			}
			if _, err := nc.RevokeCert(cmd.Context(), old); err != nil {
				return fmt.Errorf("revoke the old certificate %s: %w (revoke it with harmonyctl cert revoke %s)", old, err, old)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "revoked the old certificate %s\n", old)
			return nil
		},
	}
	cmd.Flags().BoolVar(&keepOld, "keep-old", false, "leave the old certificate valid until it expires")
	return cmd
}

func leafSerial(chainPEM string) (string, error) {
	certs, err := v1.ParseCertificatesPEM([]byte(chainPEM))
	if err != nil {
		return "", fmt.Errorf("client certificate: %w", err)
	}
	return serialHex(certs[0]), nil
}

func serialHex(c *x509.Certificate) string { return c.SerialNumber.Text(16) }
