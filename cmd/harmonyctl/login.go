package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/client"
	"github.com/harmonykaas/harmony/controller/clientconfig"
)

// trustFlags say how harmonyctl comes to trust a controller it has no
// config for yet.
type trustFlags struct {
	caFile, caPin string
}

func (f *trustFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.caFile, "ca-file", "", "the controller's CA bundle (PEM), when the config has none for this server")
	cmd.Flags().StringVar(&f.caPin, "ca-pin", "", "the controller's CA pin (sha256:HEX, logged by the controller at start): the CA bundle is fetched and checked against it")
}

// baseConfig is the config harmonyctl would use, and its path: kept if it
// is for --server, else a new one for --server with the CA the flags give.
// It holds no session.
func (f *trustFlags) baseConfig(ctx context.Context, g *globals) (string, *clientconfig.Config, error) {
	path, err := clientconfig.Find(g.config)
	if err != nil {
		return "", nil, err
	}
	cfg, err := f.configFor(ctx, path, g.server)
	return path, cfg, err
}

func (f *trustFlags) configFor(ctx context.Context, path, server string) (*clientconfig.Config, error) {
	existing, err := clientconfig.Load(path)
	if err == nil && (server == "" || server == existing.Server) && f.caFile == "" && f.caPin == "" {
		existing.Session = nil
		return existing, nil
	}
	if server == "" {
		return nil, errors.New("no controller: pass --server URL")
	}
	if err := v1.ValidateControllerURL(server); err != nil {
		return nil, fmt.Errorf("--server %q: %w", server, err)
	}
	var caPEM []byte
	switch {
	case f.caFile != "":
		if caPEM, err = os.ReadFile(f.caFile); err != nil {
			return nil, err
		}
	case f.caPin != "":
		if caPEM, err = fetchPinnedCA(ctx, server, f.caPin); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("no CA for %s in %s: pass --ca-file or --ca-pin", server, path)
	}
	certs, err := v1.ParseCertificatesPEM(caPEM)
	if err != nil {
		return nil, fmt.Errorf("CA bundle: %w", err)
	}
	if f.caPin != "" && !v1.PinMatchesAny(f.caPin, certs) {
		return nil, fmt.Errorf("the CA bundle does not match --ca-pin %s", f.caPin)
	}
	return clientconfig.New(server, caPEM, nil, nil), nil
}

// fetchPinnedCA reads the controller's CA bundle without trusting the
// connection; the caller checks it against the pin before any secret is
// sent.
func fetchPinnedCA(ctx context.Context, server, pin string) ([]byte, error) {
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // checked against the pin below
	req, err := http.NewRequestWithContext(ctx, "GET", server+v1.PathCA, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch the CA bundle: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch the CA bundle: HTTP %d", resp.StatusCode)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	certs, err := v1.ParseCertificatesPEM(data)
	if err != nil || !v1.PinMatchesAny(pin, certs) {
		return nil, fmt.Errorf("the CA bundle %s serves does not match --ca-pin %s", server, pin)
	}
	return data, nil
}

func loginCommand(g *globals) *cobra.Command {
	var trust trustFlags
	var username string
	var passwordStdin bool
	cmd := &cobra.Command{
		Use:   "login",
		Short: "Sign in as a user and keep the session in the client config",
		Long: `login asks for the password, signs in, and writes the session into the
client config (--config, else $HARMONY_CONFIG, else ~/.harmony/config), mode
0600. Every later command uses it, and refreshes it as it nears its end (15
minutes); a session lasts 12 hours. An admin certificate already in the config
stays, as the break-glass credential.`,
		Example: `  harmonyctl login --server https://198.18.100.1:9443 --ca-pin sha256:... --username alice
  echo "$PASSWORD" | harmonyctl login --username ci --password-stdin`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, cfg, err := trust.baseConfig(cmd.Context(), g)
			if err != nil {
				return err
			}
			if username == "" {
				if username, err = readLine(cmd, "User name: "); err != nil {
					return err
				}
			}
			password, err := readPassword(cmd, "Password: ", passwordStdin, false)
			if err != nil {
				return err
			}
			c, err := client.New(cfg, "")
			if err != nil {
				return err
			}
			sess, err := c.Login(cmd.Context(), username, password)
			if err != nil {
				return err
			}
			cfg.Session = clientconfig.FromAPI(*sess)
			if err := cfg.Write(path); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Signed in to %s as %s (%s) until %s; the session is in %s\n",
				cfg.Server, sess.User.Name, sess.User.Role, sess.RefreshExpiresAt.Local().Format(time.DateTime), path)
			return nil
		},
	}
	trust.add(cmd)
	cmd.Flags().StringVar(&username, "username", "", "the user name (asked for when left out)")
	cmd.Flags().BoolVar(&passwordStdin, "password-stdin", false, "read the password from stdin")
	return cmd
}
