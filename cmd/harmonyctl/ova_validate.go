package main

import (
	"fmt"
	"os"
	"sort"

	"github.com/spf13/cobra"

	"github.com/harmonykaas/harmony/ova/archive"
)

func ovaValidateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "validate FILE",
		Short: "Check an OVA: tar order, USTAR headers, manifest digests, disk headers, sizes and capacities",
		Long: `Check an OVA the way an importer would, and more strictly: the entries are
plain USTAR in the order .ovf, .mf, disks; every manifest digest matches;
every disk is a version 3 streamOptimized VMDK whose header, descriptor and
footer agree, with the capacity the descriptor states; References sizes
match the archive. Every fault is printed; the exit status is non-zero if
there is any.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			c, err := archive.Validate(cmd.Context(), f)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			names := make([]string, 0, len(c.Disks))
			for name := range c.Disks {
				names = append(names, name)
			}
			sort.Strings(names)
			fmt.Fprintf(cmd.OutOrStdout(), "%s: ok: %d files, %s manifest, disks %v\n", args[0], len(c.Entries), c.Hash, names)
			return nil
		},
	}
}
