package v1

import (
	"io"
	"time"
)

// RestoreRequest is the body of POST PathClusters/{name}/restore: bring
// the cluster's etcd keyspace back from a snapshot one master took
// (EtcdSnapshots), for a cluster that lost its quorum or its data to a
// bad write. Everything written since the snapshot is lost; every
// member's state before the restore is kept, set aside on its data disk.
type RestoreRequest struct {
	// Source is the master whose snapshot is restored; default: the one
	// whose agent reports the newest snapshot.
	Source string `json:"source,omitempty"`
	// SnapshotTakenAt names one of the source's snapshots by when it was
	// taken (to the second, as its file name says); default: the newest
	// the source's agent reports.
	SnapshotTakenAt *time.Time `json:"snapshotTakenAt,omitempty"`
}

// DecodeRestoreRequest reads and checks a restore request.
func DecodeRestoreRequest(r io.Reader) (*RestoreRequest, error) {
	var req RestoreRequest
	if err := decodeStrict(r, MaxAdminBytes, &req); err != nil {
		return nil, err
	}
	if req.Source != "" {
		if err := ValidateNodeName(req.Source); err != nil {
			return nil, fieldErr("source", "%v", err)
		}
	}
	if req.SnapshotTakenAt != nil {
		switch t := *req.SnapshotTakenAt; {
		case t.IsZero() || t.Year() < 2000:
			return nil, fieldErr("snapshotTakenAt", "%s is not when a snapshot was taken", t.Format(time.RFC3339))
		case t.Nanosecond() != 0:
			return nil, fieldErr("snapshotTakenAt", "snapshots are named to the second; %s has a fraction", t.Format(time.RFC3339Nano))
		}
	}
	return &req, nil
}
