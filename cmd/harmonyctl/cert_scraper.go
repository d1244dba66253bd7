package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/harmonykaas/harmony/internal/atomicfile"
)

func certScraperCommand(g *globals) *cobra.Command {
	var outDir string
	cmd := &cobra.Command{
		Use:   "scraper NAME --out-dir DIR",
		Short: "Issue a client certificate that may scrape agent and controller /metrics",
		Long: `Make a key here, have the controller sign it as a metrics scraper, and write
DIR/NAME.key (0600), DIR/NAME.crt and DIR/ca.crt. Point Prometheus at them:

  scheme: https
  tls_config:
    ca_file: DIR/ca.crt
    cert_file: DIR/NAME.crt
    key_file: DIR/NAME.key`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			// Before the certificate is issued, so that a bad --out-dir
			// does not waste one.
			if err := makeOutDir(outDir); err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			cred, err := c.IssueScraperCert(cmd.Context(), name)
			if err != nil {
				return err
			}
			files := []struct {
				name string
				data []byte
				mode os.FileMode
			}{
				{name + ".key", cred.Key, 0o600},
				{name + ".crt", cred.Certificate, 0o644},
				{"ca.crt", cred.CABundle, 0o644},
			}
			// The names inside the directory are ours, so Write replaces
			// whatever is at them rather than following a link planted
			// there (the directory may be shared, like /tmp).
			for _, f := range files {
				if err := atomicfile.Write(filepath.Join(outDir, f.name), f.data, f.mode); err != nil {
					return err
				}
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s, %s and %s\n", filepath.Join(outDir, name+".key"),
				filepath.Join(outDir, name+".crt"), filepath.Join(outDir, "ca.crt"))
			return nil
		},
	}
	cmd.Flags().StringVar(&outDir, "out-dir", ".", "directory for the key, certificate and CA")
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
