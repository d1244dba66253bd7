package controller

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// An etcd snapshot asked for by hand: every master takes one, the first
// is copied to the controller although its copy schedule (one per half
// interval, six hours by default) would refuse it, and the operation and
// the cluster's view name it. The fleet stands in for the agents, over
// real HTTPS with their node certificates; TestLab runs the real ones.
func TestAnEtcdSnapshotTakenWhenAsked(t *testing.T) {
	const timeout = 45 * time.Second
	e := newClusterEnv(t, func(c *Config) { c.EtcdSnapshotTimeout = timeout })
	e.do("POST", v1.PathClusters, e.spec("sn", 3, 1))
	fl := e.startFleet("sn", "")
	fl.copying.Store(true)
	e.waitAllReady("sn")
	masters := []string{"sn-m1", "sn-m2", "sn-m3"}
	ask := func() response {
		return doJSON(t, e.tc.admin, "POST", e.tc.url+v1.PathClusters+"/sn/etcd-snapshot", nil)
	}
	start := func() v1.Operation {
		t.Helper()
		r := ask()
		if r.status != http.StatusAccepted {
			t.Fatalf("ask for a snapshot: %d %s", r.status, r.body)
		}
		var op v1.Operation
		r.decode(t, &op)
		if op.Kind != v1.OperationEtcdSnapshot {
			t.Errorf("operation kind %q, want %q", op.Kind, v1.OperationEtcdSnapshot)
		}
		return op
	}
	waitFor(t, "the first scheduled snapshot copied", func() bool { return len(e.cluster("sn").Status.EtcdSnapshotCopies) == 1 })
	first := e.cluster("sn").Status.EtcdSnapshotCopies[0]
	doJSON(t, e.tc.admin, "POST", e.tc.url+v1.PathClusters+"/none/etcd-snapshot", nil).wantStatus(t, http.StatusNotFound, v1.CodeNotFound)

	// No master's agent takes snapshots: refused, nothing asked.
	fl.mu.Lock()
	for _, m := range masters {
		fl.oldAgents[m] = true
	}
	fl.mu.Unlock()
	reports := func(want bool) func() bool {
		return func() bool {
			for _, n := range e.cluster("sn").Status.Nodes {
				node := e.node(n.Name)
				if n.Role == v1.RoleMaster && (node.Status == nil || slices.Contains(node.Status.Capabilities, v1.CapabilityEtcdSnapshots) != want) {
					return false
				}
			}
			return true
		}
	}
	waitFor(t, "no master reporting etcd snapshots", reports(false))
	ask().wantStatus(t, http.StatusConflict, v1.CodeConflict)
	fl.mu.Lock()
	for _, m := range masters {
		fl.oldAgents[m] = false
	}
	fl.mu.Unlock()
	waitFor(t, "the masters reporting etcd snapshots again", reports(true))

	asked := time.Now().UTC().Truncate(time.Second)
	op := start()
	r := ask() // while the first is taken
	r.wantStatus(t, http.StatusConflict, v1.CodeConflict)
	if !strings.Contains(r.err.Message, "is taking the etcd snapshot") {
		t.Errorf("a second request: %q", r.err.Message)
	}
	if op = e.waitOp(op.ID); op.State != v1.OperationSucceeded || !strings.Contains(op.Message, "the controller keeps a copy") {
		t.Fatalf("the snapshot's operation: %s: %s", op.State, op.Message)
	}
	cl := e.cluster("sn")
	req := cl.Status.EtcdSnapshotRequest
	if req == nil || !req.Copied || req.TakenAt.Before(asked) || !slices.Contains(masters, req.Master) || req.FinishedAt.IsZero() || req.By != "admin" {
		t.Fatalf("the cluster's snapshot request: %+v, want one copied, taken by a master at or after %s", req, asked)
	}
	if !strings.Contains(op.Message, req.TakenAt.Format(time.RFC3339)) {
		t.Errorf("the operation %q does not name the snapshot of %s", op.Message, req.TakenAt.Format(time.RFC3339))
	}
	if copies := cl.Status.EtcdSnapshotCopies; len(copies) != 2 || !copies[0].TakenAt.Equal(first.TakenAt) || !copies[1].TakenAt.Equal(req.TakenAt) {
		t.Errorf("copies %+v, want the first (%s) and the one asked for (%s)", copies, first.TakenAt, req.TakenAt)
	}
	fl.mu.Lock()
	if sender := fl.keptFrom[req.TakenAt]; req.Master != sender {
		t.Errorf("the request names %s as the snapshot's master; %s sent the copy", req.Master, sender)
	}
	fl.mu.Unlock()
	roleSince := func(m string) time.Time {
		var role v1.Role
		doJSON(t, e.tc.admin, "GET", e.tc.url+v1.PathNodes+"/"+m+"/role", nil).decode(t, &role)
		return role.Etcd.SnapshotSince
	}
	// The request ends with the first copy; the roles still ask, so that
	// a master a pass behind takes its own in its next pass, and every
	// master's snapshot since the request satisfies its role.
	for _, m := range masters {
		waitFor(t, m+"'s snapshot since the request, satisfying its role", func() bool {
			fl.mu.Lock()
			saved := fl.saved[m]
			fl.mu.Unlock()
			since := roleSince(m)
			return !saved.Before(asked) && !since.IsZero() && v1.EtcdSnapshotCovers(saved, since)
		})
	}

	// Snapshots that fail: the request fails after the timeout, saying so.
	fl.mu.Lock()
	for _, m := range masters {
		fl.unsaved[m] = true
	}
	fl.mu.Unlock()
	op = start()
	if op = e.waitOp(op.ID); op.State != v1.OperationFailed || !strings.Contains(op.Message, "no master reported a snapshot taken since it was asked") {
		t.Errorf("a snapshot no master takes: %s: %s", op.State, op.Message)
	}
	if req := e.cluster("sn").Status.EtcdSnapshotRequest; req == nil || req.Error == "" || req.Copied {
		t.Errorf("the failed request: %+v", req)
	}
	// Failed: no role asks any more, or the agents would retry a failing
	// snapshot every pass.
	for _, m := range masters {
		if since := roleSince(m); !since.IsZero() {
			t.Errorf("%s's role still asks for a snapshot since %s after the request failed", m, since)
		}
	}

	// A restore ends a request that runs (the masters still fail theirs).
	op = start()
	restore := doJSON(t, e.tc.admin, "POST", e.tc.url+v1.PathClusters+"/sn/restore", v1.RestoreRequest{})
	if restore.status != http.StatusAccepted {
		t.Fatalf("restore: %d %s", restore.status, restore.body)
	}
	if op = e.waitOp(op.ID); op.State != v1.OperationFailed || !strings.Contains(op.Message, "restore") {
		t.Errorf("a snapshot request a restore replaced: %s: %s", op.State, op.Message)
	}
	var rop v1.Operation
	restore.decode(t, &rop)
	if rop = e.waitOp(rop.ID); rop.State != v1.OperationSucceeded {
		t.Errorf("the restore: %s: %s", rop.State, rop.Message)
	}

	// So does a delete.
	op = start()
	e.do("DELETE", v1.PathClusters+"/sn", nil)
	if op = e.waitOp(op.ID); op.State != v1.OperationFailed || !strings.Contains(op.Message, "the cluster is deleted") {
		t.Errorf("a snapshot request of a deleted cluster: %s: %s", op.State, op.Message)
	}
}
