package controller

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/vcsim"
)

// nodeOVA is a small OVA shaped like the node image.
func nodeOVA(t testing.TB, version string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "harmony-node.ova")
	if err := vcsim.NodeOVA(context.Background(), out, version); err != nil {
		t.Fatal(err)
	}
	return out
}

// clusterEnv is a controller, a simulated vCenter, a provider and an
// imported node image.
type clusterEnv struct {
	t     *testing.T
	tc    *testController
	sim   *vcsim.Sim
	vc    *govmomi.Client
	image string
	// mutate is the controller's configuration, for restart.
	mutate []func(*Config)
}

// restart stops the controller (its engine's context ends: a step in
// flight is cut off and not recorded) and starts a new one on the same
// data.
func (e *clusterEnv) restart() {
	e.t.Helper()
	e.tc.shutdown()
	e.tc = startController(e.t, e.tc.dir, e.mutate...)
}

func testPool() *v1.IPPool {
	return &v1.IPPool{Network: "198.18.10.0/24", Ranges: []string{"198.18.10.20-198.18.10.79"},
		Gateway: "198.18.10.1", DNS: []string{"198.18.10.2"}}
}

func newClusterEnv(t *testing.T, mutate ...func(*Config)) *clusterEnv {
	t.Helper()
	return newClusterEnvOn(t, vcsim.Options{}, mutate...)
}

// newClusterEnvOn is newClusterEnv on a simulator made with opts.
func newClusterEnvOn(t *testing.T, opts vcsim.Options, mutate ...func(*Config)) *clusterEnv {
	t.Helper()
	sim, err := vcsim.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	return newClusterEnvAt(t, sim, mutate...)
}

// newClusterEnvAt is newClusterEnv against sim. A simulator in a process
// of its own (testutil.VCSimProcess) is a Sim with its Endpoint only: its
// model (AddFault, SetDatastoreFree) is out of reach.
func newClusterEnvAt(t *testing.T, sim *vcsim.Sim, mutate ...func(*Config)) *clusterEnv {
	t.Helper()
	// One VM in flight: govmomi's simulator (v0.56.0) races against itself
	// when VM changes on one datastore overlap (destroy vs reconfigure,
	// its fault injector's counters), and it runs inside this -race test
	// binary. The parallel path is measured by make bench-clusters.
	mutate = append([]func(*Config){func(c *Config) { c.RetryBase = 20 * time.Millisecond; c.CloneParallelism = 1 }}, mutate...)
	tc := startController(t, t.TempDir(), mutate...)
	u, _ := url.Parse(sim.URL)
	u.User = url.UserPassword(sim.Username, sim.Password)
	vc, err := govmomi.NewClient(context.Background(), u, true)
	if err != nil {
		t.Fatal(err)
	}
	env := &clusterEnv{t: t, tc: tc, sim: sim, vc: vc, mutate: mutate}
	r := doJSON(t, tc.admin, "PUT", tc.url+v1.PathProviders+"/lab", sim.Provider("lab", testPool()))
	if r.status != http.StatusCreated {
		t.Fatalf("apply provider: %d %s", r.status, r.body)
	}
	env.image = env.importImage(nodeOVA(t, "1.0.0"))
	return env
}

// importImage uploads an OVA, waits for its import and returns the image
// name.
func (e *clusterEnv) importImage(path string) string {
	e.t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		e.t.Fatal(err)
	}
	r := doJSON(e.t, e.tc.admin, "POST", e.tc.url+v1.PathImages+"?provider=lab", data)
	if r.status != http.StatusAccepted {
		e.t.Fatalf("import: %d %s", r.status, r.body)
	}
	var op v1.Operation
	r.decode(e.t, &op)
	if op = e.waitOp(op.ID); op.State != v1.OperationSucceeded {
		e.t.Fatalf("import %s: %s", op.State, op.Message)
	}
	_, name, _ := strings.Cut(op.Image, "/")
	return name
}

