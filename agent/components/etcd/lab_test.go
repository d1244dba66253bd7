//go:build linux

package etcd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/harmonykaas/harmony/agent/pki"
	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/agent/service"
	"github.com/harmonykaas/harmony/internal/testutil"
)

// The lab: each host is a network namespace with one veth end (eth0) on a
// bridge that lives in a namespace of its own, so nothing of the test
// touches the machine's network. Addresses are in 198.18.30.0/24.

type labHost struct {
	name, ns string
	addr     netip.Addr
	root     string
	host     *reconcile.Host
	sup      *service.Supervisor
	supCfg   service.SupervisorConfig
	comp     *Component
	reg      *prometheus.Registry
}

// needLab skips under -short (the test runs etcd: what says why) and
// fails without what every lab test needs: root, for the namespaces, and
// the real etcd.
func needLab(t *testing.T, what string) {
	t.Helper()
	if testing.Short() {
		t.Skip(what)
	}
	if os.Geteuid() != 0 {
		t.Fatal("this test makes network namespaces and needs root")
	}
	if _, err := os.Stat("/usr/bin/etcd"); err != nil {
		t.Fatalf("the real etcd is needed (Debian etcd-server): %v", err)
	}
}

func labID(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// labSwitch makes the namespace holding the bridge.
func labSwitch(t *testing.T, id string) string {
	t.Helper()
	sw := "hke-sw-" + id
	testutil.IP(t, "netns", "add", sw)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", sw).Run() })
	testutil.IP(t, "-n", sw, "link", "add", "br0", "type", "bridge")
	testutil.IP(t, "-n", sw, "link", "set", "br0", "up")
	return sw
}

// newLabHost makes a host: its namespace on the switch, its root
// directory, its supervisor (which runs units inside the namespace) and
// its etcd component (which dials inside it).
func newLabHost(t *testing.T, id, sw, name, addr string) *labHost {
	t.Helper()
	ns := "hke-" + name + "-" + id
	veth := "hke" + name + id[:4]
	testutil.IP(t, "netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	testutil.IP(t, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
	testutil.IP(t, "link", "set", veth, "netns", sw)
	testutil.IP(t, "-n", sw, "link", "set", veth, "master", "br0", "up")
	testutil.IP(t, "-n", ns, "link", "set", "lo", "up")
	testutil.IP(t, "-n", ns, "link", "set", "eth0", "up")
	testutil.IP(t, "-n", ns, "addr", "add", addr+"/24", "dev", "eth0")

	root := t.TempDir()
	h := &labHost{name: name, ns: ns, addr: netip.MustParseAddr(addr), root: root}
	h.supCfg = service.SupervisorConfig{
		RunDir: filepath.Join(root, "run", "harmony"), LogDir: filepath.Join(root, "var", "log", "harmony"),
		Logger: slog.New(slog.DiscardHandler),
		Wrap: func(argv []string) []string {
			return append([]string{"/usr/bin/ip", "netns", "exec", ns}, argv...)
		},
		StopGrace: 10 * time.Second, RestartBase: 200 * time.Millisecond, RestartMax: 2 * time.Second,
	}
	sup, err := service.NewSupervisor(h.supCfg)
	if err != nil {
		t.Fatal(err)
	}
	h.sup = sup
	// Registered after the namespace, so it runs before the namespace
	// goes; it stops whatever supervisor the host has by then.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := h.sup.StopAll(ctx); err != nil {
			t.Errorf("%s: stop units: %v", name, err)
		}
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(root, "var", "log", "harmony", "etcd.log"))
			t.Logf("%s etcd log (tail):\n%s", name, tail(string(log), 25))
		}
	})
	h.host = &reconcile.Host{Root: root, Services: sup, Log: slog.New(slog.DiscardHandler),
		Facts: reconcile.Facts{Interface: "eth0", Addresses: []netip.Addr{h.addr}}}
	h.newComponent(t)
	return h
}

// newComponent gives the host a fresh component, as an agent restart does.
func (h *labHost) newComponent(t *testing.T) {
	t.Helper()
	h.comp = New(Config{DialContext: testutil.NetnsDialer(h.ns), PromoteWait: 45 * time.Second})
	h.reg = prometheus.NewRegistry()
	if err := h.reg.Register(h.comp); err != nil {
		t.Fatal(err)
	}
}

// restartAgent replaces the host's supervisor and component, as a new
// agent process would: the running etcd is adopted, not restarted.
func (h *labHost) restartAgent(t *testing.T) {
	t.Helper()
	if err := h.sup.Close(); err != nil {
		t.Fatal(err)
	}
	sup, err := service.NewSupervisor(h.supCfg)
	if err != nil {
		t.Fatal(err)
	}
	h.sup = sup
	h.host.Services = sup
	h.newComponent(t)
}

// newVMOnSameData stands for a new VM that took the host's data disk: what
// was on the OS disk (certificates, the bootstrap record) is gone, and a
// new agent runs.
func (h *labHost) newVMOnSameData(t *testing.T) {
	t.Helper()
	for _, dir := range []string{PKIDir, stateDir} {
		if err := os.RemoveAll(h.host.Path(dir)); err != nil {
			t.Fatal(err)
		}
	}
	h.restartAgent(t)
}

// client is a gateway client as the agent on h has it (its client
// certificate, dialing inside h's namespace).
func (h *labHost) client(t *testing.T, ca *pki.CA) *Client {
	t.Helper()
	tlsConfig, err := clientTLS(h.host, settings{ca: ca})
	if err != nil {
		t.Fatal(err)
	}
	cl := newClient(tlsConfig, testutil.NetnsDialer(h.ns), 10*time.Second)
	t.Cleanup(cl.Close)
	return cl
}

func (h *labHost) endpoint() string { return clientURL(h.addr, 2379) }

func (h *labHost) state(t *testing.T) service.State {
	t.Helper()
	st, err := h.sup.State(context.Background(), UnitName)
	if err != nil {
		t.Fatalf("%s: state of etcd: %v", h.name, err)
	}
	return st
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// stateCommand is the command line of h's running etcd, from /proc.
func (h *labHost) stateCommand(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", h.state(t).PID))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
}
