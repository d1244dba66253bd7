//go:build linux

package cni

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/agent/components/cni/contiv"
	"github.com/harmonykaas/harmony/agent/pki"
	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/agent/service"
	"github.com/harmonykaas/harmony/agent/service/servicetest"
	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/testutil"
)

const etcdBinary = "/usr/bin/etcd"

// The node's address inside the test's network namespace.
const nodeAddr = "198.18.77.11"

// standInSource is a WIRING stand-in, not Contiv: Contiv's binaries are
// not packaged in Debian and cannot be fetched here. Installed as
// netplugin, netmaster and contivk8s, it records each start (its PID and
// argv, in <argv0>.starts) and waits to be stopped, which proves how the
// component runs the units: the argv, and a restart when a file they read
// changes. Nothing here exercises Contiv itself.
const standInSource = `package main

import (
	"encoding/json"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	f, err := os.OpenFile(os.Args[0]+".starts", os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		os.Exit(2)
	}
	json.NewEncoder(f).Encode(map[string]any{"pid": os.Getpid(), "argv": os.Args})
	f.Close()
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
`

type start struct {
	PID  int      `json:"pid"`
	Argv []string `json:"argv"`
}

// buildStandIns compiles the wiring stand-in into dir under the names of
// Contiv's binaries.
func buildStandIns(t *testing.T, dir string) contiv.Config {
	t.Helper()
	src := filepath.Join(t.TempDir(), "main.go")
	if err := os.WriteFile(src, []byte(standInSource), 0o644); err != nil {
		t.Fatal(err)
	}
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		if gobin, err = exec.LookPath("go"); err != nil {
			t.Fatalf("no go toolchain to build the stand-in: %v", err)
		}
	}
	cfg := contiv.Config{EtcdBinary: etcdBinary}
	for _, name := range []string{"netplugin", "netmaster", "contivk8s"} {
		out := filepath.Join(dir, name)
		cmd := exec.Command(gobin, "build", "-o", out, src)
		// Outside any module: the stand-in needs the standard library alone.
		cmd.Dir = filepath.Dir(src)
		cmd.Env = append(os.Environ(), "GOFLAGS=", "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build stand-in %s: %v: %s", name, err, b)
		}
		switch name {
		case "netplugin":
			cfg.NetpluginBinary = out
		case "netmaster":
			cfg.NetmasterBinary = out
		case "contivk8s":
			cfg.CNIBinary = out
		}
	}
	return cfg
}

func starts(t *testing.T, binary string) []start {
	t.Helper()
	f, err := os.Open(binary + ".starts")
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []start
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var s start
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// netns makes a network namespace with lo up and nodeAddr on one end of
// a veth pair.
func netns(t *testing.T) (name, ipPath string) {
	t.Helper()
	ipPath, err := exec.LookPath("ip")
	if err != nil {
		t.Fatalf("no ip command: %v", err)
	}
	name = testutil.VethNetns(t, "cni")
	testutil.IP(t, "-n", name, "addr", "add", nodeAddr+"/24", "dev", "eth0")
	return name, ipPath
}

// startEtcd runs the real etcd from Debian in ns as the cluster's
// agent-managed member would run: TLS with client certificates on the
// client and peer ports, and the v2 API on, which Contiv needs.
func startEtcd(t *testing.T, ns, ipPath string, ca *pki.CA, dir string) {
	t.Helper()
	server := pki.Leaf{CommonName: "m1", IPs: []net.IP{net.ParseIP(nodeAddr)},
		Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	crt, key, caFile := filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key"), filepath.Join(dir, "ca.crt")
	if _, err := ca.Ensure(crt, key, server); err != nil {
		t.Fatal(err)
	}
	if _, err := ca.WriteCACert(caFile, nil); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(ipPath, "netns", "exec", ns, etcdBinary,
		"--name", "m1", "--data-dir", filepath.Join(dir, "data"), "--enable-v2",
		"--listen-client-urls", "https://"+nodeAddr+":2379", "--advertise-client-urls", "https://"+nodeAddr+":2379",
		"--listen-peer-urls", "https://"+nodeAddr+":2380", "--initial-advertise-peer-urls", "https://"+nodeAddr+":2380",
		"--initial-cluster", "m1=https://"+nodeAddr+":2380",
		"--cert-file", crt, "--key-file", key, "--client-cert-auth", "--trusted-ca-file", caFile,
		"--peer-cert-file", crt, "--peer-key-file", key, "--peer-client-cert-auth", "--peer-trusted-ca-file", caFile)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("etcd log:\n%s", b)
		}
	})
}

