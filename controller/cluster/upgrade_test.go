package cluster

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// Kubernetes' skew policy for an upgrade: the same version or later
// patches, the next minor, nothing older and no skipped minor.
func TestUpgradeVersionSkew(t *testing.T) {
	for _, c := range []struct {
		from, to, refusal string
	}{
		{"v1.33.4", "v1.34.2", ""},
		{"v1.34.2", "v1.34.2", ""},
		{"v1.34.2", "v1.34.3", ""},
		{"v1.33.4", "v1.35.0", "skips a minor"},
		{"v1.34.2", "v1.33.4", "never goes down"},
		{"v1.34.2", "v1.34.1", "never goes down"},
		{"v1.34.2", "v2.0.0", "never goes down"},
		{"v1.34.2", "latest", "cannot compare"},
	} {
		err := checkSkew(c.from, c.to, "the cluster's")
		var ce *Error
		switch {
		case c.refusal == "" && err != nil:
			t.Errorf("%s to %s refused: %v", c.from, c.to, err)
		case c.refusal != "" && (!errors.As(err, &ce) || ce.Field != "kubernetesVersion" || !strings.Contains(ce.Message, c.refusal)):
			t.Errorf("%s to %s: %v, want a kubernetesVersion refusal saying %q", c.from, c.to, err, c.refusal)
		}
	}
}

// An upgrade that stopped part-way left the nodes it replaced on the newer
// version: the next may go to that version again, never below it.
func TestUpgradeVersionSkewCountsEachNode(t *testing.T) {
	rec := testRecord()
	rec.Spec.KubernetesVersion = "v1.33.4"
	machines := []machine{
		{Name: "c1-m1", Role: v1.RoleMaster},
		{Name: "c1-m2", Role: v1.RoleMaster, KubernetesVersion: "v1.34.2"},
		{Name: "c1-m3", Role: v1.RoleMaster, KubernetesVersion: "v1.34.2"},
		{Name: "c1-m4", Role: v1.RoleMaster, KubernetesVersion: "v1.35.0", Remove: true},
	}
	for _, c := range []struct{ to, refusal string }{
		{"v1.34.2", ""},
		{"v1.34.3", ""},
		{"v1.33.4", "v1.33.4 is older than node c1-m2's v1.34.2"},
		{"v1.34.1", "v1.34.1 is older than node c1-m2's v1.34.2"},
		{"v1.35.0", "skips a minor from the cluster's v1.33.4"},
	} {
		err := checkVersionSkew(rec, machines, c.to)
		var ce *Error
		switch {
		case c.refusal == "" && err != nil:
			t.Errorf("to %s refused: %v", c.to, err)
		case c.refusal != "" && (!errors.As(err, &ce) || ce.Field != "kubernetesVersion" || !strings.Contains(ce.Message, c.refusal)):
			t.Errorf("to %s: %v, want a kubernetesVersion refusal saying %q", c.to, err, c.refusal)
		}
	}
}

// An upgrade starts only on a whole, healthy cluster; each refusal names
// the node and why. A VM kept powered off after a removal does not stop
// it.
func TestUpgradeRefusesAClusterThatIsNotWhole(t *testing.T) {
	rec := testRecord()
	rec.Generation, rec.ObservedGeneration = 2, 2
	var machines []machine
	statuses := map[string]v1.Status{}
	for i, role := range []v1.NodeRole{v1.RoleMaster, v1.RoleMaster, v1.RoleMaster, v1.RoleWorker} {
		m := rec.newMachine(role, time.Now())
		m.Step = stepPoweredOn
		machines = append(machines, m)
		st := v1.Status{Phase: v1.PhaseReady, KubernetesNode: &v1.KubernetesNodeStatus{Ready: "True"},
			Capabilities: []string{v1.CapabilityHandOver, v1.CapabilityKeepPods}}
		if role == v1.RoleMaster {
			st.EtcdMemberID = string(rune('a' + i))
			st.Components = []v1.ComponentStatus{{Name: "etcd", Healthy: true}}
		}
		statuses[m.Name] = st
	}
	kept := rec.newMachine(v1.RoleWorker, time.Now())
	kept.Remove, kept.KeepVM, kept.Step = true, true, stepKept
	machines = append(machines, kept)
	if err := checkUpgradable(rec, machines, statuses); err != nil {
		t.Fatalf("a whole cluster refused: %v", err)
	}
	for _, c := range []struct {
		name   string
		change func(ms []machine, st map[string]v1.Status)
		want   string
	}{
		{"a node not Ready", func(ms []machine, st map[string]v1.Status) {
			s := st["c1-w1"]
			s.Phase = v1.PhaseDegraded
			st["c1-w1"] = s
		}, "c1-w1 is not Ready"},
		{"a Kubernetes Node NotReady", func(ms []machine, st map[string]v1.Status) {
			s := st["c1-m2"]
			s.KubernetesNode = &v1.KubernetesNodeStatus{Ready: "False"}
			st["c1-m2"] = s
		}, "Node c1-m2 is NotReady"},
		{"a master without a member", func(ms []machine, st map[string]v1.Status) { s := st["c1-m3"]; s.EtcdMemberID = ""; st["c1-m3"] = s }, "c1-m3 reports no etcd member"},
		{"two masters as one member", func(ms []machine, st map[string]v1.Status) { s := st["c1-m3"]; s.EtcdMemberID = "a"; st["c1-m3"] = s }, "the same etcd member"},
		{"etcd unhealthy", func(ms []machine, st map[string]v1.Status) {
			s := st["c1-m1"]
			s.Components = []v1.ComponentStatus{{Name: "etcd", Healthy: false}}
			st["c1-m1"] = s
		}, "c1-m1 reports etcd unhealthy"},
		{"a node never reported", func(ms []machine, st map[string]v1.Status) { delete(st, "c1-w1") }, "never reported"},
		{"a node being removed", func(ms []machine, st map[string]v1.Status) { ms[3].Remove = true; ms[3].Step = stepLeft }, "being removed"},
		{"a node failed", func(ms []machine, st map[string]v1.Status) { ms[1].Failed = true }, "not provisioned"},
		{"a master's agent that cannot hand over", func(ms []machine, st map[string]v1.Status) {
			s := st["c1-m2"]
			s.Capabilities, s.AgentVersion = []string{v1.CapabilityKeepPods}, "v0.9.0"
			st["c1-m2"] = s
		}, "node c1-m2 (version v0.9.0) does not report the capability leave.handOver"},
		{"a worker's agent that cannot keep its pods", func(ms []machine, st map[string]v1.Status) {
			s := st["c1-w1"]
			s.Capabilities = nil
			st["c1-w1"] = s
		}, "node c1-w1 (version unknown) does not report the capability leave.keepPods"},
	} {
		ms := append([]machine(nil), machines...)
		st := map[string]v1.Status{}
		for k, v := range statuses {
			st[k] = v
		}
		c.change(ms, st)
		err := checkUpgradable(rec, ms, st)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a refusal saying %q", c.name, err, c.want)
		}
	}
	busy := *rec
	busy.Generation = 3
	if err := checkUpgradable(&busy, machines, statuses); err == nil || !strings.Contains(err.Error(), "operation running") {
		t.Errorf("an operation running: %v", err)
	}
}

