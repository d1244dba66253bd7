package controller

import (
	"net/http"
	"testing"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// The masters run VRRPv3 only once every one of their agents says it can:
// a v2 and a v3 keepalived do not hear each other and would both hold the
// VIP. The change reaches the roles when the last master reports, goes
// back when a master without it reports, and never reaches a worker.
func TestMastersMoveToVRRPv3WhenEveryAgentRunsIt(t *testing.T) {
	e := newClusterEnv(t)
	e.do("POST", v1.PathClusters, e.spec("vr", 3, 1))
	nodes, report := e.reportingNodes("vr", "vr-m1", "vr-m2", "vr-m3", "vr-w1")
	versions := func() map[string]v1.LoadBalancerSettings {
		out := map[string]v1.LoadBalancerSettings{}
		for name, c := range nodes {
			out[name] = e.ownRole(c).Cluster.LoadBalancer
		}
		return out
	}
	all := []string{v1.CapabilityHandOver, v1.CapabilityKeepPods, v1.CapabilityVRRPv3}
	for _, name := range []string{"vr-m1", "vr-m2", "vr-w1"} {
		report(name, all...)
	}
	report("vr-m3", v1.CapabilityHandOver, v1.CapabilityKeepPods)
	for name, lb := range versions() {
		if lb.VRRPVersion != 0 || lb.AdvertInterval != "" || lb.VRRPPassword == "" && name != "vr-w1" {
			t.Errorf("%s with one master on VRRPv2 only: %+v", name, lb)
		}
	}

	report("vr-m3", all...)
	for name, lb := range versions() {
		want := 3
		if name == "vr-w1" {
			want = 0
		}
		if lb.VRRPVersion != want || want == 3 && lb.AdvertInterval != v1.DefaultVRRPv3AdvertInterval.String() {
			t.Errorf("%s once every master runs VRRPv3: %+v, want version %d", name, lb, want)
		}
	}

	// A replacement VM of an older image reports under the same name.
	report("vr-m2", v1.CapabilityHandOver)
	for name, lb := range versions() {
		if lb.VRRPVersion != 0 {
			t.Errorf("%s after a master without VRRPv3 reported: %+v", name, lb)
		}
	}
}

// reportingNodes enrolls the named nodes of cluster and returns their
// clients, and a report that posts a node's status with capabilities, as
// its agent would.
func (e *clusterEnv) reportingNodes(cluster string, names ...string) (map[string]*http.Client, func(name string, capabilities ...string)) {
	e.t.Helper()
	nodes := map[string]*http.Client{}
	for _, name := range names {
		nodes[name] = e.enrollClusterNode(cluster, name)
	}
	report := func(name string, capabilities ...string) {
		e.t.Helper()
		st := v1.Status{APIVersion: v1.APIVersion, Kind: "Status", Phase: v1.PhaseConverging, Capabilities: capabilities}
		if r := doJSON(e.t, nodes[name], "POST", e.tc.url+v1.PathNodeStatus, st); r.status != http.StatusNoContent {
			e.t.Fatalf("status of %s: %d %s", name, r.status, r.body)
		}
	}
	return nodes, report
}