// waitOp watches an operation until it ends.
func (e *clusterEnv) waitOp(id string) v1.Operation {
	e.t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	var op v1.Operation
	for time.Now().Before(deadline) {
		r := doJSON(e.t, e.tc.admin, "GET", e.tc.url+v1.PathOperations+"/"+id+"?watch=true&timeout=10s&revision="+itoa(op.Revision), nil)
		if r.status != http.StatusOK {
			e.t.Fatalf("operation %s: %d %s", id, r.status, r.body)
		}
		r.decode(e.t, &op)
		if op.Done() {
			return op
		}
	}
	e.t.Fatalf("operation %s did not finish: %+v", id, op)
	return op
}

func (e *clusterEnv) spec(name string, masters, workers int) v1.ClusterSpec {
	return v1.ClusterSpec{APIVersion: v1.APIVersion, Kind: "Cluster", Name: name, Provider: "lab", Image: e.image,
		Masters: &masters, Workers: workers, VIP: "198.18.10.79",
		PodCIDR: "198.19.0.0/17", ServiceCIDR: "198.19.128.0/20", MasterDataDiskGiB: 8,
		WorkerSize: &v1.NodeSize{CPUs: 2, MemoryMiB: 2048}}
}

// do sends a request that starts an operation and waits for it.
func (e *clusterEnv) do(method, path string, body any) v1.Operation {
	e.t.Helper()
	r := doJSON(e.t, e.tc.admin, method, e.tc.url+path, body)
	if r.status != http.StatusAccepted {
		e.t.Fatalf("%s %s: %d %s", method, path, r.status, r.body)
	}
	var op v1.Operation
	r.decode(e.t, &op)
	op = e.waitOp(op.ID)
	if op.State != v1.OperationSucceeded {
		e.t.Fatalf("%s %s: operation %s: %s", method, path, op.State, op.Message)
	}
	return op
}

