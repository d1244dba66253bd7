package controller

import (
	"testing"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// A cluster spec's etcd snapshot settings reach a master's role only once
// its agent reports it takes them: an older agent decodes roles strictly
// and would refuse a role with etcd.snapshots. They go again when a VM of
// an older image reports under the same name, and never reach a worker.
func TestEtcdSnapshotSettingsReachOnlyAgentsThatTakeThem(t *testing.T) {
	e := newClusterEnv(t)
	spec := e.spec("sn", 3, 1)
	spec.EtcdSnapshots = &v1.EtcdSnapshots{Interval: "1h", Keep: 24}
	e.do("POST", v1.PathClusters, spec)
	nodes, report := e.reportingNodes("sn", "sn-m1", "sn-m2", "sn-m3", "sn-w1")
	check := func(when string, want map[string]bool) {
		t.Helper()
		for name, c := range nodes {
			r := e.ownRole(c)
			got := r.Etcd != nil && r.Etcd.Snapshots != nil
			if got != want[name] || got && *r.Etcd.Snapshots != *spec.EtcdSnapshots {
				t.Errorf("%s, %s: etcd settings %+v, want the spec's snapshots: %v", when, name, r.Etcd, want[name])
			}
		}
	}
	check("before any report", nil)

	report("sn-m1", v1.CapabilityEtcdSnapshots)
	report("sn-m2", v1.CapabilityHandOver)
	report("sn-w1", v1.CapabilityEtcdSnapshots)
	check("m1 takes them, m2 does not", map[string]bool{"sn-m1": true})

	report("sn-m2", v1.CapabilityEtcdSnapshots)
	report("sn-m3", v1.CapabilityEtcdSnapshots)
	check("every master takes them", map[string]bool{"sn-m1": true, "sn-m2": true, "sn-m3": true})

	// A replacement VM of an older image reports under the same name.
	report("sn-m2", v1.CapabilityHandOver)
	check("m2 of an older image", map[string]bool{"sn-m1": true, "sn-m3": true})
}
