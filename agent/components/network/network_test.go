//go:build linux

package network

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/vishvananda/netns"

	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/agent/service/servicetest"
	v1 "github.com/harmonykaas/harmony/api/v1"
	harmonytest "github.com/harmonykaas/harmony/internal/testutil"
)

// testNetns makes a network namespace like a lab host's: eth0 with
// 198.18.50.2/24, the end of a veth pair whose other end, eth1, is in the
// same namespace. Both are up.
func testNetns(t *testing.T) string {
	t.Helper()
	ns := harmonytest.VethNetns(t, "net")
	harmonytest.IP(t, "-n", ns, "addr", "add", "198.18.50.2/24", "dev", "eth0")
	// Start from the kernel's defaults, whatever the host has.
	run(t, "ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.ip_forward=0", "net.ipv4.ip_nonlocal_bind=0")
	return ns
}

func run(t *testing.T, argv ...string) string {
	t.Helper()
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(argv, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// sysctlIn reads a sysctl as a process in ns sees it.
func sysctlIn(t *testing.T, ns, name string) string {
	t.Helper()
	return run(t, "ip", "netns", "exec", ns, "sysctl", "-n", name)
}

// reconcileIn runs one pass on a goroutine whose thread is locked into
// ns, as the agent's own thread is in its namespace. The thread is never
// unlocked, so Go discards it afterwards.
func reconcileIn(t *testing.T, ns string, c *Component, host *reconcile.Host, role *v1.Role) reconcile.Status {
	t.Helper()
	ch := make(chan reconcile.Status)
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		h, err := netns.GetFromName(ns)
		if err == nil {
			err = netns.Set(h)
			h.Close()
		}
		if err != nil {
			errc <- err
			return
		}
		ch <- c.Reconcile(context.Background(), host, role)
	}()
	select {
	case err := <-errc:
		t.Fatal(err)
		return reconcile.Status{}
	case st := <-ch:
		return st
	}
}

func newHost(t *testing.T, iface string) *reconcile.Host {
	return &reconcile.Host{Root: t.TempDir(), Services: servicetest.New(),
		Facts: reconcile.Facts{Interface: iface}, Log: slog.New(slog.DiscardHandler)}
}

func role(r v1.NodeRole, vip string) *v1.Role {
	return &v1.Role{APIVersion: v1.APIVersion, Kind: "Role", NodeName: "n1", Role: r, Revision: 1,
		Cluster: v1.ClusterSettings{Name: "demo", VIP: vip}}
}

func hostSysctl(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc/sys", strings.ReplaceAll(name, ".", "/")))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestMasterSysctlsAreSetInTheNodesNamespaceOnce(t *testing.T) {
	ns := testNetns(t)
	hostForward, hostNonlocal := hostSysctl(t, "net.ipv4.ip_forward"), hostSysctl(t, "net.ipv4.ip_nonlocal_bind")
	c := New(Config{})
	host := newHost(t, "eth0")
	master := role(v1.RoleMaster, "198.18.50.10")

	st := reconcileIn(t, ns, c, host, master)
	if st.Phase != reconcile.PhaseConverged || !st.Healthy {
		t.Fatalf("first pass: %+v", st)
	}
	for _, want := range []string{"set net.ipv4.ip_forward=1 (was 0)", "set net.ipv4.ip_nonlocal_bind=1 (was 0)"} {
		if !slices.Contains(st.Actions, want) {
			t.Errorf("actions %q lack %q", st.Actions, want)
		}
	}
	if !strings.Contains(st.Message, "eth0 up 198.18.50.2") {
		t.Errorf("message %q does not describe the primary link", st.Message)
	}
	if got := sysctlIn(t, ns, "net.ipv4.ip_forward"); got != "1" {
		t.Errorf("ip_forward in the namespace is %s", got)
	}
	if got := sysctlIn(t, ns, "net.ipv4.ip_nonlocal_bind"); got != "1" {
		t.Errorf("ip_nonlocal_bind in the namespace is %s", got)
	}
	// The test process's own namespace is untouched.
	if hostSysctl(t, "net.ipv4.ip_forward") != hostForward || hostSysctl(t, "net.ipv4.ip_nonlocal_bind") != hostNonlocal {
		t.Error("the pass changed the sysctls of the test's own network namespace")
	}

	// Level-triggered: the same role again changes nothing.
	if st := reconcileIn(t, ns, c, host, master); len(st.Actions) != 0 || !st.Healthy {
		t.Fatalf("second pass: %+v", st)
	}

	// Drift is repaired, and only the drifted sysctl is written.
	run(t, "ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.ip_forward=0")
	st = reconcileIn(t, ns, c, host, master)
	if !slices.Equal(st.Actions, []string{"set net.ipv4.ip_forward=1 (was 0)"}) {
		t.Fatalf("after drift: actions %q", st.Actions)
	}
	if got := sysctlIn(t, ns, "net.ipv4.ip_forward"); got != "1" {
		t.Errorf("ip_forward after repair is %s", got)
	}

	want := `
# HELP harmony_agent_network_link_up 1 if the node's primary interface is up (admin up, and operationally up or unknown), 0 if not.
# TYPE harmony_agent_network_link_up gauge
harmony_agent_network_link_up{interface="eth0"} 1
# HELP harmony_agent_network_sysctl_writes_total Times the agent found a sysctl it manages at another value and set it (the first setting, then any drift).
# TYPE harmony_agent_network_sysctl_writes_total counter
harmony_agent_network_sysctl_writes_total{sysctl="net.ipv4.ip_forward"} 2
harmony_agent_network_sysctl_writes_total{sysctl="net.ipv4.ip_nonlocal_bind"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"harmony_agent_network_link_up", "harmony_agent_network_sysctl_writes_total"); err != nil {
		t.Error(err)
	}
	// net.bridge.* depends on whether the host loaded br_netfilter.
	values := sysctlValues(t, c)
	if values["net.ipv4.ip_forward"] != 1 || values["net.ipv4.ip_nonlocal_bind"] != 1 {
		t.Errorf("sysctl_value series %v", values)
	}
}

// sysctlValues gathers harmony_agent_network_sysctl_value by sysctl.
func sysctlValues(t *testing.T, c *Component) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "harmony_agent_network_sysctl_value" {
			continue
		}
		for _, m := range f.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	return out
}

func TestWorkerDoesNotGetNonlocalBind(t *testing.T) {
	ns := testNetns(t)
	c := New(Config{})
	st := reconcileIn(t, ns, c, newHost(t, "eth0"), role(v1.RoleWorker, "198.18.50.10"))
	if st.Phase != reconcile.PhaseConverged || !st.Healthy {
		t.Fatalf("status %+v", st)
	}
	if !slices.Contains(st.Actions, "set net.ipv4.ip_forward=1 (was 0)") || strings.Contains(strings.Join(st.Actions, " "), "nonlocal") {
		t.Fatalf("actions %q", st.Actions)
	}
	if got := sysctlIn(t, ns, "net.ipv4.ip_nonlocal_bind"); got != "0" {
		t.Errorf("a worker got ip_nonlocal_bind=%s", got)
	}
	// Nor does it appear among the worker's metrics.
	values := sysctlValues(t, c)
	if _, ok := values["net.ipv4.ip_nonlocal_bind"]; ok || values["net.ipv4.ip_forward"] != 1 {
		t.Errorf("sysctl_value series %v", values)
	}
}

func TestHealthFollowsThePrimaryLink(t *testing.T) {
	ns := testNetns(t)
	c := New(Config{})
	// No interface in the facts: the component finds eth0 itself.
	host := newHost(t, "")
	master := role(v1.RoleMaster, "198.18.50.10")
	if st := reconcileIn(t, ns, c, host, master); !st.Healthy || !strings.Contains(st.Message, "eth0 up") {
		t.Fatalf("status %+v", st)
	}

	host.Facts.Interface = "eth0"
	run(t, "ip", "-n", ns, "link", "set", "eth1", "down") // takes eth0's carrier
	st := reconcileIn(t, ns, c, host, master)
	if st.Healthy || st.Phase != reconcile.PhaseConverged || !strings.Contains(st.Message, "eth0 lower-layer-down") ||
		!strings.Contains(st.Message, "not up") || len(st.Actions) != 0 {
		t.Fatalf("with eth0's carrier gone: %+v", st)
	}
	want := `
# HELP harmony_agent_network_link_up 1 if the node's primary interface is up (admin up, and operationally up or unknown), 0 if not.
# TYPE harmony_agent_network_link_up gauge
harmony_agent_network_link_up{interface="eth0"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "harmony_agent_network_link_up"); err != nil {
		t.Error(err)
	}

	run(t, "ip", "-n", ns, "link", "set", "eth1", "up")
	if st := reconcileIn(t, ns, c, host, master); !st.Healthy {
		t.Fatalf("carrier back: %+v", st)
	}

	// An interface that is gone is reported, not guessed around.
	host.Facts.Interface = "eth7"
	st = reconcileIn(t, ns, c, host, master)
	if st.Healthy || !strings.Contains(st.Message, `"eth7"`) {
		t.Fatalf("missing interface: %+v", st)
	}
	if n := testutil.CollectAndCount(c, "harmony_agent_network_link_up"); n != 0 {
		t.Errorf("link_up still exported for a link that was not found")
	}
}

// procSys makes a sysctl tree in a temporary directory, for the file
// logic alone: name=value pairs.
func procSys(t *testing.T, kv ...string) string {
	t.Helper()
	dir := t.TempDir()
	for i := 0; i < len(kv); i += 2 {
		p := filepath.Join(dir, strings.ReplaceAll(kv[i], ".", "/"))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(kv[i+1]+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func readSysctl(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, strings.ReplaceAll(name, ".", "/")))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestBridgeSysctlsOnlyWhenPresent(t *testing.T) {
	ns := testNetns(t)
	dir := procSys(t, "net.ipv4.ip_forward", "0", "net.ipv4.ip_nonlocal_bind", "0")
	c := New(Config{ProcSys: dir})
	host := newHost(t, "eth0")
	worker := role(v1.RoleWorker, "")
	st := reconcileIn(t, ns, c, host, worker)
	if !st.Healthy || !slices.Equal(st.Actions, []string{"set net.ipv4.ip_forward=1 (was 0)"}) {
		t.Fatalf("without br_netfilter: %+v", st)
	}
	if _, err := os.Stat(filepath.Join(dir, "net", "bridge")); err == nil {
		t.Fatal("the component created net/bridge")
	}

	// br_netfilter loaded: its sysctls appear and are set.
	dir2 := procSys(t, "net.ipv4.ip_forward", "1",
		"net.bridge.bridge-nf-call-iptables", "0", "net.bridge.bridge-nf-call-ip6tables", "1")
	c2 := New(Config{ProcSys: dir2})
	st = reconcileIn(t, ns, c2, host, worker)
	if !st.Healthy || !slices.Equal(st.Actions, []string{"set net.bridge.bridge-nf-call-iptables=1 (was 0)"}) {
		t.Fatalf("with br_netfilter: %+v", st)
	}
	if got := readSysctl(t, dir2, "net.bridge.bridge-nf-call-iptables"); got != "1" {
		t.Fatalf("bridge-nf-call-iptables is %s", got)
	}
}

func TestIPv6VIPNeedsIPv6NonlocalBind(t *testing.T) {
	ns := testNetns(t)
	dir := procSys(t, "net.ipv4.ip_forward", "1", "net.ipv4.ip_nonlocal_bind", "1", "net.ipv6.ip_nonlocal_bind", "0")
	c := New(Config{ProcSys: dir})
	// The VIP is only parsed; the test assigns no IPv6 address.
	st := reconcileIn(t, ns, c, newHost(t, "eth0"), role(v1.RoleAppliance, "2001:db8::10"))
	if !st.Healthy || !slices.Equal(st.Actions, []string{"set net.ipv6.ip_nonlocal_bind=1 (was 0)"}) {
		t.Fatalf("status %+v", st)
	}
}

func TestMissingRequiredSysctlFails(t *testing.T) {
	ns := testNetns(t)
	dir := procSys(t, "net.ipv4.ip_forward", "0")
	c := New(Config{ProcSys: dir})
	st := reconcileIn(t, ns, c, newHost(t, "eth0"), role(v1.RoleMaster, "198.18.50.10"))
	if st.Phase != reconcile.PhaseFailed || st.Healthy || !strings.Contains(st.Message, "net.ipv4.ip_nonlocal_bind does not exist") {
		t.Fatalf("status %+v", st)
	}
	// What could be set still was.
	if got := readSysctl(t, dir, "net.ipv4.ip_forward"); got != "1" || !slices.Contains(st.Actions, "set net.ipv4.ip_forward=1 (was 0)") {
		t.Fatalf("ip_forward %s, actions %q", got, st.Actions)
	}
}

func TestRelativeProcSysIsRefused(t *testing.T) {
	c := New(Config{ProcSys: "proc/sys"})
	st := c.Reconcile(context.Background(), newHost(t, "eth0"), role(v1.RoleWorker, ""))
	if st.Phase != reconcile.PhaseFailed || !strings.Contains(st.Message, "ProcSys") {
		t.Fatalf("status %+v", st)
	}
}
