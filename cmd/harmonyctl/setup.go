package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/client"
)

func setupCommand(g *globals) *cobra.Command {
	var trust trustFlags
	var tokenFile, username string
	var passwordStdin bool
	cmd := &cobra.Command{
		Use:   "setup",
		Short: "Create the first admin user with the controller's one-time setup token",
		Long: `A new controller with no admin user writes a one-time setup token to
DATA_DIR/setup-token (mode 0600) and logs the file's path. setup reads it
and creates the first admin user with a password you choose; the token is
then used up and its file removed. Then sign in with harmonyctl login.`,
		Example: `  harmonyctl setup --server https://198.18.100.1:9443 --ca-file ca.pem --token-file /var/lib/harmony-controller/setup-token --username admin`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, cfg, err := trust.baseConfig(cmd.Context(), g)
			if err != nil {
				return err
			}
			token, err := os.ReadFile(tokenFile)
			if err != nil {
				return fmt.Errorf("--token-file: %w", err)
			}
			password, err := readPassword(cmd, "New admin password: ", passwordStdin, true)
			if err != nil {
				return err
			}
			c, err := client.New(cfg, "")
			if err != nil {
				return err
			}
			u, err := c.Setup(cmd.Context(), v1.SetupRequest{Token: strings.TrimSpace(string(token)), Name: username, Password: password})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Created admin user %s; sign in with: harmonyctl login --server %s --username %s\n", u.Name, cfg.Server, u.Name)
			return nil
		},
	}
	trust.add(cmd)
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "the controller's setup-token file (required)")
	cmd.Flags().StringVar(&username, "username", "admin", "the first admin's user name")
	cmd.Flags().BoolVar(&passwordStdin, "password-stdin", false, "read the password from stdin")
	_ = cmd.MarkFlagRequired("token-file")
	return cmd
}
