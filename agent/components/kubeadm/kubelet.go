package kubeadm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/images/components"
)

// useClusterKubelet points the image's kubelet link at the kubelet of the
// cluster's version: a node image carries n and n-1, kubeadm n deploys
// either, but the kubelet must not be newer than the control plane. It
// runs before the kubelet's first start (kubelet-start, join); a kubelet
// already running keeps its binary until it restarts, and the controller
// never changes a node's version in place (an upgrade reimages it).
func useClusterKubelet(host *reconcile.Host, version string, st *reconcile.Status) error {
	link := host.Path(components.KubeletLink)
	target := components.KubernetesBinary(version, "kubelet")
	if _, err := os.Stat(host.Path(components.KubernetesDir)); errors.Is(err, os.ErrNotExist) {
		return nil // not a node image's layout (a test's host)
	}
	if !exists(host.Path(target)) {
		// The image never changes: no retry brings the binary.
		return reconcile.Refuse(fmt.Errorf("kubernetesVersion %s: this image carries no kubelet of that version (%s)", version, target))
	}
	if cur, err := os.Readlink(link); err == nil && cur == target {
		return nil
	}
	// A new link renamed over the old: never a moment without one.
	tmp := filepath.Join(filepath.Dir(link), ".kubelet.new")
	os.Remove(tmp)
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return fmt.Errorf("kubelet link: %w", err)
	}
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("kubelet link: %w", err)
	}
	if err := os.Rename(tmp, link); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("kubelet link: %w", err)
	}
	st.Actions = append(st.Actions, "pointed "+components.KubeletLink+" at "+target)
	return nil
}