// A master is replaced only once every master whose agent takes etcd
// snapshots reports one since the upgrade started (one a few minutes
// older counts: two clocks), and the masters' roles ask for it. Agents
// too old to take them, and a spec that turns them off, are not waited
// for.
func TestMasterReplacementWaitsForEtcdSnapshots(t *testing.T) {
	started := time.Date(2026, 11, 29, 2, 0, 0, 0, time.UTC)
	rec := testRecord()
	rec.Upgrade = &upgradeRecord{State: v1.UpgradeRunning, StartedAt: started}
	var masters []machine
	statuses := map[string]v1.Status{}
	for i := range 3 {
		m := rec.newMachine(v1.RoleMaster, time.Now())
		m.IP = fmt.Sprintf("198.18.10.%d", 11+i)
		masters = append(masters, m)
		at := started.Add(time.Minute)
		statuses[m.Name] = v1.Status{Capabilities: []string{v1.CapabilityEtcdSnapshots}, EtcdSnapshotAt: &at}
	}
	if err := checkSnapshots(rec, masters, statuses); err != nil {
		t.Fatalf("every master has one: %v", err)
	}
	agents := agentSupport{etcdSnapshots: map[string]bool{"c1-m1": true, "c1-m2": false, "c1-m3": true}}
	sec, err := newSecrets(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rs := roles(rec, sec, masters, agents)
	for _, r := range rs {
		if want := agents.etcdSnapshots[r.NodeName]; r.Etcd.SnapshotSince.Equal(started) != want {
			t.Errorf("%s asks for a snapshot since %v, want the upgrade's start: %v", r.NodeName, r.Etcd.SnapshotSince, want)
		}
	}

	at := func(d time.Duration) *time.Time { t := started.Add(d); return &t }
	for _, c := range []struct {
		name    string
		change  func(r *record, st map[string]v1.Status)
		waiting string // empty: not waited for
	}{
		{"none yet", func(_ *record, st map[string]v1.Status) { s := st["c1-m2"]; s.EtcdSnapshotAt = nil; st["c1-m2"] = s },
			"master c1-m2 has no etcd snapshot since the upgrade started at 2026-11-29T02:00:00Z"},
		{"only an old one", func(_ *record, st map[string]v1.Status) {
			s := st["c1-m3"]
			s.EtcdSnapshotAt = at(-6 * time.Minute)
			st["c1-m3"] = s
		},
			"master c1-m3 has no etcd snapshot"},
		{"one from just before the start", func(_ *record, st map[string]v1.Status) {
			s := st["c1-m3"]
			s.EtcdSnapshotAt = at(-4 * time.Minute)
			st["c1-m3"] = s
		}, ""},
		{"an agent that takes none", func(_ *record, st map[string]v1.Status) {
			s := st["c1-m1"]
			s.Capabilities, s.EtcdSnapshotAt = nil, nil
			st["c1-m1"] = s
		}, ""},
		{"snapshots turned off", func(r *record, st map[string]v1.Status) {
			r.Spec.EtcdSnapshots = &v1.EtcdSnapshots{Disabled: true}
			s := st["c1-m1"]
			s.EtcdSnapshotAt = nil
			st["c1-m1"] = s
		}, ""},
	} {
		r := *rec
		st := maps.Clone(statuses)
		c.change(&r, st)
		err := checkSnapshots(&r, masters, st)
		if c.waiting == "" && err != nil || c.waiting != "" && (err == nil || !strings.Contains(err.Error(), c.waiting)) {
			t.Errorf("%s: %v, want waiting: %q", c.name, err, c.waiting)
		}
	}
}
