package controller

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/backup"
	"github.com/harmonykaas/harmony/controller/ca"
	"github.com/harmonykaas/harmony/controller/etcdcopies"
	"github.com/harmonykaas/harmony/controller/store"
	"github.com/harmonykaas/harmony/internal/etcdsnapshot"
	"github.com/harmonykaas/harmony/internal/testutil"
)

// stoppedControllerDir is a data directory whose controller enrolled a
// node and stopped.
func stoppedControllerDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	tc := startController(t, dir)
	tc.enrolledNode("w1")
	tc.shutdown()
	return dir
}

func newFails(t *testing.T, dir string, want ...string) {
	t.Helper()
	c, err := New(Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: quiet()})
	if err == nil {
		c.Close()
		t.Fatal("the controller started")
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("error %q does not say %q", err, w)
		}
	}
}

// The worst finding of the review: a store emptied by an operator's slip
// made the controller start as a fresh install, and every agent was told
// its node was gone. Each damage is refused, the file named, nothing
// written, and the good file brings everything back.
func TestControllerRefusesDamagedOrLostState(t *testing.T) {
	dir := stoppedControllerDir(t)
	storePath := filepath.Join(dir, store.FileName)
	good, err := os.ReadFile(storePath)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := os.ReadFile(filepath.Join(dir, ca.CertFile))
	caKey, _ := os.ReadFile(filepath.Join(dir, ca.KeyFile))
	restore := func() {
		t.Helper()
		for name, data := range map[string][]byte{store.FileName: good, ca.CertFile: caCert, ca.KeyFile: caKey} {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	unchanged := func(name string, want []byte) {
		t.Helper()
		got, err := os.ReadFile(filepath.Join(dir, name))
		if want == nil {
			if !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s was created", name)
			}
			return
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("the refused start changed %s", name)
		}
	}

	for _, size := range []int{0, 12000, 20000} {
		if err := os.WriteFile(storePath, good[:size], 0o600); err != nil {
			t.Fatal(err)
		}
		newFails(t, dir, storePath, "damaged", "harmony-controller restore")
		unchanged(store.FileName, good[:size])
		unchanged(ca.CertFile, caCert)
	}

	restore()
	os.Remove(storePath)
	newFails(t, dir, storePath, "missing", "will not start an empty store")
	unchanged(store.FileName, nil)

	restore()
	os.Remove(filepath.Join(dir, ca.CertFile))
	os.Remove(filepath.Join(dir, ca.KeyFile))
	newFails(t, dir, "CA", "missing", "will not make a new CA")
	unchanged(ca.CertFile, nil)
	unchanged(store.FileName, good)

	// Another controller's store beside this CA.
	other := stoppedControllerDir(t)
	otherStore, _ := os.ReadFile(filepath.Join(other, store.FileName))
	restore()
	if err := os.WriteFile(storePath, otherStore, 0o600); err != nil {
		t.Fatal(err)
	}
	newFails(t, dir, "belongs to the CA", "different controllers")

	restore()
	tc := startController(t, dir)
	r := doJSON(t, tc.admin, "GET", tc.url+v1.PathNodes+"/w1", nil)
	if r.status != http.StatusOK {
		t.Fatalf("w1 after the good store came back: %d %s", r.status, r.body)
	}
}

// backupOf takes a backup of a running controller over its local socket,
// as harmony-controller backup does, with its default etcd snapshot
// copies.
func backupOf(t *testing.T, tc *testController) []byte {
	t.Helper()
	return backupWith(t, tc, "")
}

// backupWith takes a backup holding the copies chosen ("" for the
// default).
func backupWith(t *testing.T, tc *testController, copies backup.Copies) []byte {
	t.Helper()
	path := LocalPathBackup
	if copies != "" {
		path += "?" + LocalBackupCopies + "=" + string(copies)
	}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://local"+path, nil)
	resp, err := LocalClient(tc.dir).Do(req)
	if err != nil {
		t.Fatalf("backup over the local socket: %v", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("backup: %d %v", resp.StatusCode, err)
	}
	if _, err := backup.Verify(bytes.NewReader(data)); err != nil {
		t.Fatalf("the backup does not read back: %v", err)
	}
	return data
}

// A backup taken while the controller runs, restored into an empty data
// directory on another "machine", brings back every node (with its UID
// and certificate), every cluster and the CA: a node certificate issued
// before the backup works against the restored controller.
func TestBackupRestoresNodesClustersAndCA(t *testing.T) {
	e := newClusterEnv(t)
	e.do("POST", v1.PathClusters, e.spec("demo", 3, 2))
	tc := e.tc
	nodeCert := tc.enrolledNode("loose")
	var nodesBefore v1.NodeList
	doJSON(t, tc.admin, "GET", tc.url+v1.PathNodes, nil).decode(t, &nodesBefore)
	var clustersBefore v1.ClusterList
	doJSON(t, tc.admin, "GET", tc.url+v1.PathClusters, nil).decode(t, &clustersBefore)
	pin := tc.c.CA().Pin()

	data := backupOf(t, tc)
	// The socket is the controller's own: only root and its user, mode 0600.
	info, err := os.Stat(filepath.Join(tc.dir, LocalSocketFile))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("local socket: %v %v", info, err)
	}
	tc.shutdown()

	fresh := t.TempDir()
	m, err := backup.Restore(bytes.NewReader(data), fresh, backup.RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m.Store.Nodes != len(nodesBefore.Items) || m.Store.Clusters != 1 || m.Store.CAPin != pin {
		t.Fatalf("manifest %+v, want %d nodes, 1 cluster, CA %s", m.Store, len(nodesBefore.Items), pin)
	}
	for _, name := range []string{store.FileName, ca.KeyFile} {
		if info, err := os.Stat(filepath.Join(fresh, name)); err != nil || info.Mode().Perm() != 0o600 {
			t.Fatalf("restored %s: %v %v", name, info, err)
		}
	}
	// A second restore over the healthy store is refused without --force.
	if _, err := backup.Restore(bytes.NewReader(data), fresh, backup.RestoreOptions{}); err == nil || !strings.Contains(err.Error(), "healthy store") {
		t.Fatalf("restore over a healthy store: %v", err)
	}

	tc2 := startController(t, fresh, func(c *Config) { c.RetryBase = e.tc.c.cfg.RetryBase; c.CloneParallelism = 1 })
	if got := tc2.c.CA().Pin(); got != pin {
		t.Fatalf("restored CA %s, want %s", got, pin)
	}
	var nodesAfter v1.NodeList
	doJSON(t, tc2.admin, "GET", tc2.url+v1.PathNodes, nil).decode(t, &nodesAfter)
	if len(nodesAfter.Items) != len(nodesBefore.Items) {
		t.Fatalf("%d nodes after the restore, %d before", len(nodesAfter.Items), len(nodesBefore.Items))
	}
	for i, n := range nodesAfter.Items {
		b := nodesBefore.Items[i]
		if n.Name != b.Name || n.UID != b.UID || n.CertificateSerial != b.CertificateSerial || n.RoleRevision != b.RoleRevision {
			t.Fatalf("node %d after the restore %+v, before %+v", i, n, b)
		}
	}
	var clustersAfter v1.ClusterList
	doJSON(t, tc2.admin, "GET", tc2.url+v1.PathClusters, nil).decode(t, &clustersAfter)
	if len(clustersAfter.Items) != 1 || len(clustersAfter.Items[0].Status.Nodes) != 5 ||
		clustersAfter.Items[0].Spec.Name != clustersBefore.Items[0].Spec.Name {
		t.Fatalf("clusters after the restore: %+v", clustersAfter.Items)
	}
	r := doJSON(t, tc2.certClient(nodeCert), "GET", tc2.url+v1.PathNodeRole, nil)
	if r.status != http.StatusOK {
		t.Fatalf("a node certificate from before the backup: %d %s", r.status, r.body)
	}
	// The cluster's secrets came back too: a master's role still carries
	// its cluster CA.
	var role v1.Role
	doJSON(t, tc2.admin, "GET", tc2.url+v1.PathNodes+"/demo-m1/role", nil).decode(t, &role)
	if role.PKI == nil || role.PKI.ClusterCA == nil || role.PKI.ClusterCA.Key == "" {
		t.Fatal("the restored master role has no cluster CA")
	}
}

// putCopies stores etcd snapshot copies under dir as agents' uploads
// would, one per hour from t0, and returns their contents.
func putCopies(t *testing.T, dir string, c etcdcopies.Cluster, t0 time.Time, n int) [][]byte {
	t.Helper()
	copies, err := etcdcopies.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	var bodies [][]byte
	for i := range n {
		body := testutil.EtcdSnapshot(t, 1+i)
		if _, err := copies.Put(c, t0.Add(time.Duration(i)*time.Hour), bytes.NewReader(body), int64(len(body)), etcdcopies.Rule{Keep: 10, Gap: time.Minute}, nil); err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, body)
	}
	return bodies
}

// copiesIn reads every etcd snapshot copy under a data directory, by its
// path below etcd-snapshots, and checks each is 0600.
func copiesIn(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	got := map[string][]byte{}
	root := filepath.Join(dir, etcdcopies.Dir)
	filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if info, _ := d.Info(); info.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", path, info.Mode().Perm())
		}
		rel, _ := filepath.Rel(root, path)
		got[rel], _ = os.ReadFile(path)
		return nil
	})
	return got
}

