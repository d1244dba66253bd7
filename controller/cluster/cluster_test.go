package cluster

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/store"
)

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), store.FileName), store.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func testRecord() *record {
	masters := 3
	return &record{Spec: v1.ClusterSpec{Name: "c1", Provider: "p", KubernetesVersion: "v1.34.2", VIP: "198.18.10.10",
		PodCIDR: "198.19.0.0/17", ServiceCIDR: "198.19.128.0/20", DNSDomain: "cluster.local", Masters: &masters, Workers: 2,
		Contiv: &v1.ContivSettings{Mode: "vxlan", VNI: 4096}}, VRID: 7}
}

func TestRolesComeFromTheClusterRecord(t *testing.T) {
	sec, err := newSecrets(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rec := testRecord()
	rec.Spec.EtcdSnapshots = &v1.EtcdSnapshots{Interval: "1h", Keep: 24}
	var ms []machine
	for i, role := range []v1.NodeRole{v1.RoleWorker, v1.RoleMaster, v1.RoleMaster, v1.RoleMaster, v1.RoleWorker} {
		m := rec.newMachine(role, time.Now())
		m.IP = "198.18.10." + string(rune('1'+i)) + "1"
		ms = append(ms, m)
	}
	ms[4].Remove = true // a worker on its way out has no role
	agents := agentSupport{etcdSnapshots: map[string]bool{}}
	for _, m := range ms {
		agents.etcdSnapshots[m.Name] = true
	}
	rs := roles(rec, sec, ms, agents)
	for _, r := range rs {
		if err := r.Validate(); err != nil {
			t.Fatalf("role of %s: %v", r.NodeName, err)
		}
	}
	if len(rs) != 4 {
		t.Fatalf("%d roles, want 4 (the removed worker has none)", len(rs))
	}
	var names []string
	for _, r := range rs {
		names = append(names, r.NodeName)
		if r.Versions.Kubernetes != "v1.34.2" || r.Cluster.KubernetesVersion != "v1.34.2" {
			t.Errorf("%s: versions %+v / %q, want v1.34.2", r.NodeName, r.Versions, r.Cluster.KubernetesVersion)
		}
		if !slices.Equal(r.Addresses.DNSNames, []string{r.NodeName}) {
			t.Errorf("%s: DNS names %v, want its own name", r.NodeName, r.Addresses.DNSNames)
		}
		if r.Cluster.VRID != 7 || r.Cluster.VIP != "198.18.10.10" || r.Cluster.LoadBalancer.VRRPPassword != sec.VRRPPassword {
			t.Errorf("%s: cluster settings %+v", r.NodeName, r.Cluster)
		}
		if r.Kubeadm == nil || r.Kubeadm.BootstrapToken != sec.BootstrapToken {
			t.Errorf("%s: kubeadm settings %+v", r.NodeName, r.Kubeadm)
		}
		if len(r.Peers) != 4 {
			t.Errorf("%s: %d peers, want 4", r.NodeName, len(r.Peers))
		}
		switch r.Role {
		case v1.RoleMaster:
			if r.PKI.ClusterCA.Key == "" || r.PKI.EtcdCA == nil || r.PKI.ServiceAccountKey == "" || r.Etcd == nil {
				t.Errorf("%s: a master needs every CA with its key and etcd settings", r.NodeName)
			}
			if r.Etcd != nil && (r.Etcd.Snapshots == nil || *r.Etcd.Snapshots != *rec.Spec.EtcdSnapshots) {
				t.Errorf("%s: etcd snapshots %+v, want the spec's", r.NodeName, r.Etcd.Snapshots)
			}
		case v1.RoleWorker:
			if r.PKI.ClusterCA.Key != "" || r.PKI.EtcdCA != nil || r.PKI.ServiceAccountKey != "" || r.Etcd != nil {
				t.Errorf("%s: a worker got a CA key or etcd settings", r.NodeName)
			}
			if r.PKI.ClusterCA.Certificate != sec.PKI.ClusterCA.Certificate {
				t.Errorf("%s: a worker needs the cluster CA's certificate", r.NodeName)
			}
		}
	}
	if want := []string{"c1-m1", "c1-m2", "c1-m3", "c1-w1"}; !slices.Equal(names, want) {
		t.Errorf("roles for %v, want %v (masters first, by name)", names, want)
	}
	for _, p := range rs[0].Peers {
		if p.Role == v1.RoleMaster && p.Name != []string{"c1-m1", "c1-m2", "c1-m3"}[p.Rank] {
			t.Errorf("peer %s has rank %d", p.Name, p.Rank)
		}
	}
}

// A master being replaced is told to leave with hand-over until its old
// VM is off: an agent told it serves again would start its etcd member
// and control plane on the VM about to be powered off.
func TestMasterLeavesUntilItsOldVMIsOff(t *testing.T) {
	sec, err := newSecrets(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rec := testRecord()
	m := rec.newMachine(v1.RoleMaster, time.Now())
	m.IP = "198.18.10.11"
	for _, c := range []struct {
		step     string
		rollback bool
		leave    bool
	}{
		{swapHandOver, false, true},
		{swapHandedOver, false, true},
		{swapOldOff, false, false},
		{swapCloning, false, false},
		{swapHandedOver, true, false}, // rolled back: the old VM serves on
	} {
		m.Swap = &swap{Step: c.step, Rollback: c.rollback, HandOverBy: time.Now().Add(time.Minute)}
		rs := roles(rec, sec, []machine{m}, agentSupport{})
		if leave := rs[0].Leave != nil && rs[0].Leave.HandOver; leave != c.leave {
			t.Errorf("swap step %s (rollback %v): leave with hand-over %v, want %v", c.step, c.rollback, leave, c.leave)
		}
	}
}

func TestSecretsAreFreshPerCluster(t *testing.T) {
	a, err := newSecrets(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b, err := newSecrets(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if a.BootstrapToken == b.BootstrapToken || a.VRRPPassword == b.VRRPPassword || a.PKI.ClusterCA.Key == b.PKI.ClusterCA.Key {
		t.Fatal("two clusters share a secret")
	}
	if len(a.BootstrapToken) != 23 || a.BootstrapToken[6] != '.' {
		t.Fatalf("bootstrap token %q is not kubeadm's [a-z0-9]{6}.[a-z0-9]{16}", a.BootstrapToken)
	}
}

func TestAllocation(t *testing.T) {
	st := openStore(t)
	p := &v1.Provider{Name: "p", IPPool: &v1.IPPool{Network: "198.18.10.0/24", Ranges: []string{"198.18.10.10-198.18.10.13"}, Gateway: "198.18.10.1"}}
	err := st.Update(func(tx *store.Tx) error {
		if err := allocateVIP(tx, p, "c1", "198.18.10.10"); err != nil {
			return err
		}
		ms := []machine{{Cluster: "c1", Name: "a"}, {Cluster: "c1", Name: "b"}}
		if err := allocateIPs(tx, p, ms); err != nil {
			return err
		}
		if ms[0].IP != "198.18.10.11" || ms[1].IP != "198.18.10.12" {
			t.Errorf("addresses %s, %s: want the lowest free ones after the VIP", ms[0].IP, ms[1].IP)
		}
		err := allocateVIP(tx, p, "c2", "198.18.10.11")
		var ce *Error
		if !errors.As(err, &ce) || ce.Kind != Conflict || ce.Field != "vip" {
			t.Errorf("VIP on a node's address: %v, want a conflict on field vip", err)
		}
		err = allocateIPs(tx, p, []machine{{Cluster: "c2", Name: "x"}, {Cluster: "c2", Name: "y"}})
		if !errors.As(err, &ce) || ce.Kind != PrecheckFailed || ce.Field != "ipPool" {
			t.Errorf("pool too small: %v, want a precheck refusal on ipPool", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := checkVIP(p, "198.18.11.10"); err == nil {
		t.Error("a VIP outside the pool was accepted")
	}
}

func TestFreeVRIDSkipsTheProvidersClusters(t *testing.T) {
	st := openStore(t)
	err := st.Update(func(tx *store.Tx) error {
		for i, c := range []struct {
			provider string
			vrid     int
		}{{"p", 1}, {"p", 2}, {"other", 3}} {
			rec := testRecord()
			rec.Spec.Name, rec.Spec.Provider, rec.VRID = string(rune('a'+i)), c.provider, c.vrid
			if err := tx.Put(store.Clusters, rec.Spec.Name, rec); err != nil {
				return err
			}
		}
		id, err := freeVRID(tx, "p")
		if id != 3 || err != nil {
			t.Errorf("freeVRID = %d, %v; want 3 (1 and 2 are p's, 3 only another provider's)", id, err)
		}
		users, err := ProviderUsers(tx, "p")
		if !slices.Equal(users, []string{"a", "b"}) || err != nil {
			t.Errorf("ProviderUsers = %v, %v", users, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A rollback's event says when the old VM cannot serve as the etcd member
// it was, because the new VM joined as a new member (which removed it).
func TestRollbackSaysWhenTheOldMemberWasRemoved(t *testing.T) {
	env := newPassEnv(t, 3, 0, 1)
	e := env.s.engine
	on := time.Now().Add(-time.Minute)
	report := func(member string, at time.Time) {
		t.Helper()
		if err := env.st.SetStatus(v1.Status{APIVersion: v1.APIVersion, Kind: "Status", NodeName: "c1-m2", Phase: v1.PhaseConverging,
			ReportedAt: at, EtcdMemberID: member}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name      string
		freshDisk bool
		poweredOn time.Time
		member    string
		at        time.Time
		want      string
	}{
		{"not powered on yet", true, time.Time{}, "", on, ""},
		{"the same member", false, on, "aa", on.Add(time.Second), ""},
		{"no member reported", false, on, "", on.Add(time.Second), ""},
		{"another member, reported by the old VM", false, on, "bb", on.Add(-time.Second), ""},
		{"another member", false, on, "bb", on.Add(time.Second), "the new VM joined etcd as member bb, which removed member aa: the old VM's agent sets"},
		{"fresh disk", true, on, "", on.Add(time.Second), "on the fresh-disk path, may have joined etcd as a new member, which removes member aa: if so, the old VM's agent sets"},
	} {
		report(c.member, c.at)
		m := &machine{Name: "c1-m2", Role: v1.RoleMaster, Swap: &swap{MemberID: "aa", FreshDisk: c.freshDisk, PoweredOnAt: c.poweredOn}}
		got := e.rejoinNote(m)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: note %q, want %q", c.name, got, c.want)
		}
	}
	worker := &machine{Name: "c1-m2", Role: v1.RoleWorker, Swap: &swap{MemberID: "aa", FreshDisk: true, PoweredOnAt: on}}
	if got := e.rejoinNote(worker); got != "" {
		t.Errorf("a worker's note: %q", got)
	}
}

// A cluster's data disks are in a folder named for its name and UID; one
// stored before that folder was recorded keeps the name alone, where its
// disks are.
func TestDataDiskFolder(t *testing.T) {
	var old record
	if err := json.Unmarshal([]byte(`{"spec":{"name":"prod"},"uid":"0123456789abcdef"}`), &old); err != nil {
		t.Fatal(err)
	}
	m := machine{Name: "prod-m1", DataDatastore: "LocalDS_0"}
	if d := dataDisk(&old, &m); d.Path() != "[LocalDS_0] harmony-data/prod/prod-m1.vmdk" {
		t.Errorf("a cluster stored before: %s", d.Path())
	}
	made := old
	made.DataDiskDir = "harmony-data/prod-0123456789abcdef"
	if d := dataDisk(&made, &m); d.Path() != "[LocalDS_0] harmony-data/prod-0123456789abcdef/prod-m1.vmdk" {
		t.Errorf("a cluster made now: %s", d.Path())
	}
}

// What the masters' roles ask for a snapshot since: an upgrade's start
// while it runs, a request by hand while it runs and once answered (a
// master a pass behind takes its own), not once it failed, and never an
// answered request in place of a running upgrade: an agent takes one
// snapshot per since, and the one it took for the request may be gone.
func TestSnapshotSince(t *testing.T) {
	asked := time.Date(2026, 11, 29, 16, 6, 25, 0, time.UTC)
	request := func(finished bool, failure string) *snapshotRequest {
		r := &snapshotRequest{EtcdSnapshotRequest: v1.EtcdSnapshotRequest{AskedAt: asked, By: "admin", Error: failure}}
		if finished {
			r.FinishedAt = asked.Add(time.Minute)
		}
		return r
	}
	upgrade := &upgradeRecord{State: v1.UpgradeRunning, StartedAt: asked.Add(4 * time.Minute)}
	for _, c := range []struct {
		what    string
		upgrade *upgradeRecord
		request *snapshotRequest
		want    time.Time
	}{
		{"nothing asked", nil, nil, time.Time{}},
		{"an upgrade", upgrade, nil, upgrade.StartedAt},
		{"a request running", nil, request(false, ""), asked.Add(v1.EtcdSnapshotSkew)},
		{"a request answered", nil, request(true, ""), asked.Add(v1.EtcdSnapshotSkew)},
		{"a request failed", nil, request(true, "no master reported a snapshot"), time.Time{}},
		{"a request running in an upgrade", upgrade, request(false, ""), asked.Add(v1.EtcdSnapshotSkew)},
		{"a request answered before an upgrade", upgrade, request(true, ""), upgrade.StartedAt},
		{"a finished upgrade and a request answered", &upgradeRecord{State: v1.UpgradeSucceeded, StartedAt: upgrade.StartedAt}, request(true, ""), asked.Add(v1.EtcdSnapshotSkew)},
	} {
		rec := testRecord()
		rec.Upgrade, rec.EtcdSnapshot = c.upgrade, c.request
		if _, since := snapshotSettings(rec, true); !since.Equal(c.want) {
			t.Errorf("%s: since %s, want %s", c.what, since, c.want)
		}
		if _, since := snapshotSettings(rec, false); !since.IsZero() {
			t.Errorf("%s: an agent that takes no snapshots is asked for one since %s", c.what, since)
		}
	}
}

// A cluster's events are read after a sequence and up to a limit, the
// newest; another cluster's, even one whose name starts the same, never.
func TestEventsAfterASequenceNewestLast(t *testing.T) {
	st := openStore(t)
	var seqs []int64
	err := st.Update(func(tx *store.Tx) error {
		for i := range 12 {
			cluster := "a"
			if i%3 == 2 {
				cluster = "a-b"
			}
			seq, err := addEvent(tx, cluster, v1.Event{Time: time.Now(), Reason: "R", Message: cluster})
			if err != nil {
				return err
			}
			if cluster == "a" {
				seqs = append(seqs, seq)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	read := func(after int64, limit int) []int64 {
		t.Helper()
		var got []int64
		err := st.View(func(tx *store.Tx) error {
			evs, err := events(tx, "a", after, limit)
			for _, e := range evs {
				if e.Message != "a" || e.Type != "Normal" {
					t.Errorf("event %+v is not one of a's", e)
				}
				got = append(got, e.Seq)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := read(0, 100); !slices.Equal(got, seqs) {
		t.Errorf("all of a's events: %v, want %v", got, seqs)
	}
	if got := read(0, 3); !slices.Equal(got, seqs[len(seqs)-3:]) {
		t.Errorf("the newest 3: %v, want %v", got, seqs[len(seqs)-3:])
	}
	if got := read(seqs[4], 100); !slices.Equal(got, seqs[5:]) {
		t.Errorf("after %d: %v, want %v", seqs[4], got, seqs[5:])
	}
	if got := read(seqs[len(seqs)-1], 100); len(got) != 0 {
		t.Errorf("after the newest: %v, want none", got)
	}
}
