package kubeproxy

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/harmonykaas/harmony/agent/components/kubeadm"
	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/agent/service/servicetest"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

func testRole(role v1.NodeRole, mode string) *v1.Role {
	return &v1.Role{NodeName: "w1", Role: role,
		Cluster: v1.ClusterSettings{Name: "demo", PodCIDR: "198.19.0.0/17", KubeProxyMode: mode}}
}

// testHost is a node root with the kube-proxy binary (a placeholder: the
// recorder runs nothing) and, when ipvs, the kernel's IPVS file.
func testHost(t *testing.T, ipvs bool) (*reconcile.Host, *servicetest.Recorder, Config) {
	t.Helper()
	root := t.TempDir()
	bin := filepath.Join(root, "usr/bin/kube-proxy")
	write(t, bin, "#!/bin/sh\nexit 1\n", 0o755)
	if ipvs {
		write(t, filepath.Join(root, ipvsFile), "", 0o444)
	}
	rec := servicetest.New()
	return &reconcile.Host{Root: root, Services: rec}, rec, Config{Binary: bin, HealthURL: "http://127.0.0.1:1/healthz"}
}

func write(t *testing.T, path, data string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
}

func readConfig(t *testing.T, host *reconcile.Host) configuration {
	t.Helper()
	data, err := os.ReadFile(host.Path(ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	var cfg configuration
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Before kubeadm has given the node its credential, the configuration is
// written and nothing runs; once it is there kube-proxy runs as the node
// with that configuration.
func TestReconcileWaitsForTheNodeCredential(t *testing.T) {
	host, rec, cfg := testHost(t, false)
	c := New(cfg)
	ctx := context.Background()
	st := c.Reconcile(ctx, host, testRole(v1.RoleWorker, v1.KubeProxyIPTables))
	if st.Phase != reconcile.PhaseConverged || st.Healthy || !strings.Contains(st.Message, "waiting for the kubelet's credential") {
		t.Fatalf("status %+v", st)
	}
	if _, ok := rec.Unit(Name); ok {
		t.Fatal("kube-proxy was started without the node's credential")
	}
	got := readConfig(t, host)
	if got.Mode != v1.KubeProxyIPTables || got.HostnameOverride != "w1" || got.ClusterCIDR != "198.19.0.0/17" ||
		got.ClientConnection.Kubeconfig != host.Path(kubeadm.KubeletKubeconfig) || !slices.Equal(got.NodePortAddresses, []string{"primary"}) {
		t.Errorf("configuration %+v", got)
	}

	write(t, host.Path(kubeadm.KubeletKubeconfig), "placeholder", 0o600)
	st = c.Reconcile(ctx, host, testRole(v1.RoleWorker, v1.KubeProxyIPTables))
	u, ok := rec.Unit(Name)
	if !ok {
		t.Fatalf("kube-proxy not started: %+v", st)
	}
	if !slices.Equal(u.Command, []string{cfg.Binary, "--config=" + host.Path(ConfigFile)}) {
		t.Errorf("command %q", u.Command)
	}
	// The recorder's unit runs; its health endpoint does not answer.
	if st.Phase != reconcile.PhaseConverged || st.Healthy || !strings.Contains(st.Message, "not synced") {
		t.Errorf("status %+v", st)
	}
}

// Healthy means kube-proxy's own health endpoint says its rules are
// synced.
func TestReconcileHealthyWhenSynced(t *testing.T) {
	host, _, cfg := testHost(t, true)
	synced := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !synced {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	cfg.HealthURL = srv.URL + "/healthz"
	write(t, host.Path(kubeadm.KubeletKubeconfig), "placeholder", 0o600)
	c := New(cfg)
	st := c.Reconcile(context.Background(), host, testRole(v1.RoleMaster, ""))
	if !st.Healthy || st.Message != "mode ipvs" {
		t.Errorf("synced: %+v", st)
	}
	synced = false
	if st := c.Reconcile(context.Background(), host, testRole(v1.RoleMaster, "")); st.Healthy || !strings.Contains(st.Message, "503") {
		t.Errorf("not synced: %+v", st)
	}
}

// IPVS, the default, needs the kernel's IPVS: without it the component
// refuses the role for good (no retry gives the image's kernel IPVS), says
// what to change, and starts nothing.
func TestIPVSNeedsTheKernel(t *testing.T) {
	host, rec, cfg := testHost(t, false)
	write(t, host.Path(kubeadm.KubeletKubeconfig), "placeholder", 0o600)
	st := New(cfg).Reconcile(context.Background(), host, testRole(v1.RoleWorker, ""))
	if st.Phase != reconcile.PhaseRefused || !strings.Contains(st.Message, "network.kubeProxyMode") || !strings.Contains(st.Message, ipvsFile) {
		t.Errorf("status %+v", st)
	}
	if _, ok := rec.Unit(Name); ok {
		t.Error("kube-proxy started without IPVS")
	}
}

// A role kube-proxy cannot serve is refused by field, and nothing is
// written.
func TestRefusals(t *testing.T) {
	for name, tc := range map[string]struct {
		edit  func(*v1.Role)
		field string
	}{
		"no node name": {func(r *v1.Role) { r.NodeName = "" }, "nodeName"},
		"unknown mode": {func(r *v1.Role) { r.Cluster.KubeProxyMode = "userspace" }, "cluster.kubeProxyMode"},
		"bad pod CIDR": {func(r *v1.Role) { r.Cluster.PodCIDR = "198.19.0.1/17" }, "cluster.podCIDR"},
	} {
		t.Run(name, func(t *testing.T) {
			host, _, cfg := testHost(t, true)
			role := testRole(v1.RoleWorker, v1.KubeProxyIPTables)
			tc.edit(role)
			st := New(cfg).Reconcile(context.Background(), host, role)
			if st.Phase != reconcile.PhaseFailed || !strings.HasPrefix(st.Message, tc.field+":") {
				t.Errorf("status %+v, want a failure naming %s", st, tc.field)
			}
			if _, err := os.Stat(host.Path(ConfigFile)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("configuration written for a refused role: %v", err)
			}
		})
	}
}

// The appliance runs no Kubernetes node.
func TestApplianceRunsNothing(t *testing.T) {
	host, rec, cfg := testHost(t, true)
	st := New(cfg).Reconcile(context.Background(), host, testRole(v1.RoleAppliance, ""))
	if !st.Healthy || len(rec.TakeCalls()) != 0 {
		t.Errorf("status %+v", st)
	}
}

// kube-proxy raises nf_conntrack_max only where the node may write it;
// a node in a network namespace of its own may not, and kube-proxy would
// exit on the attempt.
func TestConntrackMaxLeftToAHostThatOwnsIt(t *testing.T) {
	host, _, _ := testHost(t, true)
	p := params{node: "w1", mode: v1.KubeProxyIPTables}
	data, err := render(host, p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "maxPerCore: 0") {
		t.Errorf("no writable nf_conntrack_max, yet kube-proxy may set it:\n%s", data)
	}
	write(t, host.Path(conntrackMaxFile), "262144\n", 0o644)
	if data, err = render(host, p); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "maxPerCore") {
		t.Errorf("writable nf_conntrack_max, yet kube-proxy's default is overridden:\n%s", data)
	}
}

// The real kube-proxy (HARMONY_K8S_BIN) accepts what render writes, with
// strict decoding and its own validation: --cleanup loads and validates
// the configuration, then only removes rules, here in a network
// namespace of its own. A misspelt field, which kube-proxy would merely
// log and ignore, is caught as well.
func TestKubeProxyAcceptsTheConfiguration(t *testing.T) {
	dir := os.Getenv("HARMONY_K8S_BIN")
	if dir == "" {
		t.Fatal("HARMONY_K8S_BIN is unset: run make kubernetes (this test runs the real kube-proxy), or make unit")
	}
	bin := filepath.Join(dir, "kube-proxy")
	run := func(data []byte) (string, error) {
		path := filepath.Join(t.TempDir(), "config.yaml")
		write(t, path, string(data), 0o644)
		cmd := exec.Command(bin, "--config="+path, "--cleanup")
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
		out, err := cmd.CombinedOutput()
		if err == nil && strings.Contains(string(out), "strict decoding failed") {
			err = errors.New("not strictly decoded")
		}
		return string(out), err
	}
	host, _, _ := testHost(t, true)
	for _, mode := range v1.KubeProxyModes {
		data, err := render(host, params{node: "w1", mode: mode, clusterCIDR: "198.19.0.0/17"})
		if err != nil {
			t.Fatal(err)
		}
		if mode == v1.KubeProxyIPVS {
			// The cleanup of IPVS rules needs the kernel's IPVS, which
			// this machine lacks; the configuration is the same but for
			// its mode.
			data = []byte(strings.Replace(string(data), "mode: ipvs", "mode: iptables", 1))
		}
		if out, err := run(data); err != nil {
			t.Errorf("mode %s: kube-proxy refused the configuration: %v\n%s\n%s", mode, err, data, out)
		}
	}
	bad, _ := render(host, params{node: "w1", mode: v1.KubeProxyIPTables})
	bad = []byte(strings.Replace(string(bad), "nodePortAddresses", "nodePortAdresses", 1))
	if _, err := run(bad); err == nil {
		t.Error("a misspelt field passed")
	}
	if err := check(writeTemp(t, bad)); err == nil {
		t.Error("the component's own check passed a misspelt field")
	}
}

func writeTemp(t *testing.T, data []byte) string {
	path := filepath.Join(t.TempDir(), "config.yaml")
	write(t, path, string(data), 0o644)
	return path
}

// On a master, nodes get kube-proxy's access through admin.conf; until
// that grant succeeds the node is not healthy and says why, and the next
// pass tries again.
func TestGrantFailureIsReported(t *testing.T) {
	host, _, cfg := testHost(t, true)
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	cfg.HealthURL = srv.URL + "/healthz"
	write(t, host.Path(kubeadm.KubeletKubeconfig), "placeholder", 0o600)
	write(t, host.Path(kubeadm.AdminKubeconfig), "not a kubeconfig", 0o600)
	c := New(cfg)
	for range 2 {
		st := c.Reconcile(context.Background(), host, testRole(v1.RoleMaster, ""))
		if st.Healthy || !strings.Contains(st.Message, "not granted kube-proxy's access") || !strings.Contains(st.Message, kubeadm.AdminKubeconfig) {
			t.Errorf("status %+v", st)
		}
	}
}