// etcdctl runs etcdctl in ns.
func etcdctl(ns, ipPath, api string, args ...string) (string, error) {
	cmd := exec.Command(ipPath, append([]string{"netns", "exec", ns, "etcdctl"}, args...)...)
	cmd.Env = append(os.Environ(), "ETCDCTL_API="+api)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// A WIRING test: the real process supervisor runs the units in a network
// namespace. contiv-etcd-proxy is the real etcd from Debian in v2 proxy
// mode, against a real etcd member with TLS client authentication, using
// the certificate the component issued; netplugin and netmaster are the
// stand-in above (Contiv cannot run here), and the netmaster REST API is
// the in-memory stand-in of helpers_test.go.
func TestWiringWithSupervisor(t *testing.T) {
	if testing.Short() {
		t.Skip("runs etcd and builds a stand-in")
	}
	if _, err := os.Stat(etcdBinary); err != nil {
		t.Fatalf("etcd is not installed (scripts/install-deps.sh installs it): %v", err)
	}
	ctx := context.Background()
	ns, ipPath := netns(t)

	p := testPKI(t)
	etcdCA, err := pki.LoadCA(p.EtcdCA)
	if err != nil {
		t.Fatal(err)
	}
	etcdDir := t.TempDir()
	startEtcd(t, ns, ipPath, etcdCA, etcdDir)

	root := t.TempDir()
	sup := servicetest.Supervisor(t, root, service.SupervisorConfig{
		Wrap: func(argv []string) []string { return append([]string{ipPath, "netns", "exec", ns}, argv...) },
	}, contiv.EtcdProxyUnit, contiv.NetmasterUnit, contiv.NetpluginUnit)

	cfg := buildStandIns(t, t.TempDir())
	nm, port := newStandInNetmasterAPI(t)
	cfg.NetmasterPort = port
	c := New(Config{Contiv: cfg, RequireDaemons: true})
	host := &reconcile.Host{Root: root, Services: sup}

	role := &v1.Role{
		APIVersion: v1.APIVersion, Kind: "Role", NodeName: "m1", Revision: 1, Role: v1.RoleMaster,
		Cluster: v1.ClusterSettings{Name: "demo", PodCIDR: "198.19.0.0/17", ServiceCIDR: "198.19.128.0/20",
			CNI: v1.CNISettings{Type: "contiv", Contiv: &v1.ContivSettings{Mode: "vxlan", VNI: 4096}}},
		Addresses: v1.NodeAddresses{IPs: []string{nodeAddr}},
		Peers:     []v1.Peer{{Name: "m1", Role: v1.RoleMaster, Address: nodeAddr}},
		PKI:       p,
	}
	if err := role.Validate(); err != nil {
		t.Fatal(err)
	}

	st := c.Reconcile(ctx, host, role)
	if st.Phase != reconcile.PhaseConverged || !st.Healthy ||
		!slices.Equal(st.Units, []string{contiv.EtcdProxyUnit, contiv.NetmasterUnit, contiv.NetpluginUnit}) {
		t.Fatalf("first pass %+v", st)
	}
	for _, u := range st.Units {
		if !slices.Contains(st.Actions, "started "+u) {
			t.Errorf("actions %q lack started %s", st.Actions, u)
		}
	}
	if n := nm.object(t, "/api/v1/networks/default:default-net/"); n["subnet"] != "198.19.0.0/17" {
		t.Errorf("netmaster holds %v", n)
	}

	// Contiv's store, as netplugin would use it: a v2 write to the local
	// proxy lands in the TLS-only member, through the proxy's issued
	// client certificate.
	proxyURL := "http://127.0.0.1:6666"
	// --no-sync: etcdctl would otherwise ask the proxy for the members and
	// go to them directly; Contiv's client does not.
	testutil.Eventually(t, 60*time.Second, "a v2 write through the proxy", func() bool {
		_, err := etcdctl(ns, ipPath, "2", "--endpoints", proxyURL, "--no-sync", "set", "/contiv.io/probe", "through-the-proxy")
		return err == nil
	}, func() {
		out, err := etcdctl(ns, ipPath, "2", "--endpoints", proxyURL, "--no-sync", "set", "/contiv.io/probe", "through-the-proxy")
		t.Logf("last try: %v: %s", err, out)
	})
	got, err := etcdctl(ns, ipPath, "2", "--endpoints", "https://"+nodeAddr+":2379",
		"--ca-file", filepath.Join(etcdDir, "ca.crt"), "--cert-file", filepath.Join(etcdDir, "server.crt"),
		"--key-file", filepath.Join(etcdDir, "server.key"), "get", "/contiv.io/probe")
	if err != nil || got != "through-the-proxy" {
		t.Errorf("read back from the member: %q, %v", got, err)
	}
	// The proxy serves v2 only: the v3 keyspace (Kubernetes') is out of
	// its reach.
	if out, err := etcdctl(ns, ipPath, "3", "--endpoints", proxyURL, "--dial-timeout", "3s", "--command-timeout", "5s",
		"put", "/registry/probe", "x"); err == nil {
		t.Errorf("a v3 write through the proxy succeeded: %s", out)
	}

	// The stand-ins ran once each, with the rendered argv.
	plugins := starts(t, cfg.NetpluginBinary)
	masters := starts(t, cfg.NetmasterBinary)
	if len(plugins) != 1 || len(masters) != 1 {
		t.Fatalf("starts: netplugin %d, netmaster %d", len(plugins), len(masters))
	}
	want := []string{cfg.NetpluginBinary, "--mode", "kubernetes", "--netmode", "vxlan", "--fwdmode", "routing",
		"--etcd-endpoints", proxyURL, "--vtep-ip", nodeAddr, "--ctrl-ip", nodeAddr, "--host", "m1", "--vxlan-port", "4789"}
	if !slices.Equal(plugins[0].Argv, want) {
		t.Errorf("netplugin argv\n%q\nwant\n%q", plugins[0].Argv, want)
	}
	proxyBefore, err := sup.State(ctx, contiv.EtcdProxyUnit)
	if err != nil || !proxyBefore.Running {
		t.Fatalf("proxy %+v, %v", proxyBefore, err)
	}

	// Same role: no action, no new process.
	if st := c.Reconcile(ctx, host, role); len(st.Actions) != 0 || !st.Healthy {
		t.Errorf("second pass %+v", st)
	}
	if n := len(starts(t, cfg.NetpluginBinary)); n != 1 {
		t.Errorf("netplugin started %d times after an idle pass", n)
	}

	// contiv.json changes: netplugin and netmaster restart and so read it;
	// the proxy, which does not read it, keeps its process.
	role.Cluster.ServiceCIDR = "198.19.144.0/20"
	st = c.Reconcile(ctx, host, role)
	if !slices.Equal(st.Actions, []string{"wrote " + contiv.K8sConfigPath, "reloaded contiv-netmaster", "reloaded contiv-netplugin"}) || !st.Healthy {
		t.Errorf("service CIDR pass %+v", st)
	}
	testutil.Eventually(t, 30*time.Second, "netplugin's second start", func() bool {
		return len(starts(t, cfg.NetpluginBinary)) == 2 && len(starts(t, cfg.NetmasterBinary)) == 2
	})
	if s := starts(t, cfg.NetpluginBinary); s[1].PID == s[0].PID {
		t.Errorf("netplugin kept pid %d", s[0].PID)
	}
	proxyAfter, err := sup.State(ctx, contiv.EtcdProxyUnit)
	if err != nil || proxyAfter.PID != proxyBefore.PID || proxyAfter.Restarts != proxyBefore.Restarts {
		t.Errorf("proxy %+v, before %+v, %v", proxyAfter, proxyBefore, err)
	}
}
