package kubeadm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/images/components"
)

// The kubelet link follows the cluster's version among those the image
// carries; a version the image lacks is refused, naming it; a host
// without the image's layout is left alone.
func TestKubeletLinkFollowsTheClusterVersion(t *testing.T) {
	host := &reconcile.Host{Root: t.TempDir()}
	var st reconcile.Status
	if err := useClusterKubelet(host, "v1.33.4", &st); err != nil || len(st.Actions) != 0 {
		t.Fatalf("without the layout: %v, actions %v", err, st.Actions)
	}
	for _, v := range []string{"v1.34.2", "v1.33.4"} {
		bin := host.Path(components.KubernetesBinary(v, "kubelet"))
		if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := host.Path(components.KubeletLink)
	for _, v := range []string{"v1.33.4", "v1.33.4", "v1.34.2"} {
		st = reconcile.Status{}
		if err := useClusterKubelet(host, v, &st); err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		if got, err := os.Readlink(link); err != nil || got != components.KubernetesBinary(v, "kubelet") {
			t.Fatalf("%s: link %q, %v", v, got, err)
		}
		t.Logf("%s: %v", v, st.Actions)
	}
	// The second pass at one version changes nothing.
	st = reconcile.Status{}
	if err := useClusterKubelet(host, "v1.34.2", &st); err != nil || len(st.Actions) != 0 {
		t.Errorf("again at v1.34.2: %v, actions %v", err, st.Actions)
	}
	err := useClusterKubelet(host, "v1.32.9", &st)
	if err == nil || !strings.Contains(err.Error(), "v1.32.9") {
		t.Errorf("a version the image lacks: %v", err)
	}
	if got, _ := os.Readlink(link); got != components.KubernetesBinary("v1.34.2", "kubelet") {
		t.Errorf("after the refusal the link is %q", got)
	}
}
