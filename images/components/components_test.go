package components

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestThePinFileLoadsAndAgreesWithTheToolModules(t *testing.T) {
	pins, err := Load("../components.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The modules the binaries are built from pin the same versions.
	require := regexp.MustCompile(`(?m)^(?:require\s+|\t)k8s\.io/kubernetes (v\S+)`)
	for i, k := range pins.Kubernetes {
		gomod, err := os.ReadFile(filepath.Join("..", "..", k.Module, "go.mod"))
		if err != nil {
			t.Fatalf("kubernetes[%d].module: %v", i, err)
		}
		m := require.FindSubmatch(gomod)
		if m == nil || string(m[1]) != k.Version {
			t.Errorf("kubernetes[%d]: %s/go.mod requires k8s.io/kubernetes %q, the pin file says %s", i, k.Module, m, k.Version)
		}
		minor := strings.TrimPrefix(k.Version, "v1.")
		for _, line := range regexp.MustCompile(`(?m)^\s+(k8s\.io/[a-z-]+) => k8s\.io/[a-z-]+ (v\S+)$`).FindAllSubmatch(gomod, -1) {
			if string(line[2]) != "v0."+minor {
				t.Errorf("%s/go.mod replaces %s with %s, want v0.%s", k.Module, line[1], line[2], minor)
			}
		}
	}
	for i, b := range pins.Binaries {
		gomod, err := os.ReadFile(filepath.Join("..", "..", b.Tools, "go.mod"))
		if err != nil {
			t.Fatalf("binaries[%d].tools: %v", i, err)
		}
		req := regexp.MustCompile(`(?m)^(?:require\s+|\t)` + regexp.QuoteMeta(b.Module) + ` (v\S+)`).FindSubmatch(gomod)
		if req == nil || string(req[1]) != b.Version {
			t.Errorf("binaries[%d]: %s/go.mod requires %s %q, the pin file says %s", i, b.Tools, b.Module, req, b.Version)
		}
	}
	if got := pins.BinariesFor(RoleNode); len(got) == 0 || got[0].Name != "flanneld" {
		t.Errorf("node binaries %v: want flanneld", got)
	}
	if got := pins.PackagesFor(RoleControlPlane); len(got) == 0 || len(got) >= len(pins.Debian.Packages) {
		t.Errorf("control-plane packages %v: want a strict subset of the node's", got)
	}
	for _, pkg := range pins.PackagesFor(RoleControlPlane) {
		if pkg.Name == "containerd" {
			t.Error("the control-plane appliance carries no container runtime")
		}
	}
}

func TestParseRefusesBadPins(t *testing.T) {
	good, err := os.ReadFile("../components.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct{ old, new, want string }{
		"unknown field":        {"suite: bookworm", "suite: bookworm\n  colour: blue", "colour"},
		"loose version":        {`version: "2.6.12-1+deb12u4"`, `version: "latest"`, "debian.packages[3].version"},
		"bad role":             {"roles: [node]}", "roles: [worker]}", `"worker"`},
		"mirror not a URL":     {"mirror: http://deb.debian.org/debian", "mirror: deb.debian.org", "debian.mirror"},
		"not n-1":              {"version: v1.33.4", "version: v1.32.4", "kubernetes[1].version v1.32.4: want minor 33"},
		"bad sha256":           {"kubeadm: 6a2346006132f6e1ed0b5248e518098cf5abbce25bf11b8926fb1073091b83f4", "kubeadm: abc", "kubernetes[0].release.sha256.kubeadm"},
		"http release":         {"url: https://dl.k8s.io/release/v1.34.2", "url: http://dl.k8s.io/release/v1.34.2", "kubernetes[0].release.url"},
		"image without tag":    {`ref: "registry.k8s.io/pause:3.10.1"`, `ref: "registry.k8s.io/pause"`, "images[7].ref"},
		"duplicate package":    {"name: etcd-client", "name: etcd-server", `debian.packages[1].name "etcd-server": listed twice`},
		"module outside tools": {"module: tools/kubernetes-previous", "module: ../elsewhere", "kubernetes[1].module"},
		"binary elsewhere":     {"path: /usr/local/bin/flanneld", "path: /etc/flanneld", "binaries[0].path"},
		"binary version":       {"version: v0.28.10", "version: main", "binaries[0].version"},
		"binary tools":         {"tools: tools/flannel", "tools: /tmp/flannel", "binaries[0].tools"},
	} {
		t.Run(name, func(t *testing.T) {
			bad := strings.Replace(string(good), tc.old, tc.new, 1)
			if bad == string(good) {
				t.Fatalf("the test's edit %q matched nothing", tc.old)
			}
			_, err := Parse([]byte(bad))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one naming %q", err, tc.want)
			}
		})
	}
}

