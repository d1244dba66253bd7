package controller

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	htest "github.com/harmonykaas/harmony/internal/testutil"
)

// A node whose agent stops reporting shows as Unresponsive once it has
// missed three heartbeats: in the cluster's view, in its NodesReady
// condition and in the controller's metrics, whatever it said last. Its
// next report makes it Ready again.
func TestASilentNodeIsUnresponsive(t *testing.T) {
	e := newClusterEnv(t)
	e.do("POST", v1.PathClusters, e.spec("si", 1, 1))
	report := e.readyNodes("si", "si-m1", "si-w1")
	check := func(when string, want map[string]string, nodesReady string) {
		t.Helper()
		cl := e.cluster("si")
		for _, n := range cl.Status.Nodes {
			if n.Phase != want[n.Name] {
				t.Errorf("%s: %s is %s, want %s", when, n.Name, n.Phase, want[n.Name])
			}
			if n.LastReport == nil || n.LastReport.After(e.tc.clock.Now()) {
				t.Errorf("%s: %s's last report %v", when, n.Name, n.LastReport)
			}
		}
		for _, c := range cl.Status.Conditions {
			if c.Type == v1.ConditionNodesReady && (c.Status != nodesReady) {
				t.Errorf("%s: NodesReady %s (%s), want %s", when, c.Status, c.Message, nodesReady)
			}
		}
		metrics := string(doJSON(t, e.tc.admin, "GET", e.tc.url+v1.PathMetrics, nil).body)
		for node, phase := range want {
			role := map[bool]string{true: "master", false: "worker"}[strings.Contains(node, "-m")]
			line := fmt.Sprintf(`harmony_controller_node_phase{cluster="si",node=%q,phase=%q,role=%q} 1`, node, phase, role)
			if !strings.Contains(metrics, line) {
				t.Errorf("%s: the metrics lack %s", when, line)
			}
		}
		for _, line := range []string{
			`harmony_controller_cluster_phase{cluster="si",phase="Running"} 1`,
			fmt.Sprintf(`harmony_controller_cluster_condition{cluster="si",condition="NodesReady"} %d`, map[string]int{"True": 1, "False": 0}[nodesReady]),
			`harmony_controller_node_certificate_expiry_timestamp_seconds{cluster="si",node="si-w1"}`,
			`harmony_controller_node_last_report_timestamp_seconds{cluster="si",node="si-w1"}`,
		} {
			if !strings.Contains(metrics, line) {
				t.Errorf("%s: the metrics lack %s", when, line)
			}
		}
	}
	check("both report", map[string]string{"si-m1": "Ready", "si-w1": "Ready"}, "True")

	e.tc.clock.Advance(v1.StatusStaleAfter - time.Minute)
	report("si-m1")
	check("si-w1 silent for 14 minutes", map[string]string{"si-m1": "Ready", "si-w1": "Ready"}, "True")
	e.tc.clock.Advance(2 * time.Minute)
	check("si-w1 silent for 16 minutes", map[string]string{"si-m1": "Ready", "si-w1": "Unresponsive"}, "False")
	for _, c := range e.cluster("si").Status.Conditions {
		if c.Type == v1.ConditionNodesReady && !strings.Contains(c.Message, "no report for over 15m0s: si-w1 (since ") {
			t.Errorf("NodesReady does not name the silent node: %q", c.Message)
		}
	}

	report("si-w1")
	check("si-w1 reports again", map[string]string{"si-m1": "Ready", "si-w1": "Ready"}, "True")
}

// A controller that was down heard no report meanwhile: once it starts
// again, no node is Unresponsive for longer than it has been up, and a
// node that stays silent is after that.
func TestARestartedControllerGivesTheAgentsTheirTime(t *testing.T) {
	// The reports are made 20 minutes back in time, on a clock of their
	// own: every certificate stays valid to the real one.
	before := &htest.Clock{}
	before.Advance(-20 * time.Minute)
	e := newClusterEnv(t, func(c *Config) { c.Now = before.Now })
	e.do("POST", v1.PathClusters, e.spec("rs", 1, 1))
	report := e.readyNodes("rs", "rs-m1", "rs-w1")
	clock := &htest.Clock{}
	e.mutate = append(e.mutate, func(c *Config) { c.Now = clock.Now })
	e.restart() // 20 minutes after the reports
	phases := func() map[string]string {
		out := map[string]string{}
		for _, n := range e.cluster("rs").Status.Nodes {
			out[n.Name] = n.Phase
		}
		return out
	}
	if got := phases(); got["rs-m1"] != "Ready" || got["rs-w1"] != "Ready" {
		t.Errorf("just after the restart, with reports of 20 minutes ago: %v, want both Ready", got)
	}
	clock.Advance(10 * time.Minute)
	report("rs-m1")
	clock.Advance(6 * time.Minute)
	if got := phases(); got["rs-m1"] != "Ready" || got["rs-w1"] != "Unresponsive" {
		t.Errorf("16 minutes after the restart, rs-w1 silent all along: %v, want rs-m1 Ready and rs-w1 Unresponsive", got)
	}
}

// readyNodes enrolls the named nodes of cluster (reportingNodes), each
// reporting Ready, and returns how to report one Ready again, to the
// controller running then.
func (e *clusterEnv) readyNodes(cluster string, names ...string) func(name string) {
	e.t.Helper()
	nodes, _ := e.reportingNodes(cluster, names...)
	report := func(name string) {
		e.t.Helper()
		st := v1.Status{APIVersion: v1.APIVersion, Kind: "Status", Phase: v1.PhaseReady}
		if r := doJSON(e.t, nodes[name], "POST", e.tc.url+v1.PathNodeStatus, st); r.status != http.StatusNoContent {
			e.t.Fatalf("status of %s: %d %s", name, r.status, r.body)
		}
	}
	for _, name := range names {
		report(name)
	}
	return report
}
