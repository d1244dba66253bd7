package main

import (
	"io"
	"net/http"
	"net/url"

	"github.com/spf13/cobra"

	"github.com/harmonykaas/harmony/controller"
	"github.com/harmonykaas/harmony/internal/atomicfile"
)

func adminConfigCommand() *cobra.Command {
	var dataDir, out, name string
	cmd := &cobra.Command{
		Use:   "admin-config --data-dir DIR -o FILE [--name NAME]",
		Short: "Issue a new admin credential from the controller's machine (for an admin locked out)",
		Long: `Ask the running controller, over its local socket (root only), for a new
admin client configuration: a fresh key and an admin certificate, recorded
and revocable like any other. This is the way back in when every admin
certificate has expired or been revoked.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := atomicfile.CheckOutput(out); err != nil {
				return err
			}
			resp, err := callLocal(cmd.Context(), dataDir, http.MethodPost,
				controller.LocalPathAdminConfig+"?name="+url.QueryEscape(name), nil, http.StatusOK)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			if err != nil {
				return err
			}
			return atomicfile.WriteOutput(out, cmd.OutOrStdout(), data, 0o600)
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", defaultDataDir, "the controller's data directory")
	cmd.Flags().StringVarP(&out, "output", "o", "", "the client configuration file (mode 0600), or - for standard output")
	cmd.Flags().StringVar(&name, "name", "admin", "the admin's name (the certificate's common name)")
	_ = cmd.MarkFlagRequired("output")
	return cmd
}
