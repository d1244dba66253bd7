package controller

import (
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/etcdcopies"
	htest "github.com/harmonykaas/harmony/internal/testutil"
	"github.com/harmonykaas/harmony/internal/vcsim"
)

// A cluster deleted without purge leaves its data disks (its etcd data)
// and the controller's copies of its snapshots. They are listed by the
// cluster's name and UID, and an admin purges them later; a cluster
// deleted with purge leaves nothing to list. Purging needs the
// cluster's provider: without it, the answer says what to remove by
// hand, and nothing is forgotten.
func TestLeftoversOfADeletedClusterAreListedAndPurged(t *testing.T) {
	e := newClusterEnv(t)
	list := func() []v1.ClusterLeftovers {
		t.Helper()
		var l v1.ClusterLeftoversList
		r := doJSON(t, e.tc.admin, "GET", e.tc.url+v1.PathLeftovers, nil)
		if r.status != http.StatusOK {
			t.Fatalf("list leftovers: %d %s", r.status, r.body)
		}
		r.decode(t, &l)
		return l.Items
	}

	e.do("POST", v1.PathClusters, e.spec("lo", 1, 0))
	disk := e.cluster("lo").Status.Nodes[0].DataDisk
	uid := clusterUID(t, e.tc, "lo")
	master := e.enrollClusterNode("lo", "lo-m1")
	taken := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	doJSON(t, master, "PUT", e.tc.url+v1.EtcdSnapshotCopyPath(taken), htest.EtcdSnapshot(t, 2)).wantStatus(t, http.StatusCreated, "")
	copies := filepath.Join(e.tc.dir, etcdcopies.Dir, v1.ClusterInstance("lo", uid))

	purged := e.spec("gone", 1, 0)
	purged.VIP = "198.18.10.78"
	e.do("POST", v1.PathClusters, purged)
	e.do("DELETE", v1.PathClusters+"/gone?purge=true", nil)
	if got := list(); len(got) != 0 {
		t.Fatalf("a cluster deleted with purge left %+v", got)
	}

	e.do("DELETE", v1.PathClusters+"/lo", nil)
	got := list()
	id := v1.ClusterInstance("lo", uid)
	folder := path.Dir(disk)
	if len(got) != 1 || got[0].ID != id || got[0].Cluster != "lo" || got[0].UID != uid || got[0].Provider != "lab" ||
		!slices.Contains(got[0].DataDiskFolders, folder) || got[0].EtcdSnapshotCopies != 1 || got[0].DeletedAt.IsZero() {
		t.Fatalf("leftovers %+v; want %s with the folder %s and one copy", got, id, folder)
	}
	if !e.dataDiskExists(disk) {
		t.Fatalf("the data disk %s went with the cluster", disk)
	}

	// An id that is no deleted cluster's: named as the field.
	for _, bad := range []string{"lo", "lo-" + strings.Repeat("0", 16), "..%2F..%2Fetc"} {
		r := doJSON(t, e.tc.admin, "DELETE", e.tc.url+v1.PathLeftovers+"/"+bad, nil)
		r.wantStatus(t, http.StatusNotFound, v1.CodeNotFound)
		if r.err.Field != "id" {
			t.Errorf("purge %s: field %q, want id", bad, r.err.Field)
		}
	}

	// Without its provider, nothing is removed and nothing forgotten.
	doJSON(t, e.tc.admin, "DELETE", e.tc.url+v1.PathProviders+"/lab", nil).wantStatus(t, http.StatusNoContent, "")
	r := doJSON(t, e.tc.admin, "DELETE", e.tc.url+v1.PathLeftovers+"/"+id, nil)
	r.wantStatus(t, http.StatusConflict, v1.CodeConflict)
	if r.err.Field != "provider" || !strings.Contains(r.err.Message, folder) {
		t.Errorf("purge without the provider: field %q, %q; want provider, naming %s", r.err.Field, r.err.Message, folder)
	}
	if len(list()) != 1 || !e.dataDiskExists(disk) {
		t.Fatal("a purge refused for want of the provider lost track of the leftovers or removed the disk")
	}
	r = doJSON(t, e.tc.admin, "PUT", e.tc.url+v1.PathProviders+"/lab", e.sim.Provider("lab", testPool()))
	if r.status != http.StatusCreated {
		t.Fatalf("apply the provider again: %d %s", r.status, r.body)
	}

	var gone v1.ClusterLeftovers
	doJSON(t, e.tc.admin, "DELETE", e.tc.url+v1.PathLeftovers+"/"+id, nil).decode(t, &gone)
	if gone.ID != id || gone.EtcdSnapshotCopies != 1 {
		t.Errorf("purge answered %+v", gone)
	}
	if e.dataDiskExists(disk) {
		t.Errorf("the data disk %s survived the purge", disk)
	}
	if _, err := os.Stat(copies); !os.IsNotExist(err) {
		t.Errorf("the snapshot copies survived the purge: %v", err)
	}
	if got := list(); len(got) != 0 {
		t.Errorf("leftovers after the purge: %+v", got)
	}
	doJSON(t, e.tc.admin, "DELETE", e.tc.url+v1.PathLeftovers+"/"+id, nil).wantStatus(t, http.StatusNotFound, v1.CodeNotFound)
}

