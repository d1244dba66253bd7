package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/harmonykaas/harmony/integration/lab"
	"github.com/harmonykaas/harmony/internal/logging"
)

func labImportImageCommand() *cobra.Command {
	var stateDir string
	cmd := &cobra.Command{
		Use:   "import-image OVA [--state DIR]",
		Short: "Import another node OVA into the lab, to upgrade its cluster to",
		Long: `Import a node OVA into the lab's vCenter through its controller, as
harmonyctl image import does against a real one, and tell the lab which OVA
the VMs cloned from it boot. make next-image builds a second node image from
the same checkout, with another version, for an upgrade in the lab.`,
		Example: `  harmonyctl lab import-image out/images/next/harmony-node-*-next.ova
  harmonyctl cluster upgrade lab --image harmony-node-<version>-next --wait`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := logging.New(os.Stderr, "text", "info")
			if err != nil {
				return err
			}
			img, err := lab.ImportImage(cmd.Context(), stateDir, args[0], log)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "image %s imported (Kubernetes %v)\n", img.Name, img.KubernetesVersions)
			return nil
		},
	}
	cmd.Flags().StringVar(&stateDir, "state", "harmony-lab", "the lab's state directory")
	return cmd
}
