package controller

import (
	"bytes"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	htest "github.com/harmonykaas/harmony/internal/testutil"
)

// restoreIn is the etcd restore a node's role asks for, nil when none.
func (e *clusterEnv) restoreIn(node string) *v1.EtcdRestore {
	e.t.Helper()
	var r v1.Role
	doJSON(e.t, e.tc.admin, "GET", e.tc.url+v1.PathNodes+"/"+node+"/role", nil).decode(e.t, &r)
	if r.Etcd == nil {
		return nil
	}
	return r.Etcd.Restore
}

// restoring is the cluster's Restoring condition; Type is empty when it
// has none.
func (e *clusterEnv) restoring(name string) v1.Condition {
	for _, c := range e.cluster(name).Status.Conditions {
		if c.Type == v1.ConditionRestoring {
			return c
		}
	}
	return v1.Condition{}
}

// An etcd restore is refused where it cannot run: a master whose agent
// does not restore, a source that is not a master, an upgrade. It asks
// every master at once (each stops its member and control plane), never
// a worker, and tells the others the source restored only once the
// source reports its part done; it waits on a source that cannot
// restore, saying why, and a new restore replaces it; it ends once every
// master reports it, and then no role asks for it.
func TestRestoreTellsTheOthersOnceTheSourceIsDone(t *testing.T) {
	e := newClusterEnv(t)
	newImage := e.importImage(nodeOVA(t, "1.1.0"))
	e.do("POST", v1.PathClusters, e.spec("rs", 3, 1))
	fl := e.startFleet("rs", "")
	fl.oldAgent("rs-m2", true)
	e.waitAllReady("rs")
	restore := func(req v1.RestoreRequest) response {
		return doJSON(t, e.tc.admin, "POST", e.tc.url+v1.PathClusters+"/rs/restore", req)
	}

	r := restore(v1.RestoreRequest{})
	r.wantStatus(t, http.StatusConflict, v1.CodeConflict)
	if !strings.Contains(string(r.body), `master rs-m2's agent does not report \"etcd.restore\"`) {
		t.Errorf("refusal for an old agent: %s", r.body)
	}
	fl.oldAgent("rs-m2", false)
	waitFor(t, "every master reporting an etcd snapshot", func() bool {
		n := 0
		for _, node := range e.cluster("rs").Status.Nodes {
			if node.Role == v1.RoleMaster && node.EtcdSnapshotAt != nil {
				n++
			}
		}
		return n == 3
	})
	restore(v1.RestoreRequest{Source: "rs-w1"}).wantStatus(t, http.StatusBadRequest, v1.CodeBadRequest)
	restore(v1.RestoreRequest{Source: "rs-m9"}).wantStatus(t, http.StatusBadRequest, v1.CodeBadRequest)
	fraction := time.Date(2026, 11, 29, 3, 0, 0, 5, time.UTC)
	restore(v1.RestoreRequest{SnapshotTakenAt: &fraction}).wantStatus(t, http.StatusBadRequest, v1.CodeBadRequest)
	// A snapshot the source does not report is refused before any master
	// stops: nothing would restore it.
	missing := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	r = restore(v1.RestoreRequest{Source: "rs-m1", SnapshotTakenAt: &missing})
	r.wantStatus(t, http.StatusBadRequest, v1.CodeBadRequest)
	if !strings.Contains(string(r.body), "rs-m1 reports no etcd snapshot taken at 2026-11-29T03:00:00Z (it has: ") {
		t.Errorf("refusal of a snapshot the source does not have: %s", r.body)
	}
	if r := e.restoreIn("rs-m1"); r != nil {
		t.Errorf("a refused restore reached a role: %+v", r)
	}

	// The source cannot restore: the restore waits on it, saying why,
	// and no other master is told to join.
	fl.mu.Lock()
	fl.unrestorable["rs-m3"] = true
	fl.mu.Unlock()
	first := e.start("POST", v1.PathClusters+"/rs/restore", v1.RestoreRequest{Source: "rs-m3"})
	waitFor(t, "the restore waiting on rs-m3, with its etcd's message", func() bool {
		c := e.restoring("rs")
		return c.Status == "True" && c.Reason == "Waiting" && strings.Contains(c.Message, "waiting for rs-m3 to restore its etcd snapshot of") &&
			strings.Contains(c.Message, "no snapshot taken at")
	})
	time.Sleep(time.Second) // a few passes of the engine and the fleet
	for _, node := range []string{"rs-m1", "rs-m2", "rs-m3"} {
		if r := e.restoreIn(node); r == nil || r.ID == "" || r.Source != "rs-m3" || r.SourceRestored {
			t.Errorf("%s's role while the source cannot restore: %+v, want the restore, the source not done", node, r)
		}
	}
	if r := e.restoreIn("rs-w1"); r != nil {
		t.Errorf("a worker asked to restore: %+v", r)
	}
	fl.mu.Lock()
	if len(fl.restoreOrder) != 0 {
		t.Errorf("masters did their part before the source: %q", fl.restoreOrder)
	}
	fl.mu.Unlock()
	doJSON(t, e.tc.admin, "POST", e.tc.url+v1.PathClusters+"/rs/upgrade", v1.UpgradeRequest{Image: newImage}).wantStatus(t, http.StatusConflict, v1.CodeConflict)

	// A new restore, from the newest snapshot, replaces it.
	fl.mu.Lock()
	newest := ""
	for _, m := range []string{"rs-m1", "rs-m2", "rs-m3"} {
		if newest == "" || fl.saved[m].After(fl.saved[newest]) {
			newest = m
		}
	}
	if newest == "rs-m3" {
		fl.unrestorable["rs-m3"] = false
	}
	fl.mu.Unlock()
	second := e.start("POST", v1.PathClusters+"/rs/restore", v1.RestoreRequest{})
	if got := e.waitOp(second.ID); got.State != v1.OperationSucceeded || !strings.Contains(got.Message, "every master serves the keyspace of "+newest+"'s snapshot") {
		t.Fatalf("the restore: %s: %s", got.State, got.Message)
	}
	if got := e.waitOp(first.ID); got.State != v1.OperationFailed || !strings.Contains(got.Message, "replaced by restore r-") {
		t.Errorf("the replaced restore: %s: %s", got.State, got.Message)
	}

	cl := e.cluster("rs")
	var id string
	for _, n := range cl.Status.Nodes {
		if n.Name == newest {
			id = n.EtcdRestored
		}
	}
	fl.mu.Lock()
	var done []string
	for _, seen := range fl.restoreOrder {
		if rest, ok := strings.CutPrefix(seen, id+" "); ok && id != "" {
			done = append(done, rest)
		}
	}
	fl.mu.Unlock()
	if len(done) != 3 || done[0] != newest {
		t.Errorf("restore %q done by %q in that order, want the source %s first, then the other masters", id, done, newest)
	}
	for _, n := range cl.Status.Nodes {
		if want := map[v1.NodeRole]string{v1.RoleMaster: id}[n.Role]; n.EtcdRestored != want {
			t.Errorf("%s shows restore %q done, want %q", n.Name, n.EtcdRestored, want)
		}
		if r := e.restoreIn(n.Name); r != nil {
			t.Errorf("%s still asked to restore once it ended: %+v", n.Name, r)
		}
	}
	if c := e.restoring("rs"); c.Type != "" {
		t.Errorf("Restoring condition after the restore: %+v", c)
	}
	if !slices.ContainsFunc(cl.Status.Events, func(ev v1.Event) bool { return ev.Reason == "Restored" && strings.Contains(ev.Message, id) }) {
		t.Errorf("no Restored event for %s: %+v", id, cl.Status.Events)
	}
}