// A purge with the cluster removes its data disks where they are, also
// on a datastore the provider no longer lists for data disks; a delete
// without purge records that datastore among its leftovers.
func TestPurgeFindsTheDisksOnADatastoreTheProviderDropped(t *testing.T) {
	e := newClusterEnvOn(t, vcsim.Options{Datastores: 2})
	for _, name := range []string{"kept", "purged"} {
		spec := e.spec(name, 1, 0)
		if name == "purged" {
			spec.VIP = "198.18.10.78"
		}
		e.do("POST", v1.PathClusters, spec)
	}
	kept := e.cluster("kept").Status.Nodes[0].DataDisk
	purged := e.cluster("purged").Status.Nodes[0].DataDisk
	if !strings.HasPrefix(kept, "[LocalDS_0] ") || !strings.HasPrefix(purged, "[LocalDS_0] ") {
		t.Fatalf("data disks %s and %s; want them on LocalDS_0, the provider's only datastore", kept, purged)
	}

	moved := e.sim.Provider("lab", testPool())
	moved.Datastores.Data = []string{"LocalDS_1"}
	r := doJSON(t, e.tc.admin, "PUT", e.tc.url+v1.PathProviders+"/lab", moved)
	if r.status != http.StatusOK && r.status != http.StatusCreated {
		t.Fatalf("move the provider's data disks to LocalDS_1: %d %s", r.status, r.body)
	}

	e.do("DELETE", v1.PathClusters+"/purged?purge=true", nil)
	if e.dataDiskExists(purged) || e.dataDiskExists(path.Dir(purged)) {
		t.Errorf("the purge left %s or its folder, on the datastore the provider dropped", purged)
	}
	e.do("DELETE", v1.PathClusters+"/kept", nil)
	var l v1.ClusterLeftoversList
	doJSON(t, e.tc.admin, "GET", e.tc.url+v1.PathLeftovers, nil).decode(t, &l)
	folder := path.Dir(kept)
	if len(l.Items) != 1 || l.Items[0].Cluster != "kept" || !slices.Contains(l.Items[0].DataDiskFolders, folder) {
		t.Fatalf("leftovers %+v; want kept's, with %s", l.Items, folder)
	}
	if !e.dataDiskExists(kept) {
		t.Fatalf("the delete without purge removed %s", kept)
	}
	doJSON(t, e.tc.admin, "DELETE", e.tc.url+v1.PathLeftovers+"/"+l.Items[0].ID, nil).wantStatus(t, http.StatusOK, "")
	if e.dataDiskExists(kept) || e.dataDiskExists(folder) {
		t.Errorf("the leftovers' purge left %s or its folder", kept)
	}
}
