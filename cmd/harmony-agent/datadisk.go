package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/harmonykaas/harmony/agent/datadisk"
)

// dataDiskCommand holds what runs before the agent, from
// harmony-data-disk.service.
func dataDiskCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "data-disk", Short: "The node's persistent data disk at boot"}
	var dir string
	var bindFlags []string
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
does nothing; with --dir mounted already (the lab), neither.

Each --bind DIR:TARGET then mounts the disk's directory DIR (made 0700 the
first time) at TARGET, so that one disk holds the state of several
services (the appliance's etcd, controller and backups) and a reimage
keeps all of it. With --bind, no data disk is an error: those services
must not start with their state on the system disk.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logs.logger()
			if err != nil {
				return err
			}
			binds := make([]datadisk.Bind, len(bindFlags))
			for i, f := range bindFlags {
				if binds[i], err = datadisk.ParseBind(f); err != nil {
					return fmt.Errorf("--bind: %w", err)
				}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			res, err := datadisk.Mount(ctx, datadisk.Config{SysBlock: "/sys/block", DevDir: "/dev", Dir: dir, Log: log})
			if err != nil {
				log.Error("data disk not mounted", "dir", dir, "err", err)
				return err
			}
			log.Info("data disk", "dir", dir, "device", res.Device, "formatted", res.Formatted, "mounted_before", res.Already, "why", res.Why)
			if len(binds) == 0 {
				return nil
			}
			if err := datadisk.BindAll(dir, binds, log); err != nil {
				log.Error("data disk directories not bound", "dir", dir, "err", err)
				return err
			}
			return nil
		},
	}
	f := mount.Flags()
	f.StringVar(&dir, "dir", "/var/lib/etcd", "where the data disk is mounted")
	f.StringArrayVar(&bindFlags, "bind", nil, "DIR:TARGET: mount the disk's directory DIR at TARGET (repeatable)")
	f.DurationVar(&timeout, "timeout", 4*time.Minute, "how long formatting and checking may take")
	logs.add(f)
	cmd.AddCommand(mount)
	return cmd
}
