package v1

import (
	"fmt"
	"io"
	"slices"
	"time"
)

// UpgradeRequest is the body of POST PathClusters/{name}/upgrade: move the
// cluster to another node image (and, optionally, the next Kubernetes
// minor), or, with Abort, stop the running upgrade.
type UpgradeRequest struct {
	// Image names a ready node image of the cluster's provider.
	Image string `json:"image,omitempty"`
	// KubernetesVersion defaults to the cluster's version; a change may
	// go up one minor at a time, never down.
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// MaxSurge is how many workers are replaced at once; default 1.
	MaxSurge int `json:"maxSurge,omitempty"`
	// Abort stops the running upgrade: the master being replaced goes
	// back to its old VM and disk, surge workers not yet serving go.
	Abort bool `json:"abort,omitempty"`
	// FreshDisk names masters whose data disk does not move: a disk that
	// is missing, corrupt or on a lost datastore. Each new VM gets a new,
	// empty data disk and joins etcd as a new member in place of the old
	// one (the old disk's file is kept). Given without an image, it
	// amends the running upgrade, for a master whose disk turned out
	// missing during it.
	FreshDisk []string `json:"freshDisk,omitempty"`
}

// MaxUpgradeSurge bounds UpgradeRequest.MaxSurge.
const MaxUpgradeSurge = 50

// DecodeUpgradeRequest reads and checks an upgrade request.
func DecodeUpgradeRequest(r io.Reader) (*UpgradeRequest, error) {
	var u UpgradeRequest
	if err := decodeStrict(r, MaxAdminBytes, &u); err != nil {
		return nil, err
	}
	if u.Abort {
		switch {
		case u.Image != "":
			return nil, fieldErr("image", "an abort takes no image")
		case u.KubernetesVersion != "":
			return nil, fieldErr("kubernetesVersion", "an abort takes no version")
		case u.MaxSurge != 0:
			return nil, fieldErr("maxSurge", "an abort takes no surge")
		case len(u.FreshDisk) > 0:
			return nil, fieldErr("freshDisk", "an abort takes no fresh disks")
		}
		return &u, nil
	}
	for i, name := range u.FreshDisk {
		if err := ValidateNodeName(name); err != nil {
			return nil, fieldErr(fmt.Sprintf("freshDisk[%d]", i), "%v", err)
		}
		if slices.Contains(u.FreshDisk[:i], name) {
			return nil, fieldErr(fmt.Sprintf("freshDisk[%d]", i), "%s is named twice", name)
		}
	}
	if u.Image == "" && len(u.FreshDisk) > 0 {
		// An amendment of the running upgrade.
		switch {
		case u.KubernetesVersion != "":
			return nil, fieldErr("kubernetesVersion", "an amendment of the running upgrade takes no version")
		case u.MaxSurge != 0:
			return nil, fieldErr("maxSurge", "an amendment of the running upgrade takes no surge")
		}
		return &u, nil
	}
	if u.Image == "" {
		return nil, fieldErr("image", "required: the node image to move the cluster to")
	}
	if !labelPattern.MatchString(u.Image) && ValidateNodeName(u.Image) != nil {
		return nil, fieldErr("image", "%q is not an image name", u.Image)
	}
	if u.KubernetesVersion != "" && !versionPattern.MatchString(u.KubernetesVersion) {
		return nil, fieldErr("kubernetesVersion", "%q is not a version such as v1.34.2", u.KubernetesVersion)
	}
	if u.MaxSurge == 0 {
		u.MaxSurge = 1
	}
	if u.MaxSurge < 1 || u.MaxSurge > MaxUpgradeSurge {
		return nil, fieldErr("maxSurge", "must be between 1 and %d, got %d", MaxUpgradeSurge, u.MaxSurge)
	}
	return &u, nil
}

// UpgradeStatus is a cluster's newest upgrade.
type UpgradeStatus struct {
	Image                 string `json:"image"`
	KubernetesVersion     string `json:"kubernetesVersion"`
	FromImage             string `json:"fromImage"`
	FromKubernetesVersion string `json:"fromKubernetesVersion"`
	// State is Running, Succeeded, RolledBack (a node's replacement failed
	// and it went back to its old VM; the upgrade stopped) or Aborted.
	State   string `json:"state"`
	Message string `json:"message,omitempty"`
	// Upgraded counts the nodes that run the new image, of Nodes.
	Upgraded   int       `json:"upgraded"`
	Nodes      int       `json:"nodes"`
	StartedAt  time.Time `json:"startedAt"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
}

// Upgrade states.
const (
	UpgradeRunning    = "Running"
	UpgradeSucceeded  = "Succeeded"
	UpgradeRolledBack = "RolledBack"
	UpgradeAborted    = "Aborted"
)
