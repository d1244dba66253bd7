package controller

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/backup"
	"github.com/harmonykaas/harmony/controller/ca"
	"github.com/harmonykaas/harmony/controller/store"
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
// as harmony-controller backup does.
func backupOf(t *testing.T, tc *testController) []byte {
	t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://local"+LocalPathBackup, nil)
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

// A backup with a byte changed, cut short, or with an entry added is
// refused, and the data directory is left as it was.
func TestRestoreRefusesBadBackups(t *testing.T) {
	dir := t.TempDir()
	tc := startController(t, dir)
	tc.enrolledNode("w1")
	data := backupOf(t, tc)
	tc.shutdown()

	cases := map[string][]byte{
		"cut short": data[:len(data)/2],
		"not a tar": []byte(strings.Repeat("x", 2048)),
		"store damaged": func() []byte {
			// The store is the last entry; zero its meta pages.
			b := bytes.Clone(data)
			i := bytes.LastIndex(b, []byte(store.FileName))
			clear(b[i+512 : i+512+8192])
			return b
		}(),
	}
	for name, bad := range cases {
		t.Run(name, func(t *testing.T) {
			target := t.TempDir()
			if _, err := backup.Restore(bytes.NewReader(bad), target, backup.RestoreOptions{}); err == nil {
				t.Fatal("a bad backup was restored")
			}
			entries, _ := os.ReadDir(target)
			if len(entries) != 0 {
				t.Fatalf("a refused restore left %v", entries)
			}
		})
	}
}
