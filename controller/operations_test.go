package controller

import (
	"net/http"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/cluster"
)

// A deleted cluster's operations went nowhere: every deleted cluster's
// stayed in the store for good. Now its older operations go with it, as
// its events do; the delete's own stays readable for whoever polls it,
// and goes when a later deletion finds it kept for long enough.
func TestADeletedClustersOperationsAreForgotten(t *testing.T) {
	e := newClusterEnv(t)
	status := func(id string) int {
		t.Helper()
		return doJSON(t, e.tc.admin, "GET", e.tc.url+v1.PathOperations+"/"+id, nil).status
	}

	created := e.do("POST", v1.PathClusters, e.spec("old", 1, 0))
	other := e.spec("other", 1, 0)
	other.VIP = "198.18.10.78"
	kept := e.do("POST", v1.PathClusters, other)
	deleted := e.do("DELETE", v1.PathClusters+"/old", nil)
	if got := status(created.ID); got != http.StatusNotFound {
		t.Errorf("the deleted cluster's create operation: %d, want 404", got)
	}
	if op := e.operation(deleted.ID); op.State != v1.OperationSucceeded || op.Message != "cluster deleted" {
		t.Errorf("the delete's operation: %s %q", op.State, op.Message)
	}
	if got := status(kept.ID); got != http.StatusOK {
		t.Errorf("another cluster's operation: %d, want 200", got)
	}

	// Within the time it is kept, the next deletion leaves it.
	e.tc.clock.Advance(cluster.KeepDeletedClusterOperations - time.Hour)
	e.do("POST", v1.PathClusters, e.spec("third", 1, 0))
	third := e.do("DELETE", v1.PathClusters+"/third", nil)
	if got := status(deleted.ID); got != http.StatusOK {
		t.Fatalf("a delete's operation within %s of it: %d, want 200", cluster.KeepDeletedClusterOperations, got)
	}

	e.tc.clock.Advance(2 * time.Hour)
	last := e.do("DELETE", v1.PathClusters+"/other", nil)
	if got := status(deleted.ID); got != http.StatusNotFound {
		t.Errorf("a delete's operation kept past %s: %d, want 404", cluster.KeepDeletedClusterOperations, got)
	}
	for _, op := range []v1.Operation{third, last} {
		if got := status(op.ID); got != http.StatusOK {
			t.Errorf("a delete's operation of hours ago: %d, want 200", got)
		}
	}
}