// The controller's copies of its clusters' etcd snapshots go into its
// backup (by default each cluster's newest, on request all or none), and
// come back with the restore; a copy already there, or newer than the
// backup, stays.
func TestBackupCarriesTheEtcdSnapshotCopies(t *testing.T) {
	dir := t.TempDir()
	tc := startController(t, dir)
	t0 := time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC)
	demo := etcdcopies.Cluster{Name: "demo", UID: "0123456789abcdef"}
	gone := etcdcopies.Cluster{Name: "gone", UID: "fedcba9876543210"} // a deleted cluster's leftover
	demoCopies := putCopies(t, dir, demo, t0, 3)
	goneCopies := putCopies(t, dir, gone, t0, 1)
	name := func(c etcdcopies.Cluster, hour int) string {
		return filepath.Join(v1.ClusterInstance(c.Name, c.UID), etcdsnapshot.Name(t0.Add(time.Duration(hour)*time.Hour)))
	}
	all := map[string][]byte{
		name(demo, 0): demoCopies[0], name(demo, 1): demoCopies[1], name(demo, 2): demoCopies[2],
		name(gone, 0): goneCopies[0],
	}
	newest := map[string][]byte{name(demo, 2): demoCopies[2], name(gone, 0): goneCopies[0]}
	backups := map[backup.Copies][]byte{}
	for _, c := range []backup.Copies{"", backup.AllCopies, backup.NoCopies} {
		backups[c] = backupWith(t, tc, c)
	}
	tc.shutdown()

	for c, want := range map[backup.Copies]map[string][]byte{"": newest, backup.AllCopies: all, backup.NoCopies: {}} {
		fresh := t.TempDir()
		m, err := backup.Restore(bytes.NewReader(backups[c]), fresh, backup.RestoreOptions{})
		if err != nil {
			t.Fatalf("restore the backup with %q copies: %v", c, err)
		}
		got := copiesIn(t, fresh)
		if len(got) != len(want) || len(m.EtcdSnapshotCopies) != len(want) {
			t.Fatalf("backup with %q copies: restored %d copies, manifest %d, want %d", c, len(got), len(m.EtcdSnapshotCopies), len(want))
		}
		for path, body := range want {
			if !bytes.Equal(got[path], body) {
				t.Fatalf("backup with %q copies: %s restored as %d bytes, want the %d of the copy", c, path, len(got[path]), len(body))
			}
		}
		if info, err := os.Stat(filepath.Join(fresh, etcdcopies.Dir, v1.ClusterInstance(demo.Name, demo.UID))); c != backup.NoCopies && (err != nil || info.Mode().Perm() != 0o700) {
			t.Fatalf("restored copies' directory: %v %v", info, err)
		}
		if leftover, err := filepath.Glob(filepath.Join(fresh, ".restore-*")); err != nil || len(leftover) != 0 {
			t.Fatalf("the restore left %v", leftover)
		}
	}

	// Over a data directory that has a newer copy, and another body under
	// a name the backup has: both stay as they are.
	target := t.TempDir()
	newer := putCopies(t, target, demo, t0.Add(3*time.Hour), 1)[0]
	mine := testutil.EtcdSnapshot(t, 7)
	if err := os.WriteFile(filepath.Join(target, etcdcopies.Dir, name(demo, 0)), mine, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := backup.Restore(bytes.NewReader(backups[backup.AllCopies]), target, backup.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	got := copiesIn(t, target)
	if len(got) != 5 || !bytes.Equal(got[name(demo, 3)], newer) || !bytes.Equal(got[name(demo, 0)], mine) || !bytes.Equal(got[name(demo, 1)], demoCopies[1]) {
		t.Fatalf("restored over existing copies: %d copies; the newer one kept: %v; the one there kept: %v",
			len(got), bytes.Equal(got[name(demo, 3)], newer), bytes.Equal(got[name(demo, 0)], mine))
	}

	// A choice that is none of the three is refused, naming the field.
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://local"+LocalPathBackup+"?"+LocalBackupCopies+"=some", nil)
	tc2 := startController(t, dir)
	resp, err := LocalClient(tc2.dir).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(msg), LocalBackupCopies) {
		t.Fatalf("backup with etcd-snapshots=some: %d %s", resp.StatusCode, msg)
	}
}

