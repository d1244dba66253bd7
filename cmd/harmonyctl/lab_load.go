package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/harmonykaas/harmony/integration/lab"
)

func labLoadImageCommand() *cobra.Command {
	var stateDir string
	var vms []string
	cmd := &cobra.Command{
		Use:   "load-image ARCHIVE... [--vm NAME]... [--state DIR]",
		Short: "Load container images (OCI archives) into the lab's VMs",
		Long: `Import OCI archives (ctr images import) into the containerd of every running
VM of the lab, or of the --vm named, where the kubelet finds them: nothing
can be pulled from a registry here. make test-images builds Kubernetes'
test images (agnhost, busybox) as such archives.`,
		Example: `  harmonyctl lab load-image $(scripts/build-test-images.sh --dir)/agnhost.tar
  harmonyctl lab load-image --vm lab-w1 app.tar`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			running, err := lab.RunningVMs(stateDir)
			if err != nil {
				return err
			}
			targets := running
			if len(vms) > 0 {
				targets = nil
				for _, name := range vms {
					vm, err := lab.OpenVM(stateDir, name)
					if err != nil {
						return err
					}
					targets = append(targets, vm)
				}
			}
			if len(targets) == 0 {
				return fmt.Errorf("no running VM in the lab at %s", stateDir)
			}
			for _, vm := range targets {
				for _, archive := range args {
					if err := vm.LoadImage(cmd.Context(), archive); err != nil {
						return err
					}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: loaded %d image(s)\n", vm.Name, len(args))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&stateDir, "state", "harmony-lab", "the lab's state directory")
	cmd.Flags().StringSliceVar(&vms, "vm", nil, "load into this VM only (repeatable; default every running VM)")
	return cmd
}
