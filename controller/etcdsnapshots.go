package controller

import (
	"errors"
	"io"
	"io/fs"
	"net/http"
	"strconv"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/etcdcopies"
)

// maxSnapshotClockSkew is how far in the controller's future a snapshot
// may say it was taken: a master whose clock runs ahead by more would
// make every later snapshot look older than its copy.
const maxSnapshotClockSkew = 10 * time.Minute

// handleListEtcdSnapshotCopies answers a master with the copies the
// controller keeps of its cluster's snapshots, and which it takes next.
func (c *Controller) handleListEtcdSnapshotCopies(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	cl, rule, err := c.clusters.SnapshotCopies(who.name)
	if err != nil {
		return clusterError(err)
	}
	list, err := c.copies.List(cl, rule)
	if err != nil {
		return internalError("etcd snapshot copies", err)
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// handlePutEtcdSnapshotCopy keeps a copy of a snapshot a master sends
// (PUT PathNodeEtcdSnapshots/{takenAt}, the snapshot's bytes as etcd wrote
// them). The cluster is the node's, from its certificate.
func (c *Controller) handlePutEtcdSnapshotCopy(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	takenAt, err := v1.ParseSnapshotTime(r.PathValue("takenAt"))
	if err != nil {
		return badInput(err)
	}
	if ahead := takenAt.Sub(c.now()); ahead > maxSnapshotClockSkew {
		e := refuse(http.StatusBadRequest, v1.CodeBadRequest, "takenAt %s is %s ahead of the controller's clock: the master's clock is wrong",
			takenAt.Format(time.RFC3339), ahead.Round(time.Second))
		e.field = "takenAt"
		return e
	}
	cl, rule, err := c.clusters.SnapshotCopies(who.name)
	if err != nil {
		return clusterError(err)
	}
	// A snapshot of gigabytes outlives the server's deadlines.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(uploadTimeout))
	_ = rc.SetWriteDeadline(time.Now().Add(uploadTimeout))
	body := &bodyReader{r: r.Body}
	// Told before anyone lists the copy, so that the request's pass
	// does not find it first, not knowing whose it is.
	kept := func(copied v1.EtcdSnapshotCopy) {
		c.log.Info("etcd snapshot copied", "cluster", cl.Name, "node", who.name, "takenAt", takenAt, "bytes", copied.Bytes)
		if err := c.clusters.SnapshotCopied(cl, who.name, takenAt); err != nil {
			// The copy is kept; the request's pass finds it, if not whose.
			c.log.Warn("etcd snapshot request not told of the copy", "cluster", cl.Name, "node", who.name, "err", err)
		}
	}
	copied, err := c.copies.Put(cl, takenAt, body, r.ContentLength, rule, kept)
	var notWanted *etcdcopies.NotWantedError
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &notWanted):
		return refuse(http.StatusConflict, v1.CodeConflict, "%v", err)
	case errors.As(err, &tooBig):
		return badInput(err)
	case body.err != nil:
		// The master went away mid-way (it tries again later): its
		// doing, not a failure of the controller's.
		c.log.Warn("etcd snapshot copy broke off", "cluster", cl.Name, "node", who.name, "takenAt", takenAt, "err", body.err)
		e := refuse(http.StatusBadRequest, v1.CodeBadRequest, "the snapshot's body broke off: %v", body.err)
		e.field = "body"
		return e
	case errors.Is(err, etcdcopies.ErrNoRoom):
		return refuse(http.StatusRequestEntityTooLarge, v1.CodeBodyTooLarge, "%v", err)
	case errors.Is(err, etcdcopies.ErrBadSnapshot):
		e := refuse(http.StatusBadRequest, v1.CodeBadRequest, "%v", err)
		e.field = "body"
		return e
	case err != nil:
		return internalError("etcd snapshot copy", err)
	}
	writeJSON(w, http.StatusCreated, copied)
	return nil
}

// bodyReader remembers why reading a request's body failed.
type bodyReader struct {
	r   io.Reader
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

// handleGetEtcdSnapshotCopy sends a master the controller's copy of its
// cluster's snapshot taken at {takenAt}: a restore's source fetches it
// when the masters lost their own.
func (c *Controller) handleGetEtcdSnapshotCopy(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	takenAt, err := v1.ParseSnapshotTime(r.PathValue("takenAt"))
	if err != nil {
		return badInput(err)
	}
	cl, _, err := c.clusters.SnapshotCopies(who.name)
	if err != nil {
		return clusterError(err)
	}
	f, size, err := c.copies.Open(cl, takenAt)
	if errors.Is(err, fs.ErrNotExist) {
		return refuse(http.StatusNotFound, v1.CodeNotFound, "the controller keeps no copy of cluster %q's snapshot taken at %s", cl.Name, takenAt.Format(time.RFC3339))
	}
	if err != nil {
		return internalError("etcd snapshot copy", err)
	}
	defer f.Close()
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(uploadTimeout))
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, f); err != nil {
		c.log.Warn("etcd snapshot copy not sent whole", "cluster", cl.Name, "node", who.name, "takenAt", takenAt, "err", err)
		return nil
	}
	c.log.Info("etcd snapshot copy sent", "cluster", cl.Name, "node", who.name, "takenAt", takenAt, "bytes", size)
	return nil
}
