package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/harmonykaas/harmony/controller"
	"github.com/harmonykaas/harmony/controller/backup"
	"github.com/harmonykaas/harmony/controller/store"
	"github.com/harmonykaas/harmony/internal/atomicfile"
)

func backupCommand() *cobra.Command {
	var dataDir, out, outDir, copiesFlag string
	var keep int
	cmd := &cobra.Command{
		Use:   "backup --data-dir DIR (-o FILE | --output-dir DIR [--keep N]) [--etcd-snapshots newest|all|none]",
		Short: "Write a consistent backup of the controller's store, CA and etcd snapshot copies, running or stopped",
		Long: `Write a backup of the data directory: the store, copied through one
bbolt read transaction while the controller goes on serving, the CA
certificate and key, and the controller's copies of its clusters' etcd
snapshots (DIR/etcd-snapshots): by default each cluster's newest, which
restores a cluster whose masters' datastore is lost with the controller's
machine. A running controller is asked over its local socket
(DIR/controller.sock, root only); a stopped one's store is read directly.

The backup holds the CA key and every cluster's secrets: it is written with
mode 0600; keep it like the CA key. Restore it with harmony-controller
restore. -o - writes to standard output.

--output-dir is for backups taken on a schedule (a systemd timer, cron):
each goes to DIR/harmony-controller-TIME.backup (DIR is made 0700), and
once it is complete the oldest beyond --keep are removed. Nothing else in
DIR is touched, and a backup that fails removes none.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			copies, err := backup.ParseCopies(copiesFlag)
			if err != nil {
				return fmt.Errorf("--etcd-snapshots: %w", err)
			}
			switch {
			case (out == "") == (outDir == ""):
				return errors.New("give one of -o FILE and --output-dir DIR")
			case outDir == "" && cmd.Flags().Changed("keep"):
				return errors.New("--keep is for --output-dir")
			case keep < 1:
				return fmt.Errorf("--keep %d: keep at least 1 backup", keep)
			}
			now := time.Now()
			if outDir != "" {
				if err := os.MkdirAll(outDir, 0o700); err != nil {
					return err
				}
				out = filepath.Join(outDir, backup.RotatedName(now))
			}
			if err := atomicfile.CheckOutput(out); err != nil {
				return err
			}
			var m *backup.Manifest
			err = atomicfile.WriteOutputFunc(out, cmd.OutOrStdout(), 0o600, func(w io.Writer) error {
				var err error
				m, err = writeBackup(cmd.Context(), dataDir, copies, now, w)
				return err
			})
			if err != nil {
				return err
			}
			if outDir != "" {
				removed, err := backup.Rotate(outDir, keep, now)
				if err != nil {
					return fmt.Errorf("%s is written; %w", out, err)
				}
				for _, name := range removed {
					fmt.Fprintf(cmd.ErrOrStderr(), "removed %s\n", filepath.Join(outDir, name))
				}
			}
			var copyBytes int64
			for _, f := range m.EtcdSnapshotCopies {
				copyBytes += f.Bytes
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "backup of %s to %s: %d nodes, %d clusters, %d providers, %d certificates, store %d bytes (transaction %d), CA %s, %d etcd snapshot copies (%d bytes)\n",
				dataDir, out, m.Store.Nodes, m.Store.Clusters, m.Store.Providers, m.Store.Certs, m.Store.Bytes, m.Store.TxID, m.Store.CAPin, len(m.EtcdSnapshotCopies), copyBytes)
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", defaultDataDir, "the controller's data directory")
	cmd.Flags().StringVarP(&out, "output", "o", "", "the backup file (mode 0600), or - for standard output")
	cmd.Flags().StringVar(&outDir, "output-dir", "", "a directory of backups: write DIR/harmony-controller-TIME.backup and keep the newest --keep")
	cmd.Flags().IntVar(&keep, "keep", 7, "with --output-dir, how many backups the directory keeps")
	cmd.Flags().StringVar(&copiesFlag, "etcd-snapshots", string(backup.NewestCopies), "which of the clusters' etcd snapshot copies the backup holds: newest (each cluster's), all, or none")
	return cmd
}

// writeBackup reads the store directly when no controller holds it, and
// asks the running controller otherwise. Either way what reaches w has
// been read back as a complete backup, or it is an error.
func writeBackup(ctx context.Context, dataDir string, copies backup.Copies, now time.Time, w io.Writer) (*backup.Manifest, error) {
	st, err := store.Open(filepath.Join(dataDir, store.FileName), store.Options{ReadOnly: true, LockTimeout: 500 * time.Millisecond})
	switch {
	case err == nil:
		defer st.Close()
		return backup.Write(w, st, dataDir, now, copies)
	case !errors.Is(err, store.ErrLocked):
		return nil, err
	}
	// A controller holds the store: it writes the backup.
	path := controller.LocalPathBackup + "?" + url.Values{controller.LocalBackupCopies: {string(copies)}}.Encode()
	resp, err := callLocal(ctx, dataDir, http.MethodGet, path, nil, http.StatusOK)
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	defer resp.Body.Close()
	// Everything written is read back as a backup on its way: a stream
	// the controller cut short fails here, and the file is not kept.
	m, err := backup.Verify(io.TeeReader(resp.Body, w))
	if err != nil {
		return nil, fmt.Errorf("backup from the running controller: %w", err)
	}
	if _, err := io.Copy(w, resp.Body); err != nil {
		return nil, err
	}
	return m, nil
}
