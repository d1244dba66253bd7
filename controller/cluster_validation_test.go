package controller

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/types"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/store"
)

// TestClusterValidation sends one broken spec per rule; each is refused
// naming its field, and nothing reaches vCenter.
func TestClusterValidation(t *testing.T) {
	e := newClusterEnv(t)
	// Another cluster holds 198.18.10.78 as its VIP.
	other := e.spec("other", 1, 0)
	other.VIP = "198.18.10.78"
	e.do("POST", v1.PathClusters, other)

	intp := func(v int) *int { return &v }
	cases := []struct {
		name   string
		mutate func(*v1.ClusterSpec)
		status int
		field  string
	}{
		{"even masters", func(s *v1.ClusterSpec) { s.Masters = intp(2) }, 400, "masters"},
		{"too many masters", func(s *v1.ClusterSpec) { s.Masters = intp(9) }, 400, "masters"},
		{"negative workers", func(s *v1.ClusterSpec) { s.Workers = -1 }, 400, "workers"},
		{"overlapping CIDRs", func(s *v1.ClusterSpec) { s.ServiceCIDR = "198.19.0.0/20" }, 400, "serviceCIDR"},
		{"pod CIDR not a network", func(s *v1.ClusterSpec) { s.PodCIDR = "198.19.0.1/17" }, 400, "podCIDR"},
		{"VIP outside the pool", func(s *v1.ClusterSpec) { s.VIP = "198.18.11.5" }, 400, "vip"},
		{"VIP not an address", func(s *v1.ClusterSpec) { s.VIP = "vip" }, 400, "vip"},
		{"VIP inside the pod CIDR", func(s *v1.ClusterSpec) { s.VIP = "198.19.0.10" }, 400, "vip"},
		{"VIP of another cluster", func(s *v1.ClusterSpec) { s.VIP = "198.18.10.78" }, 409, "vip"},
		{"unknown version", func(s *v1.ClusterSpec) { s.KubernetesVersion = "v1.30.0" }, 400, "kubernetesVersion"},
		{"malformed version", func(s *v1.ClusterSpec) { s.KubernetesVersion = "latest" }, 400, "kubernetesVersion"},
		{"unknown provider", func(s *v1.ClusterSpec) { s.Provider = "nowhere" }, 400, "provider"},
		{"unknown image", func(s *v1.ClusterSpec) { s.Image = "harmony-node-9" }, 400, "image"},
		{"bad name", func(s *v1.ClusterSpec) { s.Name = "Prod_1" }, 400, "name"},
		{"worker too big", func(s *v1.ClusterSpec) { s.WorkerSize = &v1.NodeSize{CPUs: 16, MemoryMiB: 4096} }, 400, "workerSize.cpus"},
		{"worker memory too small", func(s *v1.ClusterSpec) { s.WorkerSize = &v1.NodeSize{CPUs: 2, MemoryMiB: 1024} }, 400, "workerSize.memoryMiB"},
		{"data disk too big", func(s *v1.ClusterSpec) { s.MasterDataDiskGiB = 1 << 20 }, 400, "masterDataDiskGiB"},
		{"bad contiv mode", func(s *v1.ClusterSpec) { s.Contiv = &v1.ContivSettings{Mode: "bgp"} }, 400, "contiv.mode"},
		{"unknown network plugin", func(s *v1.ClusterSpec) { s.Network = &v1.NetworkSpec{Plugin: "calico"} }, 400, "network.plugin"},
		{"pool too small", func(s *v1.ClusterSpec) { s.Workers = 100 }, 422, "ipPool"},
		{"existing name", func(s *v1.ClusterSpec) { s.Name = "other"; s.VIP = "198.18.10.77" }, 409, "name"},
		{"VIP held by a node", func(s *v1.ClusterSpec) { s.VIP = "198.18.10.20" }, 409, "vip"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := e.spec("bad", 3, 1)
			tc.mutate(&spec)
			r := doJSON(t, e.tc.admin, "POST", e.tc.url+v1.PathClusters, spec)
			if r.status != tc.status || r.err.Field != tc.field {
				t.Fatalf("got %d field %q (%s), want %d field %q", r.status, r.err.Field, r.err.Message, tc.status, tc.field)
			}
		})
	}
	// Unknown fields and wrong types are refused by name too.
	r := doJSON(t, e.tc.admin, "POST", e.tc.url+v1.PathClusters, []byte(`{"apiVersion":"harmony.dev/v1","kind":"Cluster","name":"x","mastrs":3}`))
	if r.status != 400 || r.err.Field != "mastrs" {
		t.Fatalf("unknown field: %d %+v", r.status, r.err)
	}
	r = doJSON(t, e.tc.admin, "POST", e.tc.url+v1.PathClusters, []byte(`{"apiVersion":"harmony.dev/v1","kind":"Cluster","name":"x","workers":"two"}`))
	if r.status != 400 || r.err.Field != "workers" {
		t.Fatalf("wrong type: %d %+v", r.status, r.err)
	}
	if vms := e.vms("bad"); len(vms) != 0 {
		t.Fatalf("refused specs made VMs: %v", keys(vms))
	}
	var list v1.ClusterList
	doJSON(t, e.tc.admin, "GET", e.tc.url+v1.PathClusters, nil).decode(t, &list)
	if len(list.Items) != 1 {
		t.Fatalf("%d clusters stored, want only \"other\"", len(list.Items))
	}
}

