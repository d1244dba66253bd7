package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func testSpec(t *testing.T) Spec {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "pause")
	if err := os.WriteFile(bin, []byte("#!/bin/true\nnot really pause\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return Spec{
		Ref:        "registry.k8s.io/pause:3.10.1",
		Files:      []File{{Source: bin, Path: "/usr/local/bin/pause", Mode: 0o755}},
		Entrypoint: []string{"/usr/local/bin/pause"},
		Env:        []string{defaultPath},
		Created:    time.Unix(1700000000, 0).UTC(),
	}
}

// entries reads an archive into name -> bytes, keeping the order.
func entries(t *testing.T, path string) (map[string][]byte, []string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	out, order := map[string][]byte{}, []string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out, order
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(time.Unix(1700000000, 0)) || h.Uid != 0 {
			t.Errorf("%s: mtime %v uid %d, want the epoch and root", h.Name, h.ModTime, h.Uid)
		}
		data, _ := io.ReadAll(tr)
		out[h.Name] = data
		order = append(order, h.Name)
	}
}

func TestWriteIsReproducibleAndNamesTheImage(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.tar"), filepath.Join(dir, "b.tar")
	da, err := Write(context.Background(), testSpec(t), a)
	if err != nil {
		t.Fatal(err)
	}
	db, err := Write(context.Background(), testSpec(t), b)
	if err != nil {
		t.Fatal(err)
	}
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if da != db || !bytes.Equal(ab, bb) {
		t.Fatalf("two builds differ: %s vs %s", da, db)
	}
	later := testSpec(t)
	later.Created = later.Created.Add(time.Second)
	if dl, _ := Write(context.Background(), later, filepath.Join(dir, "c.tar")); dl == da {
		t.Fatal("a different SOURCE_DATE_EPOCH gave the same digest")
	}

	files, order := entries(t, a)
	if order[0] != "oci-layout" || order[1] != "index.json" {
		t.Fatalf("order %v: want oci-layout, index.json first", order)
	}
	var index v1.IndexManifest
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	if len(index.Manifests) != 1 || index.Manifests[0].Digest.String() != da ||
		index.Manifests[0].Annotations["io.containerd.image.name"] != "registry.k8s.io/pause:3.10.1" {
		t.Fatalf("index %+v: want the one manifest %s named registry.k8s.io/pause:3.10.1", index, da)
	}
	manifest, err := v1.ParseManifest(bytes.NewReader(files["blobs/sha256/"+index.Manifests[0].Digest.Hex]))
	if err != nil {
		t.Fatal(err)
	}
	var cfg v1.ConfigFile
	if err := json.Unmarshal(files["blobs/sha256/"+manifest.Config.Digest.Hex], &cfg); err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.Config.Entrypoint, " ") != "/usr/local/bin/pause" || !cfg.Created.Time.Equal(time.Unix(1700000000, 0)) || cfg.Architecture != "amd64" {
		t.Fatalf("config %+v", cfg)
	}
	if len(manifest.Layers) != 1 || files["blobs/sha256/"+manifest.Layers[0].Digest.Hex] == nil {
		t.Fatalf("manifest layers %+v: want one, present in the archive", manifest.Layers)
	}
}

func TestBadInput(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"x", "want SOURCE:/ABSOLUTE/PATH"},
		{"x:relative", "want SOURCE:/ABSOLUTE/PATH"},
		{"x:/a/../b", "want SOURCE:/ABSOLUTE/PATH"},
		{"x:/a:999", "mode"},
	} {
		if _, err := parseFile(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseFile(%q): %v, want %q", tc.in, err, tc.want)
		}
	}
	spec := testSpec(t)
	spec.Ref = "pause" // no tag, no registry: what kubeadm looks up would never match
	if _, _, err := Build(spec); err == nil || !strings.Contains(err.Error(), `ref "pause"`) {
		t.Errorf("Build with ref %q: %v", spec.Ref, err)
	}
	if _, err := sourceDateEpoch(""); err == nil {
		t.Error("an unset SOURCE_DATE_EPOCH was accepted")
	}
}

// TestContainerdImportsTheArchive imports the archive into a real
// containerd (Debian's, started as a plain process with its own root and
// socket) and checks it lists the reference with the same digest.
func TestContainerdImportsTheArchive(t *testing.T) {
	containerd, err := exec.LookPath("containerd")
	if err != nil {
		t.Fatal("containerd is not installed (scripts/install-deps.sh installs it)")
	}
	if os.Geteuid() != 0 {
		t.Skip("containerd needs root")
	}
	dir := t.TempDir()
	archive := filepath.Join(dir, "pause.tar")
	digest, err := Write(context.Background(), testSpec(t), archive)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "containerd.sock")
	config := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock)), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var log bytes.Buffer
	daemon := exec.CommandContext(ctx, containerd, "--config", config)
	daemon.Stdout, daemon.Stderr = &log, &log
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = daemon.Wait() })
	ctr := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, "ctr", append([]string{"--address", sock, "--namespace", "k8s.io"}, args...)...).CombinedOutput()
		return string(out), err
	}
	for {
		if _, err := ctr("version"); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("containerd did not come up: %s", log.String())
		case <-time.After(200 * time.Millisecond):
		}
	}
	if out, err := ctr("images", "import", archive); err != nil {
		t.Fatalf("ctr images import: %v\n%s", err, out)
	}
	out, err := ctr("images", "ls")
	if err != nil {
		t.Fatalf("ctr images ls: %v\n%s", err, out)
	}
	var found bool
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) > 2 && fields[0] == "registry.k8s.io/pause:3.10.1" {
			found = true
			if !strings.Contains(line, digest) {
				t.Errorf("containerd lists %q, want digest %s", line, digest)
			}
		}
	}
	if !found {
		t.Fatalf("the reference is not listed after import:\n%s", out)
	}
}
