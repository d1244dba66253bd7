package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/harmonykaas/harmony/controller/backup"
)

func restoreCommand() *cobra.Command {
	var dataDir, file string
	var force bool
	cmd := &cobra.Command{
		Use:   "restore --data-dir DIR -f BACKUP",
		Short: "Restore a data directory's store and CA from a backup (controller stopped)",
		Long: `Check a backup made by harmony-controller backup and install it into the
data directory. The controller must be stopped. The backup is checked in
full first (the store as a controller checks it at start, the CA, that
they belong together, and that each etcd snapshot copy is whole); nothing
changes unless it is good. A copy already in DIR/etcd-snapshots stays, and
so do copies the backup lacks.

Without --force, restore only fills a data directory whose store is
missing or damaged, and whose CA, if any, is the backup's. Files it
replaces are kept beside, renamed NAME.replaced-TIME.

Agents whose node is in the backup reconnect by themselves: an agent that
the controller told "node gone" keeps trying its certificate, with a
backoff of at most a few minutes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := os.Open(file)
			if err != nil {
				return err
			}
			defer f.Close()
			m, err := backup.Restore(f, dataDir, backup.RestoreOptions{Force: force})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "restored %s from the backup of %s: %d nodes, %d clusters, %d providers, %d certificates, CA %s, %d etcd snapshot copies; start the controller\n",
				dataDir, m.CreatedAt.Format(time.RFC3339), m.Store.Nodes, m.Store.Clusters, m.Store.Providers, m.Store.Certs, m.Store.CAPin, len(m.EtcdSnapshotCopies))
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", defaultDataDir, "the controller's data directory")
	cmd.Flags().StringVarP(&file, "file", "f", "", "the backup file")
	cmd.Flags().BoolVar(&force, "force", false, "replace a healthy store or a different CA (the old files are kept beside)")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}
