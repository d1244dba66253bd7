package v1

import (
	"bytes"
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

// Kubeconfig is an issued kubeconfig: cluster-admin (system:masters)
// through the cluster's VIP, with a client certificate from the cluster
// CA that expires at ExpiresAt.
type Kubeconfig struct {
	Cluster    string    `json:"cluster"`
	Server     string    `json:"server"`
	User       string    `json:"user"`
	ExpiresAt  time.Time `json:"expiresAt"`
	Kubeconfig string    `json:"kubeconfig"`
}

// DecodeKubeconfigRequest reads a kubeconfig request (empty: defaults)
// and returns the lifetime it asks for.
func DecodeKubeconfigRequest(r io.Reader) (time.Duration, error) {
	data, err := readLimited(r, MaxAdminBytes)
	if err != nil {
		return 0, err
	}
	var req KubeconfigRequest
	if len(bytes.TrimSpace(data)) > 0 {
		if err := unmarshalStrict(data, &req); err != nil {
			return 0, err
		}
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
