package components

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A local HTTPS server stands in for dl.k8s.io, which this machine cannot
// reach; the download, the check and the rename are the real code.
func releaseServer(t *testing.T, body []byte) (*httptest.Server, *int) {
	t.Helper()
	var hits int
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		if r.URL.Path != "/release/v1.34.2/bin/linux/amd64/kubeadm" {
			http.NotFound(w, r)
			return
		}
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func TestFetchReleaseChecksTheSHA256(t *testing.T) {
	body := []byte("\x7fELF not really kubeadm")
	sum := sha256.Sum256(body)
	srv, hits := releaseServer(t, body)
	k := Kubernetes{Version: "v1.34.2", Release: Release{
		URL:    srv.URL + "/release/v1.34.2/bin/linux/amd64",
		SHA256: map[string]string{"kubeadm": hex.EncodeToString(sum[:])},
	}}
	ctx := context.Background()

	dir := t.TempDir()
	if err := k.FetchRelease(ctx, srv.Client(), "kubeadm", dir); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "kubeadm"))
	if err != nil || string(got) != string(body) {
		t.Fatalf("kubeadm: %q, %v", got, err)
	}
	if st, _ := os.Stat(filepath.Join(dir, "kubeadm")); st.Mode().Perm() != 0o755 {
		t.Errorf("kubeadm mode %v, want 0755", st.Mode())
	}

	// A wrong pin: refused, and nothing is left behind.
	bad := k
	bad.Release.SHA256 = map[string]string{"kubeadm": strings.Repeat("0", 64)}
	dir = t.TempDir()
	err = bad.FetchRelease(ctx, srv.Client(), "kubeadm", dir)
	if err == nil || !strings.Contains(err.Error(), "refusing it") || !strings.Contains(err.Error(), hex.EncodeToString(sum[:])) {
		t.Fatalf("a mismatching binary: err %v, want a refusal naming its sha256", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a refused download left %v behind", entries)
	}

	// No pin: refused before any request.
	before := *hits
	unpinned := k
	unpinned.Release.SHA256 = nil
	err = unpinned.FetchRelease(ctx, srv.Client(), "kubeadm", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "release.sha256.kubeadm is not pinned") {
		t.Fatalf("an unpinned binary: err %v", err)
	}
	if *hits != before {
		t.Error("an unpinned binary was downloaded before being refused")
	}

	// Not a release binary, and a missing file.
	if err := k.FetchRelease(ctx, srv.Client(), "kube-apiserver", t.TempDir()); err == nil || !strings.Contains(err.Error(), `"kube-apiserver" is not one of`) {
		t.Errorf("kube-apiserver: err %v", err)
	}
	missing := k
	missing.Release.URL = srv.URL + "/release/v9.9.9"
	if err := missing.FetchRelease(ctx, srv.Client(), "kubeadm", t.TempDir()); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("a 404: err %v", err)
	}
}

func TestEveryReleaseBinaryIsPinned(t *testing.T) {
	pins, err := Load("../components.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range pins.Kubernetes {
		for _, b := range KubernetesBinaries {
			if k.Release.SHA256[b] == "" {
				t.Errorf("kubernetes %s: release.sha256.%s is empty, so the release source refuses it", k.Version, b)
			}
		}
		if !strings.HasSuffix(k.Release.URL, "/release/"+k.Version+"/bin/linux/amd64") {
			t.Errorf("kubernetes %s: release.url %s does not name that version", k.Version, k.Release.URL)
		}
	}
	if _, err := pins.KubernetesVersion("v1.0.0"); err == nil || !strings.Contains(err.Error(), "v1.34.2") {
		t.Errorf("an unpinned version: err %v, want one listing the pinned versions", err)
	}
}