func TestImageManifestRoundTripAndRefusals(t *testing.T) {
	m := &ImageManifest{
		Role: RoleNode, Version: "v0.1.0", Built: "2026-11-22T00:00:00Z",
		Components:      []Component{{Name: "kubernetes", Version: "v1.34.2", Source: "module"}},
		ContainerImages: []ContainerImage{{Ref: "registry.k8s.io/pause:3.10.1", Digest: "sha256:" + strings.Repeat("ab", 32)}},
	}
	data, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeImageManifest(data)
	if err != nil {
		t.Fatal(err)
	}
	if back.Components[0] != m.Components[0] || back.ContainerImages[0] != m.ContainerImages[0] || back.Built != m.Built {
		t.Fatalf("round trip: %+v", back)
	}
	for name, tc := range map[string]struct{ doc, want string }{
		"unknown field": {`{"role":"node","version":"1","built":"2026-11-22T00:00:00Z","components":[],"extra":1}`, "extra"},
		"bad role":      {`{"role":"worker","version":"1","built":"2026-11-22T00:00:00Z","components":[]}`, `role "worker"`},
		"bad time":      {`{"role":"node","version":"1","built":"yesterday","components":[]}`, `built "yesterday"`},
		"bad digest":    {`{"role":"node","version":"1","built":"2026-11-22T00:00:00Z","components":[],"containerImages":[{"ref":"registry.k8s.io/pause:3.10.1","digest":"md5:1"}]}`, "containerImages[0].digest"},
		"dup component": {`{"role":"node","version":"1","built":"2026-11-22T00:00:00Z","components":[{"name":"a","version":"1","source":""},{"name":"a","version":"2","source":""}]}`, `components[1].name "a": listed twice`},
		"two documents": {`{"role":"node","version":"1","built":"2026-11-22T00:00:00Z","components":[]} {}`, "trailing data"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeImageManifest([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one naming %q", err, tc.want)
			}
		})
	}
}

func TestLoadBundleChecksItsFiles(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "kubernetes", "v1.34.2"), 0o755))
	must(os.MkdirAll(filepath.Join(dir, "images"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "kubernetes", "v1.34.2", "kubeadm"), []byte("x"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "images", "pause.tar"), []byte("x"), 0o644))
	doc := `{"kubernetes":[{"version":"v1.34.2","binaries":["kubeadm"],"source":"module"}],
	 "images":[{"ref":"registry.k8s.io/pause:3.10.1","digest":"sha256:` + strings.Repeat("0", 64) + `","file":"pause.tar"}],
	 "components":[{"name":"pause","version":"3.10.1","source":"pause.c"}]}`
	must(os.WriteFile(filepath.Join(dir, "bundle.json"), []byte(doc), 0o644))
	if _, err := LoadBundle(dir); err != nil {
		t.Fatalf("a complete bundle: %v", err)
	}
	must(os.Remove(filepath.Join(dir, "images", "pause.tar")))
	if _, err := LoadBundle(dir); err == nil || !strings.Contains(err.Error(), "images[0].file") {
		t.Fatalf("a bundle missing an image file: err %v", err)
	}
}

// A multi-call version: each binary a link to the one file beside it, and
// nothing else accepted.
func TestLoadBundleChecksAMulticallVersion(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	vdir := filepath.Join(dir, "kubernetes", "v1.34.2")
	must(os.MkdirAll(vdir, 0o755))
	must(os.WriteFile(filepath.Join(vdir, "kube"), []byte("x"), 0o755))
	must(os.Symlink("kube", filepath.Join(vdir, "kubeadm")))
	must(os.Symlink("kube", filepath.Join(vdir, "kubelet")))
	doc := `{"kubernetes":[{"version":"v1.34.2","binaries":["kubeadm","kubelet"],"multicall":"kube","source":"module"}],
	 "images":[], "components":[]}`
	must(os.WriteFile(filepath.Join(dir, "bundle.json"), []byte(doc), 0o644))
	if _, err := LoadBundle(dir); err != nil {
		t.Fatalf("a complete multi-call bundle: %v", err)
	}
	for name, attack := range map[string]func(){
		"a link elsewhere": func() {
			must(os.Remove(filepath.Join(vdir, "kubelet")))
			must(os.Symlink("/usr/bin/true", filepath.Join(vdir, "kubelet")))
		},
		"a copy instead of a link": func() {
			must(os.Remove(filepath.Join(vdir, "kubelet")))
			must(os.WriteFile(filepath.Join(vdir, "kubelet"), []byte("x"), 0o755))
		},
		"the multi-call binary a link": func() {
			must(os.Rename(filepath.Join(vdir, "kube"), filepath.Join(vdir, "kube.real")))
			must(os.Symlink("kube.real", filepath.Join(vdir, "kube")))
		},
	} {
		t.Run(name, func(t *testing.T) {
			attack()
			if _, err := LoadBundle(dir); err == nil || !strings.Contains(err.Error(), "kubernetes[0]") {
				t.Fatalf("err %v, want one naming kubernetes[0]", err)
			}
		})
		// Back to the good bundle.
		for _, f := range []string{"kube", "kube.real", "kubelet"} {
			os.Remove(filepath.Join(vdir, f))
		}
		must(os.WriteFile(filepath.Join(vdir, "kube"), []byte("x"), 0o755))
		must(os.Symlink("kube", filepath.Join(vdir, "kubelet")))
	}
}