// TestClusterPrecheckDatastoreTooSmall makes vcsim's datastore report
// 1 GiB free: the create is refused before any VM exists, naming the
// datastores and the space needed.
func TestClusterPrecheckDatastoreTooSmall(t *testing.T) {
	e := newClusterEnv(t)
	if err := e.sim.SetDatastoreFree("LocalDS_0", 1<<30); err != nil {
		t.Fatal(err)
	}
	r := doJSON(t, e.tc.admin, "POST", e.tc.url+v1.PathClusters, e.spec("big", 3, 2))
	if r.status != http.StatusUnprocessableEntity || r.err.Code != v1.CodePrecheckFailed || r.err.Field != "datastores.data" ||
		!strings.Contains(r.err.Message, "not enough free space") {
		t.Fatalf("got %d %+v", r.status, r.err)
	}
	if vms := e.vms("big"); len(vms) != 0 {
		t.Fatalf("the pre-check let VMs be made: %v", keys(vms))
	}
	// The addresses were not taken: a fitting cluster gets the same VIP.
	if err := e.sim.SetDatastoreFree("LocalDS_0", 1<<40); err != nil {
		t.Fatal(err)
	}
	e.do("POST", v1.PathClusters, e.spec("big", 1, 0))
}

// TestClusterPrecheckMemory asks for more memory than the hosts have.
func TestClusterPrecheckMemory(t *testing.T) {
	e := newClusterEnv(t)
	// 7 masters of 120 GiB: 840 GiB, the hosts have 3 × 256.
	spec := e.spec("fat", 7, 0)
	spec.MasterSize = &v1.NodeSize{CPUs: 32, MemoryMiB: 120 << 10}
	r := doJSON(t, e.tc.admin, "POST", e.tc.url+v1.PathClusters, spec)
	if r.status != http.StatusUnprocessableEntity || r.err.Field != "provider" || !strings.Contains(r.err.Message, "memory") {
		t.Fatalf("got %d %+v", r.status, r.err)
	}
}

// TestClusterRetriesInjectedFaults makes vcsim fail the first clones and
// power-ons; the workflow retries with backoff and the cluster completes,
// with the failures in its events.
func TestClusterRetriesInjectedFaults(t *testing.T) {
	e := newClusterEnv(t)
	e.sim.AddFault("CloneVM_Task", 2)
	e.sim.AddFault("PowerOnVM_Task", 2)
	e.do("POST", v1.PathClusters, e.spec("flaky", 1, 1))
	if vms := e.vms("flaky"); len(vms) != 2 {
		t.Fatalf("%d VMs, want 2", len(vms))
	}
	var cl v1.Cluster
	doJSON(t, e.tc.admin, "GET", e.tc.url+v1.PathClusters+"/flaky", nil).decode(t, &cl)
	var clones, powers int
	for _, ev := range cl.Status.Events {
		if ev.Reason == "StepFailed" && strings.Contains(ev.Message, "CloneVM_Task") {
			clones++
		}
		if ev.Reason == "StepFailed" && strings.Contains(ev.Message, "PowerOnVM_Task") {
			powers++
		}
	}
	if clones != 2 || powers != 2 || cl.Status.Phase != v1.PhaseRunning {
		t.Fatalf("phase %s, %d clone and %d power-on failures recorded, want 2 and 2: %+v", cl.Status.Phase, clones, powers, cl.Status.Events)
	}
}

