package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/client"
	"github.com/harmonykaas/harmony/controller/clientconfig"
)

func logoutCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "logout",
		Short: "End the session and remove it from the client config",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, err := clientconfig.Find(g.config)
			if err != nil {
				return err
			}
			cfg, err := clientconfig.Load(path)
			if err != nil {
				return err
			}
			if cfg.Session == nil {
				return fmt.Errorf("%s holds no session", path)
			}
			c, err := client.New(cfg, g.server)
			if err != nil {
				return err
			}
			var apiErr *client.APIError
			if err := c.Logout(cmd.Context()); err != nil && !(errors.As(err, &apiErr) && apiErr.Body.Code == v1.CodeSessionInvalid) {
				return err
			}
			name := cfg.Session.Username
			cfg.Session = nil
			if cfg.ClientCertificate == "" {
				// Nothing else in it: the file goes.
				if err := os.Remove(path); err != nil {
					return err
				}
			} else if err := cfg.Write(path); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Signed out %s\n", name)
			return nil
		},
	}
}
