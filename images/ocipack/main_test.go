package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
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

// write1 writes spec's one image and returns its digest.
func write1(t *testing.T, spec Spec, out string) (string, error) {
	t.Helper()
	digests, err := Write(context.Background(), spec, out)
	if err != nil {
		return "", err
	}
	if len(digests) != 1 {
		t.Fatalf("%d digests for one image", len(digests))
	}
	return digests[0], nil
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
	da, err := write1(t, testSpec(t), a)
	if err != nil {
		t.Fatal(err)
	}
	db, err := write1(t, testSpec(t), b)
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
	if dl, _ := write1(t, later, filepath.Join(dir, "c.tar")); dl == da {
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

	// The layer: parent directories, then the file, all owned by root
	// with the epoch as mtime, and the file's bytes and mode intact.
	zr, err := gzip.NewReader(bytes.NewReader(files["blobs/sha256/"+manifest.Layers[0].Digest.Hex]))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(time.Unix(1700000000, 0)) {
			t.Errorf("layer %s: uid %d gid %d mtime %v, want root and the epoch", h.Name, h.Uid, h.Gid, h.ModTime)
		}
		if h.Name == "usr/local/bin/pause" {
			data, _ := io.ReadAll(tr)
			want, _ := os.ReadFile(testSpec(t).Files[0].Source)
			if !bytes.Equal(data, want) || h.Mode != 0o755 {
				t.Errorf("layer pause: mode %o, %q; want 0755 and the source's bytes", h.Mode, data)
			}
		}
	}
	if strings.Join(names, " ") != "usr/ usr/local/ usr/local/bin/ usr/local/bin/pause" {
		t.Errorf("layer entries %v", names)
	}
}

