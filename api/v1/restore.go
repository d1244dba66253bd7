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
	// FromController restores the controller's copy
	// (ClusterStatus.EtcdSnapshotCopies) taken at SnapshotTakenAt,
	// default the newest, for a cluster whose masters lost their own:
	// the source (default: the first master) fetches it.
	FromController bool `json:"fromController,omitempty"`
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
		if err := validateSnapshotTime("snapshotTakenAt", *req.SnapshotTakenAt); err != nil {
			return nil, err
		}
	}
	return &req, nil
}

// validateSnapshotTime checks t as a snapshot's name: a time to the
// second.
func validateSnapshotTime(field string, t time.Time) error {
	switch {
	case t.IsZero() || t.Year() < 2000:
		return fieldErr(field, "%s is not when a snapshot was taken", t.Format(time.RFC3339))
	case t.Nanosecond() != 0:
		return fieldErr(field, "snapshots are named to the second; %s has a fraction", t.Format(time.RFC3339Nano))
	}
	return nil
}

// EtcdSnapshotCopy is one etcd snapshot the controller keeps a copy of,
// off the masters' data disks: a cluster whose masters lost their disks
// can still be restored from it.
type EtcdSnapshotCopy struct {
	// TakenAt is when the master took it (to the second, as its name
	// says).
	TakenAt time.Time `json:"takenAt"`
	Bytes   int64     `json:"bytes"`
}

// EtcdSnapshotRequest is an etcd snapshot asked for by hand (POST
// PathClusters/{name}/etcd-snapshot): every master takes one, and the
// first taken after the request, as the masters' clocks tell, answers it
// once the controller keeps a copy of it (when the masters' agents send
// copies; older ones do not).
type EtcdSnapshotRequest struct {
	AskedAt time.Time `json:"askedAt"`
	By      string    `json:"by"`
	// TakenAt and Master name the snapshot that answered it, and Copied
	// says the controller keeps a copy (EtcdSnapshotCopies).
	TakenAt time.Time `json:"takenAt,omitzero"`
	Master  string    `json:"master,omitempty"`
	Copied  bool      `json:"copied,omitempty"`
	// FinishedAt is zero while the masters are at it; Error says why
	// it failed.
	FinishedAt time.Time `json:"finishedAt,omitzero"`
	Error      string    `json:"error,omitempty"`
}

// EtcdSnapshotCopyList answers GET PathNodeEtcdSnapshots: the copies the
// controller keeps of the node's cluster's snapshots, oldest first, and
// which it takes next.
type EtcdSnapshotCopyList struct {
	Items []EtcdSnapshotCopy `json:"items"`
	// NextAfter: the controller takes a copy of a snapshot taken after
	// this, and refuses older ones (a copy every half interval is
	// enough; every master has its own snapshots). Zero: any.
	NextAfter time.Time `json:"nextAfter,omitzero"`
}

// EtcdSnapshotCopyPath is the path of the controller's copy of the
// snapshot taken at takenAt: PathNodeEtcdSnapshots/{takenAt}, which
// ParseSnapshotTime reads back.
func EtcdSnapshotCopyPath(takenAt time.Time) string {
	return PathNodeEtcdSnapshots + "/" + takenAt.UTC().Format(time.RFC3339)
}

// ParseSnapshotTime reads the {takenAt} of PathNodeEtcdSnapshots/{takenAt}:
// RFC 3339, to the second.
func ParseSnapshotTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fieldErr("takenAt", "%.64q is not an RFC 3339 time (2026-11-29T03:00:00Z)", s)
	}
	if err := validateSnapshotTime("takenAt", t); err != nil {
		return time.Time{}, err
	}
	return t.UTC(), nil
}