// rewriteBackup rebuilds a backup entry by entry through edit, which
// returns the entry's new name and body (an empty name drops it); extra
// entries follow.
func rewriteBackup(t *testing.T, data []byte, edit func(name string, body []byte) (string, []byte), extra ...[2]string) []byte {
	t.Helper()
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	write := func(name string, body []byte) {
		hdr := &tar.Header{Name: name, Mode: 0o600, Size: int64(len(body)), Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(body); err != nil {
			t.Fatal(err)
		}
	}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if name, body := edit(hdr.Name, body); name != "" {
			write(name, body)
		}
	}
	for _, e := range extra {
		write(e[0], []byte(e[1]))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// withFormat is a backup whose manifest says format.
func withFormat(t *testing.T, data []byte, format int) []byte {
	t.Helper()
	return rewriteBackup(t, data, func(name string, body []byte) (string, []byte) {
		if name != backup.ManifestFile {
			return name, body
		}
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatal(err)
		}
		m["format"] = format
		body, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return name, body
	})
}

// A backup written before the copies were (format 1) restores as it did.
func TestAFormatOneBackupRestores(t *testing.T) {
	dir := t.TempDir()
	tc := startController(t, dir)
	tc.enrolledNode("w1")
	data := withFormat(t, backupWith(t, tc, backup.NoCopies), 1)
	tc.shutdown()
	m, err := backup.Restore(bytes.NewReader(data), t.TempDir(), backup.RestoreOptions{})
	if err != nil || m.Format != 1 || m.Store.Nodes != 1 {
		t.Fatalf("restore a format 1 backup: %+v %v", m, err)
	}
}

// A backup with a byte changed, cut short, or with an entry added is
// refused, and the data directory is left as it was.
func TestRestoreRefusesBadBackups(t *testing.T) {
	dir := t.TempDir()
	tc := startController(t, dir)
	tc.enrolledNode("w1")
	demo := etcdcopies.Cluster{Name: "demo", UID: "0123456789abcdef"}
	putCopies(t, dir, demo, time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC), 2)
	data := backupWith(t, tc, backup.AllCopies)
	tc.shutdown()
	copyPrefix := etcdcopies.Dir + "/" + v1.ClusterInstance(demo.Name, demo.UID) + "/"
	isCopy := func(name string) bool { return strings.HasPrefix(name, copyPrefix) }
	firstCopy := func(edit func(name string, body []byte) (string, []byte)) []byte {
		done := false
		return rewriteBackup(t, data, func(name string, body []byte) (string, []byte) {
			if !isCopy(name) || done {
				return name, body
			}
			done = true
			return edit(name, body)
		})
	}
	snapshot := string(testutil.EtcdSnapshot(t, 1))
	keep := func(name string, body []byte) (string, []byte) { return name, body }

	cases := map[string][]byte{
		"cut short": data[:len(data)/2],
		"not a tar": []byte(strings.Repeat("x", 2048)),
		"store damaged": func() []byte {
			// Zero the store's meta pages, which follow its header.
			b := bytes.Clone(data)
			i := bytes.LastIndex(b, []byte(store.FileName))
			clear(b[i+512 : i+512+8192])
			return b
		}(),
		"a copy changed": firstCopy(func(name string, body []byte) (string, []byte) {
			body[100] ^= 1
			return name, body
		}),
		"a copy missing": firstCopy(func(string, []byte) (string, []byte) { return "", nil }),
		"a copy its manifest does not name": rewriteBackup(t, data, keep,
			[2]string{copyPrefix + etcdsnapshot.Name(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)), snapshot}),
		"a copy out of its directory": firstCopy(func(name string, body []byte) (string, []byte) {
			return etcdcopies.Dir + "/../../escaped", body
		}),
		"a copy's cluster out of its directory": rewriteBackup(t, data, keep,
			[2]string{etcdcopies.Dir + "/../" + etcdsnapshot.Name(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)), snapshot}),
		"a copy with no snapshot's name": rewriteBackup(t, data, keep, [2]string{copyPrefix + "passwd", snapshot}),
		"a newer format":                 withFormat(t, data, 3),
	}
	// What the error says of each backup with an etcd snapshot copy wrong.
	says := map[string]string{
		"a copy changed":                        "not a whole etcd snapshot",
		"a copy missing":                        "is missing",
		"a copy its manifest does not name":     "not in the backup's manifest",
		"a copy out of its directory":           "cannot name a cluster's copies",
		"a copy's cluster out of its directory": "cannot name a cluster's copies",
		"a copy with no snapshot's name":        "not an etcd snapshot's name",
		"a newer format":                        "format 3, this controller reads 1 to 2",
	}
	for name, bad := range cases {
		t.Run(name, func(t *testing.T) {
			target := t.TempDir()
			_, err := backup.Restore(bytes.NewReader(bad), target, backup.RestoreOptions{})
			if err == nil {
				t.Fatal("a bad backup was restored")
			}
			if !strings.Contains(err.Error(), says[name]) {
				t.Fatalf("the refusal says %q, want %q", err, says[name])
			}
			entries, _ := os.ReadDir(target)
			if len(entries) != 0 {
				t.Fatalf("a refused restore left %v", entries)
			}
			if _, err := os.Lstat(filepath.Join(target, "..", "escaped")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a copy's entry escaped the data directory: %v", err)
			}
		})
	}
}