func TestCapabilityXattrMatchesSetcap(t *testing.T) {
	// What `setcap cap_net_bind_service=+ep FILE` stores, read back with
	// getxattr(FILE, "security.capability") on Debian bookworm.
	const setcap = "0100000200040000000000000000000000000000"
	got, err := capabilityXattr([]string{"cap_net_bind_service"})
	if err != nil || hex.EncodeToString(got) != setcap {
		t.Fatalf("capabilityXattr: %x, %v; want %s", got, err, setcap)
	}
	if _, err := capabilityXattr([]string{"cap_fly"}); err == nil || !strings.Contains(err.Error(), `"cap_fly"`) {
		t.Errorf("an unknown capability: %v", err)
	}
	files := []File{{Path: "/coredns"}}
	if err := applyCaps(files, []string{"/coredns=cap_net_bind_service"}); err != nil || len(files[0].Caps) != 1 {
		t.Fatalf("applyCaps: %v, %+v", err, files)
	}
	for _, bad := range []string{"/elsewhere=cap_net_bind_service", "/coredns", "/coredns=cap_fly"} {
		if err := applyCaps(files, []string{bad}); err == nil || !strings.Contains(err.Error(), "-cap") {
			t.Errorf("applyCaps(%q): %v, want an error naming -cap", bad, err)
		}
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
	for _, bad := range []string{"registry.k8s.io/kube-scheduler:v1.34.2", "=/usr/local/bin/x", "registry.k8s.io/x:1=", "registry.k8s.io/x:1=x"} {
		if _, err := parseVariant(bad); err == nil || !strings.Contains(err.Error(), "-also") {
			t.Errorf("parseVariant(%q): %v", bad, err)
		}
	}
	if v, err := parseVariant("registry.k8s.io/x:1=/x,--flag"); err != nil || !slices.Equal(v.Entrypoint, []string{"/x", "--flag"}) {
		t.Errorf("parseVariant: %+v, %v", v, err)
	}
	spec := testSpec(t)
	spec.Ref = "pause" // no tag, no registry: what kubeadm looks up would never match
	if _, err := Build(spec); err == nil || !strings.Contains(err.Error(), `ref "pause"`) {
		t.Errorf("Build with ref %q: %v", spec.Ref, err)
	}
	if _, err := sourceDateEpoch(""); err == nil {
		t.Error("an unset SOURCE_DATE_EPOCH was accepted")
	}
}

// containerd starts Debian's containerd as a plain process with its own
// root, state and socket, and returns a ctr runner for the k8s.io
// namespace (the one kubelet uses). It is stopped when the test ends.
func containerd(t *testing.T) func(args ...string) (string, error) {
	t.Helper()
	bin, err := exec.LookPath("containerd")
	if err != nil {
		t.Fatal("containerd is not installed (scripts/install-deps.sh installs it)")
	}
	if os.Geteuid() != 0 {
		t.Skip("containerd needs root")
	}
	dir := t.TempDir()
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
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	var log bytes.Buffer
	daemon := exec.CommandContext(ctx, bin, "--config", config)
	daemon.Stdout, daemon.Stderr = &log, &log
	if err := daemon.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = daemon.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = daemon.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cancel()
			<-done
		}
		cancel()
	})
	ctr := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, "ctr", append([]string{"--address", sock, "--namespace", "k8s.io"}, args...)...).CombinedOutput()
		return string(out), err
	}
	for {
		if _, err := ctr("version"); err == nil {
			return ctr
		}
		select {
		case <-ctx.Done():
			t.Fatalf("containerd did not come up: %s", log.String())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// TestContainerdImportsTheArchive imports the archive into a real
// containerd and checks it lists the reference with the same digest.
func TestContainerdImportsTheArchive(t *testing.T) {
	ctr := containerd(t)
	archive := filepath.Join(t.TempDir(), "pause.tar")
	digest, err := write1(t, testSpec(t), archive)
	if err != nil {
		t.Fatal(err)
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

// TestNonRootImageBindsALowPortThroughItsFileCapability runs images in a
// real containerd and runc, as CoreDNS's runs under kubeadm: as a non-root
// user, with no new privileges, binding port 53. That works only through
// the security.capability attribute ocipack puts in the layer, as
// upstream's image does with setcap; without it the bind is refused.
func TestNonRootImageBindsALowPortThroughItsFileCapability(t *testing.T) {
	if _, err := exec.LookPath("runc"); err != nil {
		t.Fatal("runc is not installed (scripts/install-deps.sh installs it)")
	}
	ctr := containerd(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte(`package main

import (
	"fmt"
	"net"
	"os"
)

func main() {
	l, err := net.Listen("tcp", ":53")
	if err != nil {
		fmt.Println("listen:", err)
		os.Exit(3)
	}
	l.Close()
	fmt.Printf("bound :53 as uid %d\n", os.Getuid())
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "binder")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, src)
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=mod")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	run := func(name string, caps []string) (string, error) {
		spec := Spec{
			Ref:        "registry.k8s.io/harmony-test/" + name + ":v1",
			Files:      []File{{Source: bin, Path: "/binder", Mode: 0o755, Caps: caps}},
			Entrypoint: []string{"/binder"},
			User:       "65532:65532",
			Env:        []string{defaultPath},
			Created:    time.Unix(1700000000, 0).UTC(),
		}
		archive := filepath.Join(dir, name+".tar")
		if _, err := Write(context.Background(), spec, archive); err != nil {
			t.Fatal(err)
		}
		if out, err := ctr("images", "import", archive); err != nil {
			t.Fatalf("ctr images import: %v\n%s", err, out)
		}
		// ctr run keeps no new privileges by default, as kubeadm's CoreDNS
		// Deployment (allowPrivilegeEscalation: false) does.
		return ctr("run", "--rm", spec.Ref, "harmony-test-"+name)
	}
	out, err := run("with-cap", []string{"cap_net_bind_service"})
	if err != nil || !strings.Contains(out, "bound :53 as uid 65532") {
		t.Fatalf("with the file capability: %v\n%s", err, out)
	}
	out, err = run("without-cap", nil)
	if err == nil || !strings.Contains(out, "permission denied") {
		t.Fatalf("without the file capability the bind should be refused (else this test proves nothing): %v\n%s", err, out)
	}
}

// Links, empty directories and the default arguments reach the layer and
// the config: a busybox image is one binary, its applets as links, and
// a /tmp anyone may write.
func TestLinksDirsAndCmd(t *testing.T) {
	spec := testSpec(t)
	spec.Links = []Link{{Path: "/bin/sh", Target: "/usr/local/bin/pause"}}
	spec.Dirs = []Dir{{Path: "/tmp", Mode: 0o1777}}
	spec.Cmd = []string{"pause"}
	images, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	img := images[0]
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Config.Cmd, []string{"pause"}) {
		t.Errorf("cmd %q", cfg.Config.Cmd)
	}
	layers, _ := img.Layers()
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	got := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name] = h
	}
	if h := got["bin/sh"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "/usr/local/bin/pause" {
		t.Errorf("bin/sh: %+v", h)
	}
	if h := got["bin/"]; h == nil || h.Typeflag != tar.TypeDir {
		t.Errorf("the link's parent directory: %+v", h)
	}
	if h := got["tmp/"]; h == nil || h.Typeflag != tar.TypeDir || h.Mode != 0o1777 {
		t.Errorf("tmp/: %+v", h)
	}

	spec.Links = append(spec.Links, Link{Path: "/tmp", Target: "x"})
	if _, err := Build(spec); err == nil || !strings.Contains(err.Error(), "/tmp: given twice") {
		t.Errorf("a path given twice: %v", err)
	}
}

// Images of one layer (the control plane's three, each running its name of
// one multi-call binary) share it: the archive holds the layer once, each
// image has its own entrypoint, and containerd imports all three with the
// digests Write returned.
func TestImagesOfOneLayerShareIt(t *testing.T) {
	spec := testSpec(t)
	spec.Ref, spec.Entrypoint = "registry.k8s.io/kube-apiserver:v1.34.2", []string{"/usr/local/bin/kube-apiserver"}
	spec.Also = []Variant{
		{Ref: "registry.k8s.io/kube-controller-manager:v1.34.2", Entrypoint: []string{"/usr/local/bin/kube-controller-manager"}},
		{Ref: "registry.k8s.io/kube-scheduler:v1.34.2", Entrypoint: []string{"/usr/local/bin/kube-scheduler"}},
	}
	archive := filepath.Join(t.TempDir(), "control-plane.tar")
	digests, err := Write(context.Background(), spec, archive)
	if err != nil {
		t.Fatal(err)
	}
	if len(digests) != 3 || digests[0] == digests[1] || digests[1] == digests[2] {
		t.Fatalf("digests %v: want three, each its own", digests)
	}
	files, order := entries(t, archive)
	var index v1.IndexManifest
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	layers := map[string]bool{}
	for i, want := range append([]Variant{{Ref: spec.Ref, Entrypoint: spec.Entrypoint}}, spec.Also...) {
		m := index.Manifests[i]
		if m.Digest.String() != digests[i] || m.Annotations["io.containerd.image.name"] != want.Ref {
			t.Fatalf("index entry %d: %s %v, want %s %s", i, m.Digest, m.Annotations, digests[i], want.Ref)
		}
		manifest, err := v1.ParseManifest(bytes.NewReader(files["blobs/sha256/"+m.Digest.Hex]))
		if err != nil {
			t.Fatal(err)
		}
		var cfg v1.ConfigFile
		if err := json.Unmarshal(files["blobs/sha256/"+manifest.Config.Digest.Hex], &cfg); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(cfg.Config.Entrypoint, want.Entrypoint) {
			t.Errorf("%s: entrypoint %v, want %v", want.Ref, cfg.Config.Entrypoint, want.Entrypoint)
		}
		for _, l := range manifest.Layers {
			layers[l.Digest.Hex] = true
		}
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers among the three images, want the one they share", len(layers))
	}
	// oci-layout, index.json, two directories; then three configs, the
	// layer and three manifests, each once.
	if len(order) != 4+3+1+3 {
		t.Errorf("archive entries %v: a blob is there twice or missing", order)
	}

	ctr := containerd(t)
	if out, err := ctr("images", "import", archive); err != nil {
		t.Fatalf("ctr images import: %v\n%s", err, out)
	}
	out, err := ctr("images", "ls")
	if err != nil {
		t.Fatalf("ctr images ls: %v\n%s", err, out)
	}
	for i, ref := range []string{spec.Ref, spec.Also[0].Ref, spec.Also[1].Ref} {
		if !slices.ContainsFunc(strings.Split(out, "\n"), func(line string) bool {
			return strings.HasPrefix(line, ref+" ") && strings.Contains(line, digests[i])
		}) {
			t.Errorf("containerd does not list %s at %s:\n%s", ref, digests[i], out)
		}
	}

	spec.Also = append(spec.Also, Variant{Ref: spec.Ref, Entrypoint: []string{"/x"}})
	if _, err := Build(spec); err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Errorf("a reference given twice: %v", err)
	}
}