// A restore from the controller's copy, for masters that lost their own
// snapshots: refused without a copy, for a time the controller has no
// copy of, and for a source whose agent cannot fetch one; the source's
// role alone says fromController; the source fetches the copy with its
// own certificate (a worker and a time without a copy get nothing), and
// the restore ends as any does.
func TestARestoreFromTheControllersCopy(t *testing.T) {
	e := newClusterEnv(t)
	e.do("POST", v1.PathClusters, e.spec("rc", 3, 1))
	fl := e.startFleet("rc", "")
	e.waitAllReady("rc")
	restore := func(req v1.RestoreRequest) response {
		return doJSON(t, e.tc.admin, "POST", e.tc.url+v1.PathClusters+"/rc/restore", req)
	}
	refused := func(r response, status int, code, field string) {
		t.Helper()
		r.wantStatus(t, status, code)
		if r.err.Field != field {
			t.Errorf("refusal %q names field %q, want %q", r.err.Message, r.err.Field, field)
		}
	}
	copyURL := func(at time.Time) string {
		return e.tc.url + v1.EtcdSnapshotCopyPath(at)
	}
	agent := func(name string) *http.Client {
		t.Helper()
		a := fl.agent(name, e.vms("rc")[name])
		if a == nil {
			t.Fatalf("no agent of %s", name)
		}
		return a
	}

	refused(restore(v1.RestoreRequest{FromController: true}), http.StatusConflict, v1.CodeConflict, "fromController")
	taken := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	data := htest.EtcdSnapshot(t, 2)
	doJSON(t, agent("rc-m1"), "PUT", copyURL(taken), data).wantStatus(t, http.StatusCreated, "")
	other := taken.Add(time.Minute)
	refused(restore(v1.RestoreRequest{FromController: true, SnapshotTakenAt: &other}), http.StatusBadRequest, v1.CodeBadRequest, "snapshotTakenAt")
	fl.mu.Lock()
	fl.noCopies["rc-m2"] = true
	fl.mu.Unlock()
	waitFor(t, "rc-m2 reporting it fetches no copies", func() bool {
		var n v1.Node
		doJSON(t, e.tc.admin, "GET", e.tc.url+v1.PathNodes+"/rc-m2", nil).decode(t, &n)
		return n.Status != nil && !slices.Contains(n.Status.Capabilities, v1.CapabilityEtcdRestoreFromController)
	})
	refused(restore(v1.RestoreRequest{FromController: true, Source: "rc-m2"}), http.StatusConflict, v1.CodeConflict, "source")
	doJSON(t, agent("rc-w1"), "GET", copyURL(taken), nil).wantStatus(t, http.StatusNotFound, v1.CodeNotFound)
	doJSON(t, agent("rc-m1"), "GET", copyURL(other), nil).wantStatus(t, http.StatusNotFound, v1.CodeNotFound)

	r := restore(v1.RestoreRequest{FromController: true, Source: "rc-m3"})
	if r.status != http.StatusAccepted {
		t.Fatalf("restore from the controller's copy: %d %s", r.status, r.body)
	}
	var op v1.Operation
	r.decode(t, &op)
	if op = e.waitOp(op.ID); op.State != v1.OperationSucceeded || !strings.Contains(op.Message, "the controller's copy of the snapshot of "+taken.Format(time.RFC3339)+", through rc-m3") {
		t.Fatalf("the restore's operation: %s: %s", op.State, op.Message)
	}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if !bytes.Equal(fl.fetched["rc-m3"], data) {
		t.Errorf("rc-m3 fetched %d bytes, want the copy's %d", len(fl.fetched["rc-m3"]), len(data))
	}
	if len(fl.toldToFetch) != 1 || !fl.toldToFetch["rc-m3"] {
		t.Errorf("masters told to fetch the copy: %v, want the source alone", fl.toldToFetch)
	}
}
