package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/harmonykaas/harmony/internal/promconfig"
)

func certScraperCommand(g *globals) *cobra.Command {
	var outDir string
	var withConfig bool
	cmd := &cobra.Command{
		Use:   "scraper NAME --out-dir DIR [--prometheus-config]",
		Short: "Issue a client certificate that may scrape agent and controller /metrics",
		Long: `Make a key here, have the controller sign it as a metrics scraper, and write
DIR/NAME.key (0600), DIR/NAME.crt and DIR/ca.crt. Point Prometheus at them:

  scheme: https
  tls_config:
    ca_file: DIR/ca.crt
    cert_file: DIR/NAME.crt
    key_file: DIR/NAME.key

With --prometheus-config, also write DIR/prometheus.yml, a whole Prometheus
configuration with these files: every agent, found through this controller
(its service discovery), and the controller itself, and DIR/` + promconfig.RulesFile + `,
Harmony's alerting rules, which it loads:

  prometheus --config.file DIR/prometheus.yml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			// Before the certificate is issued, so that a bad --out-dir
			// does not waste one.
			if err := makeOutDir(outDir); err != nil {
				return err
			}
			conn, err := g.connect()
			if err != nil {
				return err
			}
			controller, err := url.Parse(conn.server)
			if err != nil {
				return fmt.Errorf("controller URL %q: %w", conn.server, err)
			}
			// The configuration first, too: it refuses a controller URL
			// Prometheus could not use before a certificate is issued.
			conf := ""
			if withConfig {
				if conf, err = promconfig.WriteConfig(outDir, name, controller); err != nil {
					return err
				}
			}
			cred, err := conn.Client.IssueScraperCert(cmd.Context(), name)
			if err != nil {
				return err
			}
			key, cert, ca, err := promconfig.WriteCredential(outDir, name, promconfig.Credential{Key: cred.Key, Certificate: cred.Certificate, CA: cred.CABundle})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s, %s and %s\n", key, cert, ca)
			if conf != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s and %s: prometheus --config.file %s\n", conf, filepath.Join(outDir, promconfig.RulesFile), conf)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&outDir, "out-dir", ".", "directory for the key, certificate and CA")
	cmd.Flags().BoolVar(&withConfig, "prometheus-config", false, "also write a Prometheus configuration that scrapes every agent and this controller with them, and Harmony's alerting rules")
	return cmd
}

// makeOutDir makes --out-dir, or checks that it is a directory (a symlink to
// one is followed), so that an existing file is refused by name.
func makeOutDir(dir string) error {
	info, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("--out-dir: %w", err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("--out-dir: %w", err)
	case !info.IsDir():
		return fmt.Errorf("--out-dir %s: not a directory", dir)
	}
	return nil
}
