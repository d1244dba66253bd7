package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/harmonykaas/harmony/integration/lab"
	"github.com/harmonykaas/harmony/internal/logging"
)

func labServeCommand() *cobra.Command {
	var stateDir string
	cmd := &cobra.Command{
		Use:   "serve --state DIR",
		Short: "Run the lab's vCenter simulator and VM bodies (lab up starts it)",
		Long: `Run the vCenter simulator of the lab in --state and give every VM that is
powered on in it a body booted from its image, until SIGTERM; then stop the
bodies. 'harmonyctl lab up' starts it, detached, and 'lab down' stops it.`,
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logging.New(os.Stderr, "text", "info")
			if err != nil {
				return err
			}
			return lab.Serve(cmd.Context(), stateDir, log)
		},
	}
	cmd.Flags().StringVar(&stateDir, "state", "harmony-lab", "the lab's state directory")
	return cmd
}
