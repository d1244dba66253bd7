package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/client"
)

func clusterRestoreCommand(g *globals) *cobra.Command {
	var req v1.RestoreRequest
	var snapshot string
	var wf waitFlags
	cmd := &cobra.Command{
		Use:   "restore NAME [--source MASTER] [--snapshot TIME] [--from-controller]",
		Short: "Restore a cluster's etcd from a master's snapshot",
		Long: `Bring a cluster's etcd keyspace, all of its Kubernetes objects, back
from a snapshot one master took (harmonyctl cluster get shows the age of
each master's newest; -o yaml lists when each was taken, etcdSnapshots).
For a cluster that lost its etcd quorum, or its data to a bad write:
everything written since the snapshot is lost, and the API is down until
the source's control plane is back.

Every master stops its control plane and etcd member at once; the source
master restores its snapshot as a new etcd cluster of one member; then
every other master, its state set aside, joins that cluster afresh; each
master starts its control plane anew once its member is back. No state is destroyed: each master's state before the restore stays
on its data disk, in etcd's data directory. The restore ends when every
master reports it done.

By default the snapshot is the newest any master reports. --source picks
the master, and --snapshot one of its snapshots by when it was taken
(RFC 3339, to the second, as its file name says: snapshot-20261129T030000Z.db
is 2026-11-29T03:00:00Z); one the master does not report is refused
before anything stops.

--from-controller restores the controller's copy instead (cluster get
lists them, ETCD SNAPSHOT ON THE CONTROLLER), for masters that lost their
own snapshots with their datastore: the newest, or the one --snapshot
names. The source (--source, default the first master) fetches it onto
its data disk first.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.complete(clusterNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			if snapshot != "" {
				t, err := time.Parse(time.RFC3339, snapshot)
				if err != nil {
					return fmt.Errorf("--snapshot %q: want a time such as 2026-11-29T03:00:00Z", snapshot)
				}
				req.SnapshotTakenAt = &t
			}
			return g.startOperation(cmd, wf, func(ctx context.Context, c *client.Client) (*v1.Operation, error) {
				return c.RestoreCluster(ctx, args[0], req)
			})
		},
	}
	cmd.Flags().StringVar(&req.Source, "source", "", "the master whose snapshot is restored (default: the one with the newest)")
	cmd.Flags().StringVar(&snapshot, "snapshot", "", "when the snapshot was taken, RFC 3339 (default: the source's newest)")
	cmd.Flags().BoolVar(&req.FromController, "from-controller", false, "restore the controller's copy of the snapshot, which the source fetches")
	addWaitFlags(cmd, &wf, false)
	return cmd
}
