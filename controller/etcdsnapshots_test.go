package controller

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/etcdcopies"
	"github.com/harmonykaas/harmony/controller/store"
	"github.com/harmonykaas/harmony/internal/etcdsnapshot"
	htest "github.com/harmonykaas/harmony/internal/testutil"
)

// A cluster spec's etcd snapshot settings reach a master's role only once
// its agent reports it takes them: an older agent decodes roles strictly
// and would refuse a role with etcd.snapshots. They go again when a VM of
// an older image reports under the same name, and never reach a worker.
func TestEtcdSnapshotSettingsReachOnlyAgentsThatTakeThem(t *testing.T) {
	e := newClusterEnv(t)
	spec := e.spec("sn", 3, 1)
	spec.EtcdSnapshots = &v1.EtcdSnapshots{Interval: "1h", Keep: 24}
	e.do("POST", v1.PathClusters, spec)
	nodes, report := e.reportingNodes("sn", "sn-m1", "sn-m2", "sn-m3", "sn-w1")
	check := func(when string, want map[string]bool) {
		t.Helper()
		for name, c := range nodes {
			r := e.ownRole(c)
			got := r.Etcd != nil && r.Etcd.Snapshots != nil
			if got != want[name] || got && *r.Etcd.Snapshots != *spec.EtcdSnapshots {
				t.Errorf("%s, %s: etcd settings %+v, want the spec's snapshots: %v", when, name, r.Etcd, want[name])
			}
		}
	}
	check("before any report", nil)

	report("sn-m1", v1.CapabilityEtcdSnapshots)
	report("sn-m2", v1.CapabilityHandOver)
	report("sn-w1", v1.CapabilityEtcdSnapshots)
	check("m1 takes them, m2 does not", map[string]bool{"sn-m1": true})

	report("sn-m2", v1.CapabilityEtcdSnapshots)
	report("sn-m3", v1.CapabilityEtcdSnapshots)
	check("every master takes them", map[string]bool{"sn-m1": true, "sn-m2": true, "sn-m3": true})

	// A replacement VM of an older image reports under the same name.
	report("sn-m2", v1.CapabilityHandOver)
	check("m2 of an older image", map[string]bool{"sn-m1": true, "sn-m3": true})
}