// vms reads the cluster folder's VMs straight from vCenter.
func (e *clusterEnv) vms(cluster string) map[string]mo.VirtualMachine {
	e.t.Helper()
	out, err := e.readVMs(cluster)
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// readVMs is vms for a goroutine, where a VM destroyed while it reads is
// no failure.
func (e *clusterEnv) readVMs(cluster string) (map[string]mo.VirtualMachine, error) {
	ctx := context.Background()
	f := find.NewFinder(e.vc.Client)
	folder, err := f.Folder(ctx, "/DC0/vm/harmony/"+cluster)
	if err != nil {
		return nil, nil
	}
	children, err := folder.Children(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]mo.VirtualMachine{}
	for _, c := range children {
		if c.Reference().Type != "VirtualMachine" {
			continue
		}
		var m mo.VirtualMachine
		if err := object.NewVirtualMachine(e.vc.Client, c.Reference()).Properties(ctx, c.Reference(),
			[]string{"name", "config", "runtime.powerState"}, &m); err != nil {
			return nil, err
		}
		out[m.Name] = m
	}
	return out, nil
}

func extraConfig(m mo.VirtualMachine, key string) string {
	for _, o := range m.Config.ExtraConfig {
		if v := o.GetOptionValue(); v.Key == key {
			s, _ := v.Value.(string)
			return s
		}
	}
	return ""
}

// dataDiskExists says whether the disk at a datastore path, "[DS] dir/name",
// is on its datastore.
func (e *clusterEnv) dataDiskExists(path string) bool {
	e.t.Helper()
	var p object.DatastorePath
	if !p.FromString(path) {
		e.t.Fatalf("%q is not a datastore path", path)
	}
	ds, err := find.NewFinder(e.vc.Client).Datastore(context.Background(), p.Datastore)
	if err != nil {
		e.t.Fatal(err)
	}
	_, err = ds.Stat(context.Background(), p.Path)
	return err == nil
}

func TestClusterLifecycle(t *testing.T) {
	e := newClusterEnv(t)

	// Importing the same file again is a no-op.
	data, _ := os.ReadFile(nodeOVA(t, "1.0.0"))
	if r := doJSON(t, e.tc.admin, "POST", e.tc.url+v1.PathImages+"?provider=lab", data); r.status != http.StatusOK {
		t.Fatalf("second import of the same OVA: %d %s, want 200", r.status, r.body)
	}
	var images v1.ImageList
	doJSON(t, e.tc.admin, "GET", e.tc.url+v1.PathImages, nil).decode(t, &images)
	if len(images.Items) != 1 || images.Items[0].Snapshot != "harmony-base" || images.Items[0].Versions["etcd-server"] != "3.4.23-4+b4" ||
		strings.Join(images.Items[0].KubernetesVersions, ",") != "v1.34.2,v1.33.4" {
		t.Fatalf("images: %+v", images.Items)
	}

	op := e.do("POST", v1.PathClusters, e.spec("prod", 3, 2))
	if len(op.Nodes) != 5 {
		t.Fatalf("operation shows %d nodes: %+v", len(op.Nodes), op.Nodes)
	}
	vms := e.vms("prod")
	if len(vms) != 5 {
		t.Fatalf("%d VMs in the cluster folder, want 5: %v", len(vms), keys(vms))
	}
	// The masters' data disks, in a folder named for the cluster and its
	// UID, as the view names them.
	disks := map[string]string{}
	for _, n := range e.cluster("prod").Status.Nodes {
		disks[n.Name] = n.DataDisk
	}
	var masterRefs []types.ManagedObjectReference
	for name, vm := range vms {
		master := strings.Contains(name, "-m")
		wantCPU, wantMem := int32(2), int32(2048)
		if master {
			wantCPU, wantMem = 1, 3840 // the sizing table's n1-standard-1 for 5 nodes
			masterRefs = append(masterRefs, vm.Self)
		}
		if vm.Config.Hardware.NumCPU != wantCPU || vm.Config.Hardware.MemoryMB != wantMem {
			t.Errorf("%s: %d vCPUs %d MiB, want %d and %d", name, vm.Config.Hardware.NumCPU, vm.Config.Hardware.MemoryMB, wantCPU, wantMem)
		}
		if vm.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOn {
			t.Errorf("%s is %s", name, vm.Runtime.PowerState)
		}
		boot, err := v1.DecodeBootstrap([]byte(extraConfig(vm, v1.GuestinfoKey)))
		if err != nil {
			t.Fatalf("%s: guestinfo bootstrap: %v", name, err)
		}
		if boot.NodeName != name || boot.Token == "" || boot.CAPin != e.tc.c.CA().Pin() {
			t.Errorf("%s: bootstrap %+v", name, boot)
		}
		netJSON, err := base64.StdEncoding.DecodeString(extraConfig(vm, v1.NetworkGuestinfoKey))
		if err != nil {
			t.Fatal(err)
		}
		var net v1.NetworkConfig
		if err := json.Unmarshal(netJSON, &net); err != nil || net.Validate() != nil || net.Hostname != name || !strings.HasPrefix(net.Address, "198.18.10.") {
			t.Errorf("%s: network %s (%v)", name, netJSON, err)
		}
		var dataDisks []string
		for _, d := range object.VirtualDeviceList(vm.Config.Hardware.Device).SelectByType((*types.VirtualDisk)(nil)) {
			if f := diskFileName(d); strings.Contains(f, "harmony-data/") {
				dataDisks = append(dataDisks, f)
			}
		}
		want := 0
		if master {
			want = 1
		}
		if len(dataDisks) != want || want == 1 && (dataDisks[0] != disks[name] || !strings.HasPrefix(disks[name], "[LocalDS_0] harmony-data/prod-") ||
			!strings.HasSuffix(disks[name], "/"+name+".vmdk")) {
			t.Errorf("%s: data disks %v, the view's %q", name, dataDisks, disks[name])
		}
	}
	e.assertAntiAffinity("harmony-prod-masters", masterRefs)
	// The node records carry the allocated addresses and roles.
	var role v1.Role
	doJSON(t, e.tc.admin, "GET", e.tc.url+v1.PathNodes+"/prod-m1/role", nil).decode(t, &role)
	if role.Cluster.VIP != "198.18.10.79" || len(role.Peers) != 5 || role.PKI == nil || role.PKI.EtcdCA == nil || role.PKI.EtcdCA.Key == "" {
		t.Errorf("master role: %+v", role.Redacted())
	}
	// Each node's provider ID is its own VM's BIOS UUID.
	for _, name := range []string{"prod-m1", "prod-w2"} {
		var r v1.Role
		doJSON(t, e.tc.admin, "GET", e.tc.url+v1.PathNodes+"/"+name+"/role", nil).decode(t, &r)
		if want := v1.VSphereProviderID(vms[name].Config.Uuid); vms[name].Config.Uuid == "" || r.ProviderID != want {
			t.Errorf("%s: provider ID %q, want %q", name, r.ProviderID, want)
		}
	}

	// Scale out and back in.
	four, two := 4, 2
	e.do("POST", v1.PathClusters+"/prod/scale", v1.ScaleRequest{Workers: &four})
	if n := len(e.vms("prod")); n != 7 {
		t.Fatalf("after scaling to 4 workers: %d VMs", n)
	}
	e.do("POST", v1.PathClusters+"/prod/scale", v1.ScaleRequest{Workers: &two})
	vms = e.vms("prod")
	if len(vms) != 5 || vms["prod-w4"].Name != "" || vms["prod-w3"].Name != "" {
		t.Fatalf("after scaling back to 2 workers: %v", keys(vms))
	}

	// Remove one worker keeping its VM, another destroying it.
	e.do("DELETE", v1.PathClusters+"/prod/nodes/prod-w1?keepVM=true", nil)
	e.do("DELETE", v1.PathClusters+"/prod/nodes/prod-w2", nil)
	vms = e.vms("prod")
	if len(vms) != 4 || vms["prod-w1"].Runtime.PowerState != types.VirtualMachinePowerStatePoweredOff || vms["prod-w2"].Name != "" {
		t.Fatalf("after removals: %v (w1 %s)", keys(vms), vms["prod-w1"].Runtime.PowerState)
	}
	var cl v1.Cluster
	doJSON(t, e.tc.admin, "GET", e.tc.url+v1.PathClusters+"/prod", nil).decode(t, &cl)
	if cl.Spec.Workers != 0 || len(cl.Status.Nodes) != 4 || cl.Status.Phase != v1.PhaseRunning {
		t.Fatalf("cluster after removals: workers %d, phase %s, nodes %+v", cl.Spec.Workers, cl.Status.Phase, cl.Status.Nodes)
	}
	if r := doJSON(t, e.tc.admin, "GET", e.tc.url+v1.PathNodes+"/prod-w1", nil); r.status != http.StatusNotFound {
		t.Errorf("the kept node's record still exists: %d", r.status)
	}
	if r := doJSON(t, e.tc.admin, "DELETE", e.tc.url+v1.PathClusters+"/prod/nodes/prod-m1", nil); r.status != http.StatusBadRequest || r.err.Field != "node" {
		t.Errorf("removing one master: %d %+v", r.status, r.err)
	}

	// Delete: the VMs go, the data disks stay.
	e.do("DELETE", v1.PathClusters+"/prod", nil)
	if vms := e.vms("prod"); len(vms) != 0 {
		t.Fatalf("after delete: %v", keys(vms))
	}
	for _, n := range []string{"prod-m1", "prod-m2", "prod-m3"} {
		if !e.dataDiskExists(disks[n]) {
			t.Errorf("data disk of %s was destroyed with the cluster", n)
		}
	}
	if r := doJSON(t, e.tc.admin, "GET", e.tc.url+v1.PathClusters+"/prod", nil); r.status != http.StatusNotFound {
		t.Errorf("deleted cluster still answers %d", r.status)
	}
	e.assertNoAntiAffinityVMs()
}

func TestClusterDeletePurgeRemovesDataDisks(t *testing.T) {
	e := newClusterEnv(t)
	e.do("POST", v1.PathClusters, e.spec("tmp", 1, 0))
	disk := e.cluster("tmp").Status.Nodes[0].DataDisk
	if disk == "" || !e.dataDiskExists(disk) {
		t.Fatalf("no data disk after create (the view says %q)", disk)
	}
	e.do("DELETE", v1.PathClusters+"/tmp?purge=true", nil)
	if e.dataDiskExists(disk) {
		t.Fatal("purge kept the data disk")
	}
}

// A cluster made again under the name of one deleted without purge gets
// disks of its own: the deleted one's stay as they are, holding its etcd
// keyspace, which the new cluster must not start from, and the new
// cluster's purge leaves them.
func TestAClusterMadeAgainDoesNotTakeTheDeletedOnesDisks(t *testing.T) {
	e := newClusterEnv(t)
	diskOf := func() string {
		t.Helper()
		nodes := e.cluster("again").Status.Nodes
		if len(nodes) != 1 || nodes[0].DataDisk == "" {
			t.Fatalf("nodes %+v, want one master with a data disk", nodes)
		}
		return nodes[0].DataDisk
	}
	e.do("POST", v1.PathClusters, e.spec("again", 1, 0))
	old := diskOf()
	e.do("DELETE", v1.PathClusters+"/again", nil)
	if !e.dataDiskExists(old) {
		t.Fatalf("the deleted cluster's data disk %s went with it", old)
	}
	e.do("POST", v1.PathClusters, e.spec("again", 1, 0))
	if disk := diskOf(); disk == old || !e.dataDiskExists(disk) {
		t.Fatalf("the cluster made again has the data disk %s (exists: %v); the deleted one's is %s", disk, e.dataDiskExists(disk), old)
	}
	e.do("DELETE", v1.PathClusters+"/again?purge=true", nil)
	if !e.dataDiskExists(old) {
		t.Errorf("purging the cluster made again removed the deleted one's data disk %s", old)
	}
}

func diskFileName(d types.BaseVirtualDevice) string {
	if b, ok := d.GetVirtualDevice().Backing.(types.BaseVirtualDeviceFileBackingInfo); ok {
		return b.GetVirtualDeviceFileBackingInfo().FileName
	}
	return ""
}

func (e *clusterEnv) rules() []types.BaseClusterRuleInfo {
	e.t.Helper()
	cl, err := find.NewFinder(e.vc.Client).ClusterComputeResource(context.Background(), "/DC0/host/DC0_C0")
	if err != nil {
		e.t.Fatal(err)
	}
	var ccr mo.ClusterComputeResource
	if err := cl.Properties(context.Background(), cl.Reference(), []string{"configurationEx"}, &ccr); err != nil {
		e.t.Fatal(err)
	}
	return ccr.ConfigurationEx.(*types.ClusterConfigInfoEx).Rule
}

func (e *clusterEnv) assertAntiAffinity(name string, vms []types.ManagedObjectReference) {
	e.t.Helper()
	for _, r := range e.rules() {
		rule, ok := r.(*types.ClusterAntiAffinityRuleSpec)
		if !ok || rule.Name != name {
			continue
		}
		if len(rule.Vm) != len(vms) || rule.Enabled == nil || !*rule.Enabled {
			e.t.Fatalf("rule %s: %+v, want %d VMs", name, rule, len(vms))
		}
		for _, want := range vms {
			found := false
			for _, have := range rule.Vm {
				found = found || have == want
			}
			if !found {
				e.t.Fatalf("rule %s lacks master %s", name, want.Value)
			}
		}
		return
	}
	e.t.Fatalf("no anti-affinity rule %s", name)
}

// assertNoAntiAffinityVMs checks that no rule names a VM that is gone.
func (e *clusterEnv) assertNoAntiAffinityVMs() {
	e.t.Helper()
	for _, r := range e.rules() {
		if rule, ok := r.(*types.ClusterAntiAffinityRuleSpec); ok && strings.HasPrefix(rule.Name, "harmony-") && len(rule.Vm) > 0 {
			for _, vm := range rule.Vm {
				if err := object.NewVirtualMachine(e.vc.Client, vm).Properties(context.Background(), vm, []string{"name"}, &mo.VirtualMachine{}); err == nil {
					continue
				}
				e.t.Errorf("rule %s names a destroyed VM %s", rule.Name, vm.Value)
			}
		}
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
