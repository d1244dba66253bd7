package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/harmonykaas/harmony/integration/lab"
)

func labVMCommand() *cobra.Command {
	var stateDir string
	cmd := &cobra.Command{
		Use:   "vm on|off NAME [--state DIR]",
		Short: "Power a lab VM on or off through the lab's vCenter",
		Long: `Power a VM of the lab on or off through its vCenter simulator, as govc or
the vSphere client would on a real vCenter. Power off ends the VM's body at
once, as a VM losing power (a master holding the VIP hands it over to
another); power on boots it again with the same disks.`,
		Example: `  harmonyctl lab vm off lab-m1
  harmonyctl lab vm on lab-m1`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var on bool
			switch args[0] {
			case "on":
				on = true
			case "off":
			default:
				return fmt.Errorf("want on or off, got %q", args[0])
			}
			vm, err := lab.OpenVM(stateDir, args[1])
			if err != nil {
				return err
			}
			return vm.Power(cmd.Context(), on)
		},
	}
	cmd.Flags().StringVar(&stateDir, "state", "harmony-lab", "the lab's state directory")
	return cmd
}
