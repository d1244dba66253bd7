package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/harmonykaas/harmony/agent/datadisk"
)

// dataDiskCommand holds what runs before the agent, from
// harmony-data-disk.service.
func dataDiskCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "data-disk", Short: "The node's persistent data disk at boot"}
	var dir string
	var logs logFlags
	var timeout time.Duration
	mount := &cobra.Command{
		Use:   "mount",
		Short: "Find the data disk, format it the first time, and mount it",
		Long: `Finds the node's data disk among the disks that do not hold the root file
system: the one labelled ` + datadisk.Label + `, else the one disk with no
signature at all, which it formats (ext4) first. A disk with another file
system or a partition table is never touched, and neither is any disk when
two are blank: that is an error to look at, not a guess. The disk is
checked (e2fsck -p) and mounted at --dir. Without a data disk (a worker) it
does nothing; with --dir mounted already (the lab), neither.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logs.logger()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			res, err := datadisk.Mount(ctx, datadisk.Config{SysBlock: "/sys/block", DevDir: "/dev", Dir: dir, Log: log})
			if err != nil {
				log.Error("data disk not mounted", "dir", dir, "err", err)
				return err
			}
			log.Info("data disk", "dir", dir, "device", res.Device, "formatted", res.Formatted, "mounted_before", res.Already, "why", res.Why)
			return nil
		},
	}
	f := mount.Flags()
	f.StringVar(&dir, "dir", "/var/lib/etcd", "where the data disk is mounted")
	f.DurationVar(&timeout, "timeout", 4*time.Minute, "how long formatting and checking may take")
	logs.add(f)
	cmd.AddCommand(mount)
	return cmd
}