// TestClusterPermanentFailureIsReported exhausts the attempts: the
// operation fails, the cluster says why, and a retry after the cause is
// gone completes it.
func TestClusterPermanentFailureIsReported(t *testing.T) {
	e := newClusterEnv(t, func(c *Config) { c.MaxAttempts = 2 })
	e.sim.AddFault("PowerOnVM_Task", 2)
	r := doJSON(t, e.tc.admin, "POST", e.tc.url+v1.PathClusters, e.spec("stuck", 1, 0))
	var op v1.Operation
	r.decode(t, &op)
	if op = e.waitOp(op.ID); op.State != v1.OperationFailed || !strings.Contains(op.Message, "PowerOnVM_Task") {
		t.Fatalf("operation: %s %q", op.State, op.Message)
	}
	var cl v1.Cluster
	doJSON(t, e.tc.admin, "GET", e.tc.url+v1.PathClusters+"/stuck", nil).decode(t, &cl)
	failed := false
	for _, c := range cl.Status.Conditions {
		failed = failed || c.Type == v1.ConditionFailed && c.Status == "True" && strings.Contains(c.Message, "stuck-m1")
	}
	if cl.Status.Phase != v1.PhaseFailed || !failed {
		t.Fatalf("phase %s conditions %+v", cl.Status.Phase, cl.Status.Conditions)
	}
	e.do("POST", v1.PathClusters+"/stuck/retry", nil)
	doJSON(t, e.tc.admin, "GET", e.tc.url+v1.PathClusters+"/stuck", nil).decode(t, &cl)
	if cl.Status.Phase != v1.PhaseRunning {
		t.Fatalf("after retry: %s %+v", cl.Status.Phase, cl.Status.Conditions)
	}
}

// TestProviderSecrets: the password is never returned or logged, and a
// wrong password or inventory name is refused naming the field.
func TestProviderSecrets(t *testing.T) {
	e := newClusterEnv(t)
	for _, path := range []string{v1.PathProviders, v1.PathProviders + "/lab"} {
		r := doJSON(t, e.tc.admin, "GET", e.tc.url+path, nil)
		if strings.Contains(string(r.body), e.sim.Password) {
			t.Fatalf("GET %s shows the password: %s", path, r.body)
		}
	}
	if strings.Contains(e.tc.logs.String(), e.sim.Password) {
		t.Fatal("the controller logged the vCenter password")
	}
	p := e.sim.Provider("lab", testPool())
	p.VCenter.Password = "wrong"
	if r := doJSON(t, e.tc.admin, "PUT", e.tc.url+v1.PathProviders+"/lab", p); r.status != http.StatusBadGateway || r.err.Code != v1.CodeVCenterUnreachable {
		t.Fatalf("wrong password: %d %+v", r.status, r.err)
	}
	p = e.sim.Provider("lab2", testPool())
	p.Datastores.OS = []string{"NoSuchDS"}
	if r := doJSON(t, e.tc.admin, "PUT", e.tc.url+v1.PathProviders+"/lab2", p); r.status != 400 || r.err.Field != "datastores.os[0]" {
		t.Fatalf("unknown datastore: %d %+v", r.status, r.err)
	}
	p = e.sim.Provider("lab3", testPool())
	p.VCenter.URL = strings.Replace(p.VCenter.URL, "https://", "https://user:pw@", 1)
	if r := doJSON(t, e.tc.admin, "PUT", e.tc.url+v1.PathProviders+"/lab3", p); r.status != 400 || r.err.Field != "vcenter.url" {
		t.Fatalf("credentials in the URL: %d %+v", r.status, r.err)
	}
	p = e.sim.Provider("lab4", testPool())
	p.VCenter.Thumbprint = ""
	if r := doJSON(t, e.tc.admin, "PUT", e.tc.url+v1.PathProviders+"/lab4", p); r.status != http.StatusBadGateway {
		t.Fatalf("an unpinned self-signed vCenter was trusted: %d %+v", r.status, r.err)
	}
	// Re-applying without a password keeps the stored one.
	p = e.sim.Provider("lab", testPool())
	p.VCenter.Password = ""
	if r := doJSON(t, e.tc.admin, "PUT", e.tc.url+v1.PathProviders+"/lab", p); r.status != http.StatusOK {
		t.Fatalf("re-apply without password: %d %s", r.status, r.body)
	}
	// A provider in use cannot be deleted.
	e.do("POST", v1.PathClusters, e.spec("uses", 1, 0))
	if r := doJSON(t, e.tc.admin, "DELETE", e.tc.url+v1.PathProviders+"/lab", nil); r.status != http.StatusConflict {
		t.Fatalf("delete a provider in use: %d %+v", r.status, r.err)
	}
	moved := e.sim.Provider("lab", testPool())
	moved.Folder = "elsewhere"
	if r := doJSON(t, e.tc.admin, "PUT", e.tc.url+v1.PathProviders+"/lab", moved); r.status != http.StatusConflict || r.err.Field != "folder" {
		t.Fatalf("moving the folder of a provider in use: %d %+v", r.status, r.err)
	}
	// Without an admin certificate nothing is served.
	if r := doJSON(t, e.tc.anonClient(), "GET", e.tc.url+v1.PathProviders, nil); r.status != http.StatusUnauthorized {
		t.Fatalf("anonymous provider list: %d", r.status)
	}
}

