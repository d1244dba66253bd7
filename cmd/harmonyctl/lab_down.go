package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/harmonykaas/harmony/integration/lab"
	"github.com/harmonykaas/harmony/internal/logging"
)

func labDownCommand() *cobra.Command {
	var stateDir string
	cmd := &cobra.Command{
		Use:   "down [--state DIR]",
		Short: "Remove everything the lab in --state made",
		Long: `Stop the lab's processes and VM bodies, and remove its network namespaces,
link, mounts and files. It works after a crash or a killed 'lab up', and
does nothing when there is no lab.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logging.New(os.Stderr, "text", "info")
			if err != nil {
				return err
			}
			return lab.Down(cmd.Context(), stateDir, log)
		},
	}
	cmd.Flags().StringVar(&stateDir, "state", "harmony-lab", "the lab's state directory")
	return cmd
}
