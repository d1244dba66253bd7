package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/harmonykaas/harmony/controller"
	"github.com/harmonykaas/harmony/controller/backup"
	"github.com/harmonykaas/harmony/controller/store"
	"github.com/harmonykaas/harmony/internal/atomicfile"
)

func backupCommand() *cobra.Command {
	var dataDir, out string
	cmd := &cobra.Command{
		Use:   "backup --data-dir DIR -o FILE",
		Short: "Write a consistent backup of the controller's store and CA, running or stopped",
		Long: `Write a backup of the data directory: the store, copied through one
bbolt read transaction while the controller goes on serving, and the CA
certificate and key. A running controller is asked over its local socket
(DIR/controller.sock, root only); a stopped one's store is read directly.

The backup holds the CA key and every cluster's secrets: it is written with
mode 0600; keep it like the CA key. Restore it with harmony-controller
restore. -o - writes to standard output.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := atomicfile.CheckOutput(out); err != nil {
				return err
			}
			var m *backup.Manifest
			err := atomicfile.WriteOutputFunc(out, cmd.OutOrStdout(), 0o600, func(w io.Writer) error {
				var err error
				m, err = writeBackup(cmd.Context(), dataDir, w)
				return err
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "backup of %s: %d nodes, %d clusters, %d providers, %d certificates, store %d bytes (transaction %d), CA %s\n",
				dataDir, m.Store.Nodes, m.Store.Clusters, m.Store.Providers, m.Store.Certs, m.Store.Bytes, m.Store.TxID, m.Store.CAPin)
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", defaultDataDir, "the controller's data directory")
	cmd.Flags().StringVarP(&out, "output", "o", "", "the backup file (mode 0600), or - for standard output")
	_ = cmd.MarkFlagRequired("output")
	return cmd
}

// writeBackup reads the store directly when no controller holds it, and
// asks the running controller otherwise. Either way what reaches w has
// been read back as a complete backup, or it is an error.
func writeBackup(ctx context.Context, dataDir string, w io.Writer) (*backup.Manifest, error) {
	st, err := store.Open(filepath.Join(dataDir, store.FileName), store.Options{ReadOnly: true, LockTimeout: 500 * time.Millisecond})
	switch {
	case err == nil:
		defer st.Close()
		return backup.Write(w, st, dataDir, time.Now())
	case !errors.Is(err, store.ErrLocked):
		return nil, err
	}
	// A controller holds the store: it writes the backup.
	resp, err := callLocal(ctx, dataDir, http.MethodGet, controller.LocalPathBackup, nil, http.StatusOK)
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