// Masters send copies of their etcd snapshots to the controller, which
// keeps one of each half interval, the newest spec.keep, 0600 under its
// data directory, named as the agent names them; the cluster is the
// node's, from its certificate, and a master fetches its own cluster's
// copies, no other's. Every other caller, and every snapshot that is not
// whole, is refused, and leaves nothing. Deleting the
// cluster with --purge removes them; without, they stay.
func TestMastersCopyEtcdSnapshotsToTheController(t *testing.T) {
	e := newClusterEnv(t)
	spec := e.spec("cp", 3, 1)
	spec.EtcdSnapshots = &v1.EtcdSnapshots{Interval: "1h", Keep: 2}
	e.do("POST", v1.PathClusters, spec)
	other := e.spec("cq", 1, 0)
	other.VIP = "198.18.10.78"
	e.do("POST", v1.PathClusters, other)
	nodes, _ := e.reportingNodes("cp", "cp-m1", "cp-m2", "cp-w1")
	otherMaster := e.enrollClusterNode("cq", "cq-m1")

	base := e.tc.url + v1.PathNodeEtcdSnapshots
	at := func(t time.Time) string { return e.tc.url + v1.EtcdSnapshotCopyPath(t) }
	list := func(c *http.Client) v1.EtcdSnapshotCopyList {
		t.Helper()
		var l v1.EtcdSnapshotCopyList
		r := doJSON(t, c, "GET", base, nil)
		if r.status != http.StatusOK {
			t.Fatalf("list copies: %d %s", r.status, r.body)
		}
		r.decode(t, &l)
		return l
	}
	t0 := time.Now().UTC().Add(-3 * time.Hour).Truncate(time.Second)
	good := htest.EtcdSnapshot(t, 3)

	// Refused, whoever is not a master of a cluster.
	doJSON(t, e.tc.anonClient(), "PUT", at(t0), good).wantStatus(t, http.StatusUnauthorized, v1.CodeNoClientCert)
	doJSON(t, e.tc.admin, "PUT", at(t0), good).wantStatus(t, http.StatusForbidden, v1.CodeForbidden)
	// A worker's certificate passes the route's check, but a worker has
	// no snapshots of its own.
	doJSON(t, nodes["cp-w1"], "PUT", at(t0), good).wantStatus(t, http.StatusNotFound, v1.CodeNotFound)
	doJSON(t, nodes["cp-w1"], "GET", base, nil).wantStatus(t, http.StatusNotFound, v1.CodeNotFound)
	// Refused, what is not a whole snapshot of a time to the second.
	for _, path := range []string{base + "/yesterday", base + "/2026-11-29T03:00:00.5Z", at(time.Now().Add(time.Hour))} {
		r := doJSON(t, nodes["cp-m1"], "PUT", path, good)
		r.wantStatus(t, http.StatusBadRequest, v1.CodeBadRequest)
		if r.err.Field != "takenAt" {
			t.Errorf("PUT %s: field %q, want takenAt", path, r.err.Field)
		}
	}
	damaged := slices.Clone(good)
	damaged[100] ^= 1
	for name, body := range map[string][]byte{"damaged": damaged, "cut short": good[:len(good)-1], "not a snapshot": []byte("hello")} {
		r := doJSON(t, nodes["cp-m1"], "PUT", at(t0), body)
		r.wantStatus(t, http.StatusBadRequest, v1.CodeBadRequest)
		if r.err.Field != "body" {
			t.Errorf("%s: field %q, want body (%s)", name, r.err.Field, r.err.Message)
		}
	}
	// A master that goes away mid-way: its doing, not the controller's
	// failure, and nothing is kept.
	pr, pw := io.Pipe()
	go func() {
		_, _ = pw.Write(good[:4096])
		pw.CloseWithError(errors.New("the master went away"))
	}()
	req, err := http.NewRequest("PUT", at(t0), pr)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := nodes["cp-m1"].Do(req); err == nil {
		resp.Body.Close()
	}
	waitFor(t, "the controller noting the copy that broke off", func() bool {
		return strings.Contains(e.tc.logs.String(), "etcd snapshot copy broke off")
	})
	for _, line := range strings.Split(e.tc.logs.String(), "\n") {
		if strings.Contains(line, "request failed") && strings.Contains(line, v1.PathNodeEtcdSnapshots) {
			t.Errorf("a copy that broke off, logged as the controller's failure: %s", line)
		}
	}
	if l := list(nodes["cp-m1"]); len(l.Items) != 0 || !l.NextAfter.IsZero() {
		t.Fatalf("copies after refusals only: %+v", l)
	}

	doJSON(t, nodes["cp-m1"], "PUT", at(t0), good).wantStatus(t, http.StatusCreated, "")
	l := list(nodes["cp-m2"])
	if len(l.Items) != 1 || !l.Items[0].TakenAt.Equal(t0) || l.Items[0].Bytes != int64(len(good)) || !l.NextAfter.Equal(t0.Add(30*time.Minute)) {
		t.Fatalf("copies after one: %+v; want %s of %d bytes, the next after 30m", l, t0, len(good))
	}
	dir := filepath.Join(e.tc.dir, etcdcopies.Dir, "cp-"+clusterUID(t, e.tc, "cp"))
	file := filepath.Join(dir, etcdsnapshot.Name(t0))
	if got, err := os.ReadFile(file); err != nil || !bytes.Equal(got, good) {
		t.Fatalf("the copy on disk: %v (equal: %v)", err, bytes.Equal(got, good))
	}
	for path, want := range map[string]os.FileMode{file: 0o600, dir: 0o700, filepath.Dir(dir): 0o700} {
		if info, err := os.Stat(path); err != nil || info.Mode().Perm() != want {
			t.Errorf("%s: %v, %v; want mode %o", path, info.Mode(), err, want)
		}
	}
	if l := list(otherMaster); len(l.Items) != 0 {
		t.Errorf("a master of another cluster sees copies: %+v", l)
	}

	// Another master's snapshot of the same half hour is not wanted.
	doJSON(t, nodes["cp-m2"], "PUT", at(t0.Add(10*time.Minute)), htest.EtcdSnapshot(t, 1)).wantStatus(t, http.StatusConflict, v1.CodeConflict)
	second, third := t0.Add(31*time.Minute), t0.Add(62*time.Minute)
	doJSON(t, nodes["cp-m2"], "PUT", at(second), htest.EtcdSnapshot(t, 2)).wantStatus(t, http.StatusCreated, "")
	thirdData := htest.EtcdSnapshot(t, 1)
	doJSON(t, nodes["cp-m1"], "PUT", at(third), thirdData).wantStatus(t, http.StatusCreated, "")
	var taken []time.Time
	for _, c := range e.cluster("cp").Status.EtcdSnapshotCopies {
		taken = append(taken, c.TakenAt)
	}
	if !slices.EqualFunc(taken, []time.Time{second, third}, time.Time.Equal) {
		t.Errorf("the cluster's view shows copies taken at %v, want the newest two, %v and %v", taken, second, third)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("the oldest copy beyond keep: %v, want it gone", err)
	}
	// A master fetches its own cluster's copies, and no other's.
	if got := doJSON(t, nodes["cp-m2"], "GET", at(third), nil); got.status != http.StatusOK || !bytes.Equal(got.body, thirdData) {
		t.Errorf("cp-m2 fetching its cluster's copy: %d, %d bytes, want the %d sent", got.status, len(got.body), len(thirdData))
	}
	doJSON(t, otherMaster, "GET", at(third), nil).wantStatus(t, http.StatusNotFound, v1.CodeNotFound)

	doJSON(t, otherMaster, "PUT", at(t0), good).wantStatus(t, http.StatusCreated, "")
	otherDir := filepath.Join(e.tc.dir, etcdcopies.Dir, "cq-"+clusterUID(t, e.tc, "cq"))
	e.do("DELETE", v1.PathClusters+"/cq", nil)
	if _, err := os.Stat(filepath.Join(otherDir, etcdsnapshot.Name(t0))); err != nil {
		t.Errorf("a cluster deleted without --purge lost its copies: %v", err)
	}
	e.do("DELETE", v1.PathClusters+"/cp?purge=true", nil)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("a cluster deleted with --purge kept its copies: %v", err)
	}
}

// clusterUID reads a cluster's UID from the controller's store.
func clusterUID(t *testing.T, tc *testController, name string) string {
	t.Helper()
	var rec struct {
		UID string `json:"uid"`
	}
	if err := tc.c.store.View(func(tx *store.Tx) error { return tx.Get(store.Clusters, name, &rec) }); err != nil || rec.UID == "" {
		t.Fatalf("cluster %s's UID: %q, %v", name, rec.UID, err)
	}
	return rec.UID
}
