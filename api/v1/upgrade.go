package v1

import (
	"io"
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
