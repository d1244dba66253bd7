package controller

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/cluster"
)

// Watch bounds: a watch returns at the next change or after this long.
const (
	DefaultOperationWatch = 30 * time.Second
	maxOperationWatch     = 2 * time.Minute
)

// handleGetOperation answers with the operation and its cluster's node
// progress and events. With ?watch=true&revision=N it waits until there
// is something newer than event N, or the operation ends.
func (c *Controller) handleGetOperation(w http.ResponseWriter, r *http.Request, _ principal) *apiError {
	id := r.PathValue("id")
	watch, err := boolParam(r, "watch")
	if err != nil {
		return badInput(err)
	}
	var since int64
	if v := r.URL.Query().Get("revision"); v != "" {
		if since, err = strconv.ParseInt(v, 10, 64); err != nil || since < 0 {
			return badInput(&v1.FieldError{Field: "revision", Problem: fmt.Sprintf("%q is not a non-negative integer", v)})
		}
	}
	deadline := time.Now().Add(DefaultOperationWatch)
	if v := r.URL.Query().Get("timeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > maxOperationWatch {
			return badInput(&v1.FieldError{Field: "timeout", Problem: fmt.Sprintf("%q is not a duration up to %s", v, maxOperationWatch)})
		}
		deadline = time.Now().Add(d)
	}
	if watch {
		_ = http.NewResponseController(w).SetWriteDeadline(deadline.Add(time.Minute))
	}
	for {
		op, err := c.clusters.Operation(id, since)
		if err != nil {
			return storeError(err, fmt.Sprintf("operation %q", id))
		}
		if !watch || op.Done() || op.Revision > since {
			writeJSON(w, http.StatusOK, op)
			return nil
		}
		woke, e := c.waitForChange(r.Context(), watchKey(op), deadline, func() bool {
			changed, err := c.clusters.OperationChanged(id, since)
			return err != nil || changed
		})
		if e != nil {
			return e
		}
		if !woke {
			writeJSON(w, http.StatusOK, op)
			return nil
		}
		// A workflow records steps in bursts (a hundred clones at once):
		// answered at each, a watcher would get one event per answer, and
		// the controller would build the whole node view for each.
		select {
		case <-time.After(min(watchSettle, time.Until(deadline))):
		case <-r.Context().Done():
			return shuttingDown()
		}
	}
}

// watchSettle is how long a woken watch waits for more of the burst
// before it answers.
const watchSettle = 100 * time.Millisecond

// waitForChange subscribes to key and then asks changed, so that no change
// between the caller's read and the wait is missed; it waits for the next
// change until deadline. It reports whether something changed.
func (c *Controller) waitForChange(ctx context.Context, key string, deadline time.Time, changed func() bool) (bool, *apiError) {
	woke, cancel := c.hub.subscribe(key)
	defer cancel()
	if changed() {
		return true, nil
	}
	select {
	case <-woke:
		return true, nil
	case <-time.After(time.Until(deadline)):
		return false, nil
	case <-ctx.Done():
		return false, shuttingDown()
	}
}

func watchKey(op *v1.Operation) string {
	if op.Cluster != "" {
		return cluster.NotifyKey(op.Cluster)
	}
	return operationKey(op.ID)
}

// operationKey is the hub key of an operation that belongs to no cluster
// (an image import).
func operationKey(id string) string { return "op:" + id }
