package cluster

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/store"
	"github.com/harmonykaas/harmony/controller/vsphere"
	"github.com/harmonykaas/harmony/internal/vcsim"
)

// These tests interleave an engine pass and an admin's request: a Service
// whose engine is not started (kick does nothing), on a store seeded by
// hand, and a real vcsim session for the engine's vCenter reads. They call
// engine functions with the snapshot a pass holds after the admin's change
// has been committed, as the engine's goroutine and an API request can
// interleave while the pass talks to vCenter.

type stubCatalog struct {
	p  v1.Provider
	vc *vsphere.Session
}

func (c stubCatalog) Provider(string) (v1.Provider, error) { return c.p, nil }
func (c stubCatalog) Session(context.Context, v1.Provider) (*vsphere.Session, error) {
	return c.vc, nil
}
func (c stubCatalog) Image(string, string) (*v1.Image, error) { return nil, store.ErrNotFound }

type stubBootstrap struct{}

func (stubBootstrap) Bootstrap(string, time.Duration) (*v1.Bootstrap, error) {
	return &v1.Bootstrap{}, nil
}

type passEnv struct {
	t   *testing.T
	s   *Service
	st  *store.Store
	p   *pass
	ctx context.Context
}

// newPassEnv seeds cluster c1: masters and workers settled (PoweredOn)
// on image "old", and an upgrade to "new" running.
func newPassEnv(t *testing.T, masters, workers, maxSurge int) *passEnv {
	t.Helper()
	ctx := context.Background()
	sim, err := vcsim.Start(vcsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	prov := sim.Provider("lab", &v1.IPPool{Network: "198.18.10.0/24", Ranges: []string{"198.18.10.20-198.18.10.79"}, Gateway: "198.18.10.1"})
	vc, err := vsphere.Connect(ctx, prov)
	if err != nil {
		t.Fatal(err)
	}
	folder, err := vc.ClusterFolder(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	st := openStore(t)
	s, err := New(Config{Store: st, Catalog: stubCatalog{prov, vc}, Bootstrap: stubBootstrap{}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	rec := testRecord()
	rec.Spec.Masters, rec.Spec.Workers = &masters, workers
	rec.Spec.Provider, rec.Spec.Image = "lab", "old"
	rec.Spec.WorkerSize = &v1.NodeSize{CPUs: 2, MemoryMiB: 2048}
	rec.Spec.MasterSize = &v1.NodeSize{CPUs: 2, MemoryMiB: 2048}
	rec.Spec.MasterDataDiskGiB = 1
	rec.UID, rec.Template, rec.TemplateBytes = "uid1", "/DC0/vm/tmpl-old", 1<<20
	rec.Generation, rec.ObservedGeneration = 2, 1
	rec.Upgrade = &upgradeRecord{Image: "new", KubernetesVersion: "v1.34.2", Template: "/DC0/vm/tmpl-new", TemplateBytes: 1 << 20,
		FromImage: "old", FromVersion: "v1.34.2", MaxSurge: maxSurge, By: "admin", State: v1.UpgradeRunning, StartedAt: now}
	sec, err := newSecrets(now)
	if err != nil {
		t.Fatal(err)
	}
	var ms []machine
	for i := 0; i < masters; i++ {
		ms = append(ms, rec.newMachine(v1.RoleMaster, now))
	}
	for i := 0; i < workers; i++ {
		ms = append(ms, rec.newMachine(v1.RoleWorker, now))
	}
	for i := range ms {
		ms[i].Step, ms[i].VM, ms[i].OSDatastore = stepPoweredOn, "vm-"+ms[i].Name, "LocalDS_0"
		if ms[i].Role == v1.RoleMaster {
			ms[i].DataDatastore = "LocalDS_0"
		}
	}
	err = st.Update(func(tx *store.Tx) error {
		if err := tx.Put(store.Providers, prov.Name, prov); err != nil {
			return err
		}
		if err := tx.Put(store.Secrets, secretKey("c1"), sec); err != nil {
			return err
		}
		if err := allocateIPs(tx, &prov, ms); err != nil {
			return err
		}
		if err := addMachines(tx, rec, sec, ms, now); err != nil {
			return err
		}
		op := v1.Operation{Kind: v1.OperationUpgrade, Cluster: "c1", Generation: 2, CreatedAt: now}
		if err := tx.AddOperation(&op); err != nil {
			return err
		}
		return tx.Put(store.Clusters, "c1", rec)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		stt := v1.Status{APIVersion: v1.APIVersion, Kind: "Status", NodeName: m.Name, Phase: v1.PhaseReady, ReportedAt: now,
			KubernetesNode: &v1.KubernetesNodeStatus{Ready: "True"}}
		if m.Role == v1.RoleMaster {
			stt.EtcdMemberID = "member-" + m.Name
			stt.Components = []v1.ComponentStatus{{Name: "etcd", Healthy: true}}
		}
		if err := st.SetStatus(stt); err != nil {
			t.Fatal(err)
		}
	}
	e := &passEnv{t: t, s: s, st: st, ctx: ctx, p: &pass{vc: vc, folder: folder}}
	e.load()
	return e
}

// load reads the cluster into the pass, as reconcile and finishPass do.
func (e *passEnv) load() []machine {
	e.t.Helper()
	var ms []machine
	err := e.st.View(func(tx *store.Tx) error {
		var err error
		if e.p.rec, err = loadCluster(tx, "c1"); err != nil {
			return err
		}
		if e.p.sec, err = loadSecrets(tx, "c1"); err != nil {
			return err
		}
		ms, err = loadMachines(tx, "c1")
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return ms
}

func (e *passEnv) all() []machine {
	e.t.Helper()
	var all []machine
	if err := e.st.View(func(tx *store.Tx) error { var err error; all, err = loadMachines(tx, "c1"); return err }); err != nil {
		e.t.Fatal(err)
	}
	return all
}

func (e *passEnv) machine(name string) (machine, bool) {
	var m machine
	err := e.st.View(func(tx *store.Tx) error { return tx.Get(store.Machines, machineKey("c1", name), &m) })
	return m, err == nil
}

// A pass decides to surge the next worker (advanceSurge) while an admin
// deletes the cluster: it once wrote its stale copy of the old worker back
// (no longer removed) and added a surge worker to a cluster being deleted.
func TestSurgeAfterADeleteLeavesTheClusterDeleted(t *testing.T) {
	e := newPassEnv(t, 1, 1, 1)
	machines := e.load() // finishPass's snapshot
	var old []machine
	for _, m := range machines {
		if m.Role == v1.RoleWorker {
			old = append(old, m)
		}
	}
	if _, err := e.s.Delete("c1", false, "admin"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.s.engine.advanceSurge(e.ctx, e.p, machines, old, 0); err != nil {
		t.Fatalf("advanceSurge: %v", err)
	}
	for _, m := range e.all() {
		if !m.Remove || m.ReplacedBy != "" {
			t.Errorf("%s after the delete: remove %v, replaced by %q", m.Name, m.Remove, m.ReplacedBy)
		}
	}
}

// A pass takes back a surge worker (abortSurge) while an admin deletes
// the cluster: the old worker it read stays removed.
func TestAbortSurgeAfterADeleteLeavesTheClusterDeleted(t *testing.T) {
	e := newPassEnv(t, 1, 1, 1)
	machines := e.load()
	var old []machine
	for _, m := range machines {
		if m.Role == v1.RoleWorker {
			old = append(old, m)
		}
	}
	if _, _, err := e.s.engine.advanceSurge(e.ctx, e.p, machines, old, 0); err != nil {
		t.Fatalf("advanceSurge: %v", err)
	}
	machines = e.load()
	if w1, _ := e.machine("c1-w1"); w1.ReplacedBy == "" {
		t.Fatalf("setup: c1-w1 got no surge worker: %+v", w1)
	}
	if _, err := e.s.Delete("c1", false, "admin"); err != nil {
		t.Fatal(err)
	}
	if err := e.s.engine.abortSurge(e.p, machines); err != nil {
		t.Fatalf("abortSurge: %v", err)
	}
	for _, m := range e.all() {
		if !m.Remove {
			t.Errorf("%s is live after the delete", m.Name)
		}
	}
}

// A pass starts the next master's replacement (startSwap) while an admin
// aborts: the abort saw no master swapping, so it flagged none for
// rollback, and a replacement started after it once ran to its end. None
// starts now, and the next pass ends the upgrade as aborted.
func TestNoSwapStartsAfterAnAbort(t *testing.T) {
	e := newPassEnv(t, 3, 0, 1)
	ms := e.load()
	if _, err := e.s.Upgrade(e.ctx, "c1", v1.UpgradeRequest{Abort: true}, "admin"); err != nil {
		t.Fatalf("abort: %v", err)
	}
	if _, err := e.s.engine.startSwap(e.p, "c1-m2"); err != nil {
		t.Fatalf("startSwap: %v", err)
	}
	if m2, _ := e.machine("c1-m2"); m2.Swap != nil {
		t.Fatalf("c1-m2's replacement started after the abort: %+v", m2.Swap)
	}
	ms = e.load()
	if _, err := e.s.engine.driveUpgrade(e.ctx, e.p, ms); err != nil {
		t.Fatal(err)
	}
	e.load()
	if st := e.p.rec.Upgrade.State; st != v1.UpgradeAborted {
		t.Errorf("after the next pass the upgrade is %s, want %s", st, v1.UpgradeAborted)
	}
}

// An admin amends a master's replacement to the fresh-disk path while its
// clone is in flight: the engine's copy of the machine, written back when
// the clone ends, once lost the amendment, and the new VM took the old
// disk. The amendment is kept while the new VM has no data disk yet; once
// it has the old one, an event says so.
func TestFreshDiskAmendmentSurvivesAStepInFlight(t *testing.T) {
	e := newPassEnv(t, 3, 0, 1)
	old, _ := e.machine("c1-m2")
	old.Swap = &swap{Step: swapCloning, OldVM: "vm-c1-m2", OldName: "c1-m2-old", OldDataDisk: old.DataDisk}
	old.Step = stepPending
	if err := e.st.Update(func(tx *store.Tx) error { return putMachine(tx, &old) }); err != nil {
		t.Fatal(err)
	}
	inFlight := old // the engine's copy, taken as the clone starts
	if _, err := e.s.Upgrade(e.ctx, "c1", v1.UpgradeRequest{FreshDisk: []string{"c1-m2"}}, "admin"); err != nil {
		t.Fatalf("amend: %v", err)
	}
	amended, _ := e.machine("c1-m2")
	if !amended.Swap.FreshDisk || amended.DataDisk == old.DataDisk {
		t.Fatalf("setup: the amendment stored %+v with disk %s", amended.Swap, amended.DataDisk)
	}
	for _, c := range []struct {
		step      string
		freshDisk bool
	}{
		{stepCloned, true},    // the clone ended: the fresh disk is still to come
		{stepDataDisk, false}, // the attach ended: the new VM has the old disk
	} {
		m := inFlight
		sw := *inFlight.Swap
		m.Swap, m.Step = &sw, c.step
		if err := e.st.Update(func(tx *store.Tx) error { return mergeProgress(tx, &m, time.Now()) }); err != nil {
			t.Fatal(err)
		}
		wantDisk := old.DataDisk
		if c.freshDisk {
			wantDisk = amended.DataDisk
		}
		if m.Swap.FreshDisk != c.freshDisk || m.DataDisk != wantDisk {
			t.Errorf("after %s: fresh disk %v with disk %s, want %v with %s", c.step, m.Swap.FreshDisk, m.DataDisk, c.freshDisk, wantDisk)
		}
	}
	var events []v1.Event
	if err := e.st.View(func(tx *store.Tx) error {
		var err error
		events, err = store.ListJSON[v1.Event](tx, store.Events, "")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(events, func(ev v1.Event) bool {
		return ev.Node == "c1-m2" && strings.Contains(ev.Message, "while its new VM was taking the old data disk")
	}) {
		t.Errorf("no event says the amendment came too late: %+v", events)
	}
}
