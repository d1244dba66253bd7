package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/backup"
)

// LocalSocketFile is the controller's Unix socket in its data directory.
// It serves what must never cross the network, to root (or the
// controller's own user) on the controller's machine only: backups, which
// carry the CA key and every cluster's secrets, and a new admin
// credential for an admin locked out (harmony-controller admin-config).
const LocalSocketFile = "controller.sock"

// Paths served on the local socket.
const (
	LocalPathBackup = "/backup"
	// LocalBackupCopies is LocalPathBackup's parameter that says which
	// etcd snapshot copies the backup holds (backup.ParseCopies).
	LocalBackupCopies    = "etcd-snapshots"
	LocalPathAdminConfig = "/admin-config"
	// LocalPathInitAdmin creates the first admin user, with the setup
	// token, from the appliance's console.
	LocalPathInitAdmin = "/init-admin"
)

// maxSocketPath is what a sockaddr_un holds, with its terminating NUL.
const maxSocketPath = 107

func (c *Controller) localSocketPath() string {
	return filepath.Join(c.cfg.DataDir, LocalSocketFile)
}

// listenLocal binds the local socket. The controller holds the store's
// lock, so a socket file already there is a crashed controller's.
func (c *Controller) listenLocal() (net.Listener, error) {
	path := c.localSocketPath()
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("local socket %s: the path is longer than %d bytes; use a shorter --data-dir", path, maxSocketPath)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("local socket %s: %w", path, err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("local socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("local socket: %w", err)
	}
	return &peerCheckedListener{Listener: ln, uid: uint32(os.Geteuid()), log: c.log}, nil
}

// peerCheckedListener accepts only root and the controller's own user,
// by the kernel's word (SO_PEERCRED), whatever the file's mode says.
type peerCheckedListener struct {
	net.Listener
	uid uint32
	log *slog.Logger
}

func (l *peerCheckedListener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		uid, err := peerUID(conn)
		if err == nil && (uid == 0 || uid == l.uid) {
			return conn, nil
		}
		l.log.Warn("local socket: connection refused", "peer_uid", uid, "err", err)
		conn.Close()
	}
}

func peerUID(conn net.Conn) (uint32, error) {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return 0, errors.New("not a Unix connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if credErr != nil {
		return 0, credErr
	}
	return cred.Uid, nil
}

func (c *Controller) localRoutes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+LocalPathBackup, func(w http.ResponseWriter, r *http.Request) {
		copies, err := backup.ParseCopies(r.URL.Query().Get(LocalBackupCopies))
		if err != nil {
			writeError(w, badInput(&v1.FieldError{Field: LocalBackupCopies, Problem: err.Error()}))
			return
		}
		w.Header().Set("Content-Type", "application/x-tar")
		m, err := backup.Write(w, c.store, c.cfg.DataDir, c.now(), copies)
		if err != nil {
			// The tar is cut short; the client finds no complete backup.
			c.log.Error("backup failed", "err", err)
			return
		}
		c.log.Info("backup written", "nodes", m.Store.Nodes, "clusters", m.Store.Clusters, "bytes", m.Store.Bytes, "txid", m.Store.TxID, "etcdSnapshotCopies", len(m.EtcdSnapshotCopies))
	})
	mux.HandleFunc("POST "+LocalPathAdminConfig, func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Query().Get("name")
		if err := v1.ValidateNodeName(name); err != nil {
			writeError(w, badInput(&v1.FieldError{Field: "name", Problem: err.Error()}))
			return
		}
		cfg, err := c.NewAdminConfig(name, "local socket")
		if err != nil {
			writeError(w, internalError("admin config", err))
			return
		}
		data, err := cfg.Marshal()
		if err != nil {
			writeError(w, internalError("admin config", err))
			return
		}
		w.Header().Set("Content-Type", "application/yaml")
		w.Write(data)
	})
	mux.HandleFunc("POST "+LocalPathInitAdmin, func(w http.ResponseWriter, r *http.Request) {
		req, err := v1.DecodeSetupRequest(http.MaxBytesReader(w, r.Body, v1.MaxAuthBytes))
		if err != nil {
			writeError(w, badInput(err))
			return
		}
		u, err := c.access.Setup(r.Context(), *req)
		if err != nil {
			writeError(w, accessError(err, "user"))
			return
		}
		writeJSON(w, http.StatusCreated, u)
	})
	return mux
}

// LocalClient is an HTTP client for the local socket of the controller
// whose data directory is dataDir; its URLs are "http://local" + path.
func LocalClient(dataDir string) *http.Client {
	path := filepath.Join(dataDir, LocalSocketFile)
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		ResponseHeaderTimeout: time.Minute,
	}}
}
