package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller"
	"github.com/harmonykaas/harmony/controller/access"
	"github.com/harmonykaas/harmony/internal/prompt"
)

func initAdminCommand() *cobra.Command {
	var dataDir, username string
	var passwordStdin bool
	cmd := &cobra.Command{
		Use:   "init-admin --data-dir DIR [--username admin]",
		Short: "Create the first admin user from the controller's machine (the appliance console)",
		Long: `A controller with no admin user writes a one-time setup token into its data
directory. init-admin, run as root on the controller's machine, reads it and
creates the first admin user with a password you choose, over the
controller's local socket. It is the console's way to do what harmonyctl
setup does over the network.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			token, err := os.ReadFile(filepath.Join(dataDir, access.SetupTokenFile))
			if err != nil {
				return fmt.Errorf("no setup token (is there an admin user already?): %w", err)
			}
			password, err := prompt.Password(cmd.InOrStdin(), cmd.ErrOrStderr(), "New admin password: ", passwordStdin, true)
			if err != nil {
				return err
			}
			body, err := json.Marshal(v1.SetupRequest{Token: strings.TrimSpace(string(token)), Name: username, Password: password})
			if err != nil {
				return err
			}
			resp, err := callLocal(cmd.Context(), dataDir, http.MethodPost, controller.LocalPathInitAdmin, bytes.NewReader(body), http.StatusCreated)
			if err != nil {
				return err
			}
			resp.Body.Close()
			fmt.Fprintf(cmd.OutOrStdout(), "created admin user %s; sign in with harmonyctl login --username %s\n", username, username)
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", defaultDataDir, "the controller's data directory")
	cmd.Flags().StringVar(&username, "username", "admin", "the first admin's user name")
	cmd.Flags().BoolVar(&passwordStdin, "password-stdin", false, "read the password from stdin")
	return cmd
}
