// Package backup writes and restores a controller's data directory: the
// store, copied through one bbolt read transaction while the controller
// runs, the CA, and the controller's copies of its clusters' etcd
// snapshots. A backup holds the CA key and every cluster's secrets: it is
// written 0600 and is only ever made on the controller's machine.
package backup

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/harmonykaas/harmony/controller/ca"
	"github.com/harmonykaas/harmony/controller/etcdcopies"
	"github.com/harmonykaas/harmony/controller/store"
	"github.com/harmonykaas/harmony/internal/buildinfo"
	"github.com/harmonykaas/harmony/internal/etcdsnapshot"
)

// ManifestFile is the first entry of a backup.
const ManifestFile = "backup.json"

const (
	// format 2 added the etcd snapshot copies; a backup of format 1 has
	// none, and reads the same.
	format       = 2
	maxSmallFile = 1 << 20
	// maxStoreFile bounds the store in a backup being restored.
	maxStoreFile = 64 << 30
)

// Manifest says what a backup holds.
type Manifest struct {
	Format            int           `json:"format"`
	CreatedAt         time.Time     `json:"createdAt"`
	ControllerVersion string        `json:"controllerVersion"`
	Store             store.Summary `json:"store"`
	// EtcdSnapshotCopies are the copies after the store, in this order.
	EtcdSnapshotCopies []etcdcopies.File `json:"etcdSnapshotCopies,omitempty"`
}

// Copies says which of the controller's copies of its clusters' etcd
// snapshots a backup holds.
type Copies string

const (
	// NewestCopies is each cluster's newest copy: what restoring a
	// cluster whose masters' datastore is lost needs, at a fraction of
	// the size of all of them.
	NewestCopies Copies = "newest"
	AllCopies    Copies = "all"
	NoCopies     Copies = "none"
)

// ParseCopies reads a choice of copies; "" is NewestCopies.
func ParseCopies(s string) (Copies, error) {
	switch c := Copies(s); c {
	case NewestCopies, AllCopies, NoCopies:
		return c, nil
	case "":
		return NewestCopies, nil
	}
	return "", fmt.Errorf("%.40q is not one of newest, all, none", s)
}

