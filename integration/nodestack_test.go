package integration

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/agent"
	"github.com/harmonykaas/harmony/agent/components/haproxy"
	"github.com/harmonykaas/harmony/agent/components/keepalived"
	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/agent/sdnotify"
	"github.com/harmonykaas/harmony/agent/service/servicetest"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// TestAgentActsOnItsRole runs an enrolled agent with the node stack on: a
// role from the controller reaches the components, their configs are
// written under the agent's root, and their statuses come back to the
// controller. The service manager only records (nothing may start daemons
// on the test machine's own network); the real daemons run in
// vip_test.go, inside network namespaces.
func TestAgentActsOnItsRole(t *testing.T) {
	c := startController(t)
	b := c.addNode(t, v1.NodeSpec{Name: "m1", Role: v1.RoleMaster, IPs: []string{"198.18.20.11"}})
	bootFile := filepath.Join(t.TempDir(), "bootstrap.json")
	writeBootstrap(t, bootFile, b)
	root := t.TempDir()
	rec := servicetest.New()
	// systemd's notification socket, as a Type=notify unit gets it.
	notifyPath := filepath.Join(t.TempDir(), "notify")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notify.Close()
	ra := startAgent(t, agent.Config{
		BootstrapFile: bootFile, StateDir: t.TempDir(), Addresses: []string{"198.18.20.11"}, MetricsLocalListen: "127.0.0.1:0",
		NodeStack: true, Root: root, Services: rec,
		Notify: sdnotify.New(sdnotify.Config{Socket: notifyPath}),
		Components: []reconcile.Component{
			haproxy.New(haproxy.Config{NoStatsProbe: true}),
			// The agent's own facts name this machine's primary interface;
			// keepalived's config test accepts any that exists.
			keepalived.New(keepalived.Config{TrackScript: []string{"/bin/true"}}),
		},
	})
	first := ra.waitRole(t, 1)

	// READY=1 comes once, after the first reconcile pass.
	notify.SetReadDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, 4096)
	n, err := notify.Read(buf)
	if err != nil || !strings.Contains(string(buf[:n]), "READY=1") {
		t.Fatalf("notification %q, %v; want READY=1", buf[:n], err)
	}

	// The first role has no VIP yet: both components say so, and the
	// controller hears it.
	eventually(t, "a degraded status naming the missing VIP", func() bool {
		n := c.node(t, "m1")
		return n.Status != nil && n.Status.Phase == v1.PhaseDegraded && len(n.Status.Components) == 2 &&
			strings.Contains(n.Status.Components[1].Message, "vip")
	})

	role := first
	role.Cluster.VIP, role.Cluster.VRID = "198.18.20.10", 71
	role.Cluster.LoadBalancer.VRRPPassword = "l4b"
	role.Peers = []v1.Peer{{Name: "m1", Role: v1.RoleMaster, Address: "198.18.20.11"}}
	c.setRole(t, role)
	eventually(t, "a ready status with both components converged", func() bool {
		n := c.node(t, "m1")
		if n.Status == nil || n.Status.Phase != v1.PhaseReady {
			return false
		}
		for _, cs := range n.Status.Components {
			if cs.Phase != reconcile.PhaseConverged || !cs.Healthy {
				return false
			}
		}
		return len(n.Status.Components) == 2
	}, func() { t.Logf("status %+v\nagent log:\n%s", c.node(t, "m1").Status, ra.logs.String()) })
	for _, f := range []string{haproxy.ConfigFile, keepalived.ConfigPath} {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil || !strings.Contains(string(data), "198.18.20.10") {
			t.Fatalf("%s under the agent's root: %v", f, err)
		}
	}
	if calls := rec.TakeCalls(); !slices.Contains(calls, "ensure haproxy") || !slices.Contains(calls, "ensure keepalived") {
		t.Fatalf("service calls %v", calls)
	}
	metrics, err := httpGet("http://" + ra.a.MetricsAddrs()[0].String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(metrics, `harmony_agent_component_up{component="keepalived"} 1`) {
		t.Fatalf("agent metrics lack the component:\n%s", grepLines(metrics, "component"))
	}
}
