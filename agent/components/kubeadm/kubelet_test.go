package kubeadm

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/images/components"
)

// The kubelet link follows the cluster's version among those the image
// carries; a version the image lacks is refused for good, naming it; a host
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
	// For good: the image never gains the binary, so a controller
	// replacing the VM need not wait.
	if got := st.Failed(err); got.Phase != reconcile.PhaseRefused {
		t.Errorf("a version the image lacks is reported %s, want %s", got.Phase, reconcile.PhaseRefused)
	}
	if got, _ := os.Readlink(link); got != components.KubernetesBinary("v1.34.2", "kubelet") {
		t.Errorf("after the refusal the link is %q", got)
	}
}

// On a node image, /usr/bin/kubeadm links into the layout and its
// directory gives the version: nothing is started to ask. Any other binary
// is asked, once.
func TestKubeadmVersionFromTheImageLayout(t *testing.T) {
	dir := t.TempDir()
	var ran []string
	record := func(ctx context.Context, argv []string) *exec.Cmd {
		ran = append(ran, strings.Join(argv, " "))
		return exec.CommandContext(ctx, "echo", "v1.30.9")
	}
	// The link dangles here; the version must come from its name alone.
	link := filepath.Join(dir, "kubeadm")
	if err := os.Symlink(components.KubernetesBinary("v1.33.4", "kubeadm"), link); err != nil {
		t.Fatal(err)
	}
	c := New(Config{Binary: link, Command: record})
	for range 2 {
		if v, err := c.kubeadmVersion(context.Background()); err != nil || v != "v1.33.4" {
			t.Fatalf("linked into the layout: %q, %v; want v1.33.4", v, err)
		}
	}
	if len(ran) != 0 {
		t.Fatalf("ran %q to learn a version the layout names", ran)
	}

	other := filepath.Join(dir, "other-kubeadm")
	if err := os.Symlink("/usr/local/bin/kubeadm", other); err != nil {
		t.Fatal(err)
	}
	c = New(Config{Binary: other, Command: record})
	for range 2 {
		if v, err := c.kubeadmVersion(context.Background()); err != nil || v != "v1.30.9" {
			t.Fatalf("outside the layout: %q, %v; want the binary's answer v1.30.9", v, err)
		}
	}
	if len(ran) != 1 || !strings.HasSuffix(ran[0], "other-kubeadm version -o short") {
		t.Fatalf("outside the layout, ran %q; want one version query", ran)
	}
}
