package v1

import (
	"fmt"
	"io"
	"time"
)

// Bounds of an admin kubeconfig's certificate.
const (
	DefaultKubeconfigLifetime = time.Hour
	MaxKubeconfigLifetime     = 7 * 24 * time.Hour
	minKubeconfigLifetime     = 5 * time.Minute
)

// KubeconfigRequest asks the controller for a cluster admin kubeconfig
// (POST PathClusters/{name}/kubeconfig); an empty body takes the default
// lifetime.
type KubeconfigRequest struct {
	// Lifetime of the client certificate, a Go duration; default 1h, at
	// most 168h.
	Lifetime string `json:"lifetime,omitempty"`
}

// Kubeconfig is a kubeconfig for a cluster's API through its VIP. The
// admin one (POST PathClusters/{name}/kubeconfig) is cluster-admin
// (system:masters), with a client certificate from the cluster CA that
// expires at ExpiresAt. The user's one (GET PathClusters/{name}/kubeconfig)
// holds no credential: kubectl runs CredentialCommand, which asks the
// controller for a short-lived one each time, so a revoked grant ends
// access within minutes; it has no ExpiresAt.
type Kubeconfig struct {
	Cluster    string    `json:"cluster"`
	Server     string    `json:"server"`
	User       string    `json:"user"`
	ExpiresAt  time.Time `json:"expiresAt,omitzero"`
	Kubeconfig string    `json:"kubeconfig"`
}

// CredentialCommand is the exec credential plugin of a user's kubeconfig:
// harmonyctl, found on kubectl's PATH and signed in to the controller
// (harmonyctl login), with CredentialArgs.
const CredentialCommand = "harmonyctl"

// CredentialArgs are the plugin's arguments for a cluster.
func CredentialArgs(cluster string) []string { return []string{"credential", cluster} }

// CredentialInstallHint is what kubectl prints when the plugin is missing.
const CredentialInstallHint = "This kubeconfig takes its credential from harmonyctl: install it on your PATH and sign in with harmonyctl login."

// DecodeKubeconfigRequest reads a kubeconfig request (empty: defaults)
// and returns the lifetime it asks for.
func DecodeKubeconfigRequest(r io.Reader) (time.Duration, error) {
	var req KubeconfigRequest
	if err := decodeOptional(r, MaxAdminBytes, &req); err != nil {
		return 0, err
	}
	if req.Lifetime == "" {
		return DefaultKubeconfigLifetime, nil
	}
	d, err := time.ParseDuration(req.Lifetime)
	if err != nil || d < minKubeconfigLifetime || d > MaxKubeconfigLifetime {
		return 0, fieldErr("lifetime", "%q is not a duration from %s to %s", req.Lifetime, minKubeconfigLifetime, MaxKubeconfigLifetime)
	}
	return d, nil
}

// APIServerPort is where HAProxy serves the cluster's apiservers on the
// VIP.
const APIServerPort = 8443

// APIServerURL is a cluster's API through its VIP.
func APIServerURL(vip string) string { return fmt.Sprintf("https://%s:%d", vip, APIServerPort) }
