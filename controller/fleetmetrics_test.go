package controller

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// A node whose agent stops reporting shows as Unresponsive once it has
// missed three heartbeats: in the cluster's view, in its NodesReady
// condition and in the controller's metrics, whatever it said last. Its
// next report makes it Ready again.
func TestASilentNodeIsUnresponsive(t *testing.T) {
	e := newClusterEnv(t)
	e.do("POST", v1.PathClusters, e.spec("si", 1, 1))
	nodes := map[string]*http.Client{}
	report := func(name string) {
		t.Helper()
		st := v1.Status{APIVersion: v1.APIVersion, Kind: "Status", Phase: v1.PhaseReady}
		if r := doJSON(t, nodes[name], "POST", e.tc.url+v1.PathNodeStatus, st); r.status != http.StatusNoContent {
			t.Fatalf("status of %s: %d %s", name, r.status, r.body)
		}
	}
	for _, name := range []string{"si-m1", "si-w1"} {
		nodes[name] = e.enrollClusterNode("si", name)
		report(name)
	}
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