// TestClusterHealsVanishedVM destroys a master's VM behind the
// controller's back: the next pass clones it again and attaches the data
// disk that outlived it.
func TestClusterHealsVanishedVM(t *testing.T) {
	e := newClusterEnv(t)
	e.do("POST", v1.PathClusters, e.spec("heal", 1, 0))
	before := e.vms("heal")["heal-m1"]
	disk := e.cluster("heal").Status.Nodes[0].DataDisk
	vm := object.NewVirtualMachine(e.vc.Client, before.Self)
	ctx := context.Background()
	if task, err := vm.PowerOff(ctx); err == nil {
		_ = task.Wait(ctx)
	}
	// Detach the data disk first, as vCenter users are told to; vcsim
	// would otherwise keep nothing of the VM's devices anyway.
	devices, _ := vm.Device(ctx)
	for _, d := range devices.SelectByType((*types.VirtualDisk)(nil)) {
		if strings.Contains(diskFileName(d), "harmony-data/") {
			if err := vm.RemoveDevice(ctx, true, d); err != nil {
				t.Fatal(err)
			}
		}
	}
	task, err := vm.Destroy(ctx)
	if err == nil {
		err = task.Wait(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	// vcsim derives a VM's BIOS UUID from its name, so the record is given
	// another, as vCenter would have chosen: the re-made VM must take it.
	const uuid = "4213a7c6-2f0e-4b1d-9a3e-5c1b2d3e4f50"
	err = e.tc.c.store.Update(func(tx *store.Tx) error {
		var m map[string]any
		if err := tx.Get(store.Machines, "heal/heal-m1", &m); err != nil {
			return err
		}
		m["uuid"] = uuid
		return tx.Put(store.Machines, "heal/heal-m1", m)
	})
	if err != nil {
		t.Fatal(err)
	}
	e.do("POST", v1.PathClusters+"/heal/retry", nil)
	after, ok := e.vms("heal")["heal-m1"]
	if !ok || after.Self == before.Self || after.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOn {
		t.Fatalf("heal-m1 not re-made: %+v", after.Self)
	}
	found := false
	for _, d := range object.VirtualDeviceList(after.Config.Hardware.Device).SelectByType((*types.VirtualDisk)(nil)) {
		found = found || disk != "" && diskFileName(d) == disk
	}
	if !found {
		t.Fatal("the re-made VM lacks the surviving data disk")
	}
	// It is the same machine to vSphere and Kubernetes: the BIOS UUID the
	// role's providerID names.
	if after.Config.Uuid != uuid {
		t.Errorf("the re-made VM's BIOS UUID is %s, want the record's %s: the Node's providerID would name no VM", after.Config.Uuid, uuid)
	}

	// A VM an admin moved out of the cluster folder is still there, and
	// still the node's: it is not made again (two VMs on one data disk).
	dc, err := find.NewFinder(e.vc.Client).DefaultDatacenter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	folders, err := dc.Folders(ctx)
	if err != nil {
		t.Fatal(err)
	}
	move, err := folders.VmFolder.MoveInto(ctx, []types.ManagedObjectReference{after.Self})
	if err == nil {
		err = move.Wait(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	e.do("POST", v1.PathClusters+"/heal/retry", nil) // a pass, and its sweep
	if vms := e.vms("heal"); len(vms) != 0 {
		t.Errorf("heal-m1 was made again when its VM %s moved out of the folder: %v", after.Self.Value, keys(vms))
	}
	if node := e.cluster("heal").Status.Nodes[0]; node.VM != after.Self.Value {
		t.Errorf("heal-m1's VM after the move: %s, want %s", node.VM, after.Self.Value)
	}
}