// Write writes a backup of the data directory dir, whose open store is st,
// to w as a tar: the manifest, the CA certificate and key, the store, and
// the etcd snapshot copies that copies selects.
func Write(w io.Writer, st *store.Store, dir string, now time.Time, copies Copies) (*Manifest, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, ca.CertFile))
	if err != nil {
		return nil, fmt.Errorf("back up the CA: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, ca.KeyFile))
	if err != nil {
		return nil, fmt.Errorf("back up the CA: %w", err)
	}
	files, err := openCopies(dir, copies)
	if err != nil {
		return nil, fmt.Errorf("back up the etcd snapshot copies: %w", err)
	}
	defer closeCopies(files)
	tw := tar.NewWriter(w)
	var m *Manifest
	err = st.Snapshot(func(sum store.Summary, copyTo func(io.Writer) error) error {
		m = &Manifest{Format: format, CreatedAt: now.UTC(), ControllerVersion: buildinfo.Version, Store: sum}
		for _, f := range files {
			m.EtcdSnapshotCopies = append(m.EtcdSnapshotCopies, f.File)
		}
		data, err := json.MarshalIndent(m, "", "  ")
		if err != nil {
			return err
		}
		for _, f := range []struct {
			name string
			data []byte
		}{{ManifestFile, data}, {ca.CertFile, certPEM}, {ca.KeyFile, keyPEM}} {
			if err := writeEntry(tw, f.name, int64(len(f.data)), now, func(w io.Writer) error {
				_, err := w.Write(f.data)
				return err
			}); err != nil {
				return err
			}
		}
		return writeEntry(tw, store.FileName, sum.Bytes, now, copyTo)
	})
	if err != nil {
		return nil, fmt.Errorf("write backup: %w", err)
	}
	// After the store's read transaction: a long one would hold back the
	// growth of the running controller's store.
	for _, f := range files {
		err := writeEntry(tw, copyEntry(f.File), f.Bytes, now, func(w io.Writer) error {
			_, err := io.Copy(w, io.LimitReader(f.file, f.Bytes))
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("write backup: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("write backup: %w", err)
	}
	return m, nil
}

type openCopy struct {
	etcdcopies.File
	file *os.File
}

// openCopies opens the copies to back up before the manifest names
// them, so that one the running controller prunes meanwhile stays
// readable; one pruned before it is opened is left out.
func openCopies(dir string, copies Copies) ([]openCopy, error) {
	if copies == NoCopies {
		return nil, nil
	}
	files, err := etcdcopies.Files(dir)
	if err != nil {
		return nil, err
	}
	var open []openCopy
	for i, f := range files {
		// Files lists each cluster's copies together, oldest first.
		if copies == NewestCopies && i+1 < len(files) && files[i+1].Cluster == f.Cluster {
			continue
		}
		c, err := openFile(dir, f)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			closeCopies(open)
			return nil, err
		}
		open = append(open, c)
	}
	return open, nil
}

func openFile(dir string, f etcdcopies.File) (openCopy, error) {
	path, err := f.Path(dir)
	if err != nil {
		return openCopy{}, err
	}
	fh, err := os.Open(path)
	if err != nil {
		return openCopy{}, err
	}
	info, err := fh.Stat()
	if err != nil {
		fh.Close()
		return openCopy{}, err
	}
	f.Bytes = info.Size()
	return openCopy{File: f, file: fh}, nil
}

func closeCopies(open []openCopy) {
	for _, c := range open {
		c.file.Close()
	}
}

// copyEntry is a copy's name in a backup: its path under the data
// directory.
func copyEntry(f etcdcopies.File) string { return etcdcopies.Dir + "/" + f.Cluster + "/" + f.Name }

// parseCopyEntry reads a copy's entry name; false for a name outside the
// copies' directory, an error for one in it that is no copy's.
func parseCopyEntry(name string) (etcdcopies.File, bool, error) {
	rest, ok := strings.CutPrefix(name, etcdcopies.Dir+"/")
	if !ok {
		return etcdcopies.File{}, false, nil
	}
	cluster, file, _ := strings.Cut(rest, "/")
	f := etcdcopies.File{Cluster: cluster, Name: file}
	return f, true, f.Check()
}

func writeEntry(tw *tar.Writer, name string, size int64, now time.Time, body func(io.Writer) error) error {
	hdr := &tar.Header{Name: name, Mode: 0o600, Size: size, ModTime: now.UTC(), Typeflag: tar.TypeReg, Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if err := body(tw); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// RestoreOptions say how far a restore may go.
type RestoreOptions struct {
	// Force replaces a store that is healthy, or a CA that differs from
	// the backup's; the replaced files are kept beside, renamed.
	Force bool
	Now   time.Time
}

// ErrRunning means a controller holds the data directory's store.
var ErrRunning = errors.New("a controller is running on this data directory; stop it first")

// Restore checks the backup read from r and installs it into the data
// directory dir. Nothing in dir changes unless the whole backup is good:
// the store passes the same checks a controller makes at start, the CA
// parses, the store belongs to that CA, and each etcd snapshot copy is
// whole. Files it replaces are renamed to NAME.replaced-TIME, never
// deleted; a copy already there stays, as do copies the backup lacks.
func Restore(r io.Reader, dir string, opts RestoreOptions) (*Manifest, error) {
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	own, err := ownerOf(dir)
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	storePath := filepath.Join(dir, store.FileName)
	tmp := filepath.Join(dir, ".restore-"+store.FileName)
	defer os.Remove(tmp)
	// The copies wait here until the whole backup has been checked; what
	// a restore cut short left here goes.
	staging := filepath.Join(dir, ".restore-"+etcdcopies.Dir)
	if err := os.RemoveAll(staging); err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	defer os.RemoveAll(staging)
	type stagedCopy struct {
		etcdcopies.File
		path string
	}
	var staged []stagedCopy
	m, certPEM, keyPEM, err := readBackup(r, sinks{
		store: func(r io.Reader) error { return copyToFile(tmp, r) },
		copy: func(f etcdcopies.File, r io.Reader) error {
			if err := os.MkdirAll(staging, 0o700); err != nil {
				return err
			}
			path := filepath.Join(staging, fmt.Sprint(len(staged)))
			staged = append(staged, stagedCopy{f, path})
			return copyToFile(path, r)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	restoredCA, err := ca.Parse(certPEM, keyPEM, opts.Now)
	if err != nil {
		return nil, fmt.Errorf("restore: the backup's CA: %w", err)
	}
	st, err := store.Open(tmp, store.Options{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("restore: the backup's store: %w", err)
	}
	pin, err := st.CAPin()
	st.Close()
	if err != nil {
		return nil, fmt.Errorf("restore: the backup's store: %w", err)
	}
	if pin != "" && pin != restoredCA.Pin() {
		return nil, fmt.Errorf("restore: the backup's store belongs to CA %s, its CA file is %s", pin, restoredCA.Pin())
	}

	if !opts.Force {
		if err := refuseOverwrite(dir, storePath, restoredCA); err != nil {
			return nil, err
		}
	}
	unlock, err := lockStore(storePath)
	if err != nil {
		return nil, err
	}
	defer unlock()
	suffix := ".replaced-" + opts.Now.UTC().Format("20060102T150405Z")
	for _, name := range []string{store.FileName, ca.CertFile, ca.KeyFile} {
		old := filepath.Join(dir, name)
		if err := os.Rename(old, old+suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("restore: keep the old %s: %w", name, err)
		}
	}
	// The CA first and the store last: a restore cut short leaves a CA and
	// no store, which a controller refuses, and running restore again
	// finishes it.
	if _, err := ca.Import(dir, certPEM, keyPEM, opts.Now); err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	if err := own.give(filepath.Join(dir, ca.CertFile), filepath.Join(dir, ca.KeyFile)); err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	for _, c := range staged {
		if err := etcdcopies.Install(dir, c.File, c.path); err != nil {
			return nil, fmt.Errorf("restore: %w", err)
		}
	}
	if err := own.giveTree(filepath.Join(dir, etcdcopies.Dir)); err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	if err := own.give(tmp); err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	if err := os.Rename(tmp, storePath); err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return m, nil
}

// owner is who owns a data directory: what a restore writes goes to
// them. A restore runs as root, and the controller, often a systemd
// dynamic user, must read and write what it wrote. (systemd gives a
// StateDirectory to its service's user, but does not look inside one
// that is already that user's.)
type owner struct{ uid, gid uint32 }

func ownerOf(dir string) (owner, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return owner{}, fmt.Errorf("the owner of %s: %w", dir, err)
	}
	return owner{st.Uid, st.Gid}, nil
}

// give gives paths to o where they are not o's. Only root can: anyone
// else writes files of their own, as is the directory they may write in.
func (o owner) give(paths ...string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	for _, p := range paths {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return fmt.Errorf("the owner of %s: %w", p, err)
		}
		if st.Uid != o.uid || st.Gid != o.gid {
			if err := os.Lchown(p, int(o.uid), int(o.gid)); err != nil {
				return err
			}
		}
	}
	return nil
}

// giveTree is give for everything under root, root included, when it
// exists.
func (o owner) giveTree(root string) error {
	err := filepath.WalkDir(root, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return o.give(p)
	})
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// refuseOverwrite refuses to replace a healthy store or another CA without
// Force: a restore is for a lost or damaged data directory.
func refuseOverwrite(dir, storePath string, restored *ca.CA) error {
	if existing, err := ca.Load(dir); err == nil && existing.Pin() != restored.Pin() {
		return fmt.Errorf("restore: %s already has another CA (%s, the backup's is %s); --force replaces it", dir, existing.Pin(), restored.Pin())
	}
	switch err := store.CheckFile(storePath); {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("restore: %w", err)
	case err != nil:
		return nil // damaged: what a restore is for
	}
	st, err := store.Open(storePath, store.Options{ReadOnly: true, LockTimeout: 100 * time.Millisecond})
	switch {
	case errors.Is(err, store.ErrLocked):
		return fmt.Errorf("restore %s: %w", storePath, ErrRunning)
	case err != nil:
		return nil // damaged in its pages
	}
	st.Close()
	return fmt.Errorf("restore: %s holds a healthy store; --force replaces it (the current one is kept beside it)", storePath)
}

// lockStore takes bbolt's own lock on the store file, so that no
// controller starts on it during the restore and none is running.
func lockStore(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return func() {}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("restore %s: %w", path, ErrRunning)
		}
		return nil, fmt.Errorf("restore: lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// Verify reads a whole backup and checks that it is complete: every entry
// there, once, in full, the store the size its manifest says, and every
// etcd snapshot copy the manifest names, whole.
func Verify(r io.Reader) (*Manifest, error) {
	discard := func(r io.Reader) error {
		_, err := io.Copy(io.Discard, r)
		return err
	}
	m, _, _, err := readBackup(r, sinks{
		store: discard,
		copy:  func(_ etcdcopies.File, r io.Reader) error { return discard(r) },
	})
	return m, err
}

// sinks take the large entries of a backup as they stream by; each reads
// its entry to the end.
type sinks struct {
	store func(io.Reader) error
	copy  func(etcdcopies.File, io.Reader) error
}

// readBackup reads the archive: the store and the copies into their
// sinks, the rest into memory. Every entry must be one it knows, once,
// within its bound.
func readBackup(r io.Reader, to sinks) (m *Manifest, certPEM, keyPEM []byte, err error) {
	tr := tar.NewReader(r)
	seen := map[string]bool{}
	var storeBytes int64
	var copies []etcdcopies.File
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, nil, fmt.Errorf("not a Harmony backup: %w", err)
		}
		name := hdr.Name
		if len(name) > 64 {
			name = name[:64] + "…"
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil, nil, nil, fmt.Errorf("backup entry %q: not a regular file", name)
		}
		if seen[hdr.Name] {
			return nil, nil, nil, fmt.Errorf("backup entry %q: appears twice", name)
		}
		seen[hdr.Name] = true
		switch hdr.Name {
		case ManifestFile, ca.CertFile, ca.KeyFile:
			if hdr.Size > maxSmallFile {
				return nil, nil, nil, fmt.Errorf("backup entry %q: %d bytes, limit %d", name, hdr.Size, maxSmallFile)
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("backup entry %q: %w", name, err)
			}
			switch hdr.Name {
			case ManifestFile:
				m = &Manifest{}
				dec := json.NewDecoder(bytes.NewReader(data))
				dec.DisallowUnknownFields()
				if err := dec.Decode(m); err != nil {
					return nil, nil, nil, fmt.Errorf("backup entry %q: %w", name, err)
				}
				if m.Format < 1 || m.Format > format {
					return nil, nil, nil, fmt.Errorf("backup entry %q: format %d, this controller reads 1 to %d", name, m.Format, format)
				}
			case ca.CertFile:
				certPEM = data
			case ca.KeyFile:
				keyPEM = data
			}
		case store.FileName:
			if hdr.Size > maxStoreFile {
				return nil, nil, nil, fmt.Errorf("backup entry %q: %d bytes, limit %d", name, hdr.Size, int64(maxStoreFile))
			}
			if err := to.store(tr); err != nil {
				return nil, nil, nil, fmt.Errorf("backup entry %q: %w", name, err)
			}
			storeBytes = hdr.Size
		default:
			f, isCopy, err := parseCopyEntry(hdr.Name)
			switch {
			case !isCopy:
				return nil, nil, nil, fmt.Errorf("backup entry %q: not part of a Harmony backup", name)
			case err != nil:
				return nil, nil, nil, fmt.Errorf("backup entry %q: %w", name, err)
			case hdr.Size > etcdsnapshot.MaxBytes:
				return nil, nil, nil, fmt.Errorf("backup entry %q: %d bytes, limit %d", name, hdr.Size, int64(etcdsnapshot.MaxBytes))
			}
			f.Bytes = hdr.Size
			check := etcdsnapshot.NewChecker()
			if err := to.copy(f, io.TeeReader(tr, check)); err != nil {
				return nil, nil, nil, fmt.Errorf("backup entry %q: %w", name, err)
			}
			if err := check.Check(); err != nil {
				return nil, nil, nil, fmt.Errorf("backup entry %q: not a whole etcd snapshot: %w", name, err)
			}
			copies = append(copies, f)
		}
	}
	for _, want := range []string{ManifestFile, ca.CertFile, ca.KeyFile, store.FileName} {
		if !seen[want] {
			return nil, nil, nil, fmt.Errorf("not a complete Harmony backup: %s is missing", want)
		}
	}
	if storeBytes != m.Store.Bytes {
		return nil, nil, nil, fmt.Errorf("not a complete Harmony backup: the store has %d bytes, its manifest says %d", storeBytes, m.Store.Bytes)
	}
	if err := sameCopies(m.EtcdSnapshotCopies, copies); err != nil {
		return nil, nil, nil, err
	}
	return m, certPEM, keyPEM, nil
}

// sameCopies checks the copies read against those the manifest names.
func sameCopies(named, read []etcdcopies.File) error {
	want := map[string]int64{}
	for _, f := range named {
		want[copyEntry(f)] = f.Bytes
	}
	for _, f := range read {
		size, ok := want[copyEntry(f)]
		switch {
		case !ok:
			return fmt.Errorf("backup entry %q: not in the backup's manifest", copyEntry(f))
		case size != f.Bytes:
			return fmt.Errorf("backup entry %q: %d bytes, its manifest says %d", copyEntry(f), f.Bytes, size)
		}
		delete(want, copyEntry(f))
	}
	for name := range want {
		return fmt.Errorf("not a complete Harmony backup: %s is missing", name)
	}
	return nil
}

func copyToFile(path string, r io.Reader) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
