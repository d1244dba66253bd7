package controller

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/store"
)

// handleWatchRole is the agents' long poll. GET PathNodeRole?after=N&wait=D
// answers at once with the node's role if its revision is above N, else
// holds the request until the role changes (200) or D passes (304). The
// node is the client certificate's: the URL names no node.
func (c *Controller) handleWatchRole(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	q := r.URL.Query()
	var after int64
	if s := q.Get("after"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			e := refuse(http.StatusBadRequest, v1.CodeBadRequest, "after must be a non-negative revision, got %q", s)
			e.field = "after"
			return e
		}
		after = v
	}
	var wait time.Duration
	if s := q.Get("wait"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 || d > MaxWatchWait {
			e := refuse(http.StatusBadRequest, v1.CodeBadRequest, "wait must be a duration between 0s and %s, got %q", MaxWatchWait, s)
			e.field = "wait"
			return e
		}
		wait = d
	}

	// A long poll outlives the server's write timeout by design.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(wait + time.Minute))
	c.metrics.activeWatches.Inc()
	defer c.metrics.activeWatches.Dec()
	deadline := time.Now().Add(wait)
	for {
		var role v1.Role
		var err error
		woke, e := c.waitForChange(r.Context(), who.name, deadline, func() bool {
			role, err = c.store.Role(who.name)
			return err != nil || role.Revision > after
		})
		switch {
		case e != nil:
			return e
		case errors.Is(err, store.ErrNotFound):
			return refuse(http.StatusForbidden, v1.CodeNodeGone, "node %q has been deleted", who.name)
		case err != nil:
			return storeError(err, "role")
		case role.Revision > after:
			writeJSON(w, http.StatusOK, role)
			return nil
		case !woke:
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusNotModified)
			return nil
		}
	}
}

// handleStatus stores an agent's status report under the certificate's
// node name, whatever the body says.
func (c *Controller) handleStatus(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	st, err := v1.DecodeStatus(r.Body)
	if err != nil {
		return badInput(err)
	}
	if st.NodeName != "" && st.NodeName != who.name {
		e := refuse(http.StatusForbidden, v1.CodeForbidden, "node %q may not report status for %q", who.name, st.NodeName)
		e.field = "nodeName"
		return e
	}
	st.NodeName = who.name
	st.ReportedAt = c.now().UTC()
	prev, err := c.store.ReplaceStatus(*st) // none yet: every report has news
	if err != nil {
		return storeError(err, "node")
	}
	// The report is stored either way; roles that depend on it follow.
	if err := c.clusters.StatusReported(who.name); err != nil {
		c.log.Error("roles after a status report", "node", who.name, "err", err)
	}
	if err := c.clusters.NodeReported(who.name, prev, *st); err != nil {
		c.log.Error("waking the cluster after a report", "node", who.name, "phase", st.Phase, "err", err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
