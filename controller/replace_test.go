package controller

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/types"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/vsphere"
)

// powerOff powers a VM off behind the controller's back, as a guest that
// crashed or an admin in vCenter does.
func (e *clusterEnv) powerOff(vm types.ManagedObjectReference) {
	e.t.Helper()
	task, err := object.NewVirtualMachine(e.vc.Client, vm).PowerOff(context.Background())
	if err == nil {
		err = task.Wait(context.Background())
	}
	if err != nil {
		e.t.Fatalf("power off %s: %v", vm.Value, err)
	}
}

// unregister removes a VM from vCenter's inventory behind the
// controller's back, as an admin's "Remove from Inventory" does (after a
// power-off, which it needs): its files, and the data disk it had, stay
// on the datastore.
func (e *clusterEnv) unregister(vm types.ManagedObjectReference) {
	e.t.Helper()
	ctx := context.Background()
	if power, err := object.NewVirtualMachine(e.vc.Client, vm).PowerState(ctx); err != nil {
		e.t.Fatalf("power state of %s: %v", vm.Value, err)
	} else if power == types.VirtualMachinePowerStatePoweredOn {
		e.powerOff(vm)
	}
	if err := object.NewVirtualMachine(e.vc.Client, vm).Unregister(ctx); err != nil {
		e.t.Fatalf("unregister %s: %v", vm.Value, err)
	}
}

// waitReplacementStep waits for node's replacement to reach step.
func (e *clusterEnv) waitReplacementStep(cluster, node, step string) {
	e.t.Helper()
	waitFor(e.t, node+"'s replacement at "+step, func() bool {
		for _, n := range e.cluster(cluster).Status.Nodes {
			if n.Name == node {
				return n.Upgrade == step
			}
		}
		return false
	})
}

// A broken master is replaced by a new VM of the same name, BIOS UUID and
// image: one powered off on its data disk, as the same etcd member,
// without a hand-over; one whose agent went silent on a new, empty disk
// once it has been silent long enough. Every check refuses what it
// should first, and nothing else may change the cluster meanwhile.
func TestReplaceNodeRepairsABrokenMaster(t *testing.T) {
	e := newClusterEnv(t, func(c *Config) { c.LeaveTimeout = 20 * time.Second; c.UpgradeNodeTimeout = time.Minute })
	newImage := e.importImage(nodeOVA(t, "1.1.0"))
	e.do("POST", v1.PathClusters, e.spec("rp", 3, 1))
	fl := e.startFleet("rp", "")
	e.waitAllReady("rp")
	replace := func(node string) string { return v1.PathClusters + "/rp/nodes/" + node + "/replace" }

	fl.hold("rp-m3", true) // reports Converging: the cluster would lose its quorum with rp-m2 down
	waitFor(t, "rp-m3 reporting Converging", func() bool {
		for _, n := range e.cluster("rp").Status.Nodes {
			if n.Name == "rp-m3" {
				return n.AgentPhase == v1.PhaseConverging
			}
		}
		return false
	})
	for _, c := range []struct {
		node   string
		body   any
		status int
		code   string
		field  string
		says   string
	}{
		{"rp-w1", v1.ReplaceNodeRequest{}, http.StatusBadRequest, v1.CodeBadRequest, "node", "remove-node"},
		{"rp-m9", v1.ReplaceNodeRequest{}, http.StatusNotFound, v1.CodeNotFound, "node", "no node"},
		{"rp-m2", map[string]bool{"fresh_disk": true}, http.StatusBadRequest, v1.CodeBadRequest, "fresh_disk", ""},
		{"rp-m2", v1.ReplaceNodeRequest{}, http.StatusUnprocessableEntity, v1.CodePrecheckFailed, "node", "rp-m3 is not Ready"},
	} {
		r := doJSON(t, e.tc.admin, "POST", e.tc.url+replace(c.node), c.body)
		r.wantStatus(t, c.status, c.code)
		if r.err.Field != c.field || !strings.Contains(r.err.Message, c.says) {
			t.Errorf("replace %s %+v: field %q, %q; want field %q saying %q", c.node, c.body, r.err.Field, r.err.Message, c.field, c.says)
		}
	}
	fl.hold("rp-m3", false)
	e.waitAllReady("rp")

	// A single master's fresh disk would found a new, empty etcd: refused.
	single := e.spec("r1", 1, 0)
	single.VIP = "198.18.10.78"
	e.do("POST", v1.PathClusters, single)
	r := doJSON(t, e.tc.admin, "POST", e.tc.url+v1.PathClusters+"/r1/nodes/r1-m1/replace", v1.ReplaceNodeRequest{FreshDisk: true})
	r.wantStatus(t, http.StatusBadRequest, v1.CodeBadRequest)
	if r.err.Field != "freshDisk" || !strings.Contains(r.err.Message, "data would be lost") {
		t.Errorf("a fresh disk for the only master: field %q, %q", r.err.Field, r.err.Message)
	}

	// 1. rp-m2's VM is off (a guest that no longer boots): no hand-over
	// to wait for; the new VM takes its disk and is the same member.
	before := e.snapshotVMs("rp")
	old := e.vms("rp")["rp-m2"].Self
	e.powerOff(old)
	fl.settle()
	op := e.start("POST", replace("rp-m2"), nil) // an empty body: the defaults
	if got := e.waitOp(op.ID); got.State != v1.OperationSucceeded {
		t.Fatalf("replace rp-m2: %s: %s", got.State, got.Message)
	}
	vms := e.vms("rp")
	switch vm, ok := vms["rp-m2"]; {
	case !ok:
		t.Fatalf("no rp-m2 after its replacement: %v", keys(vms))
	case vm.Self.Value == old.Value:
		t.Errorf("rp-m2 is still the old VM %s", old.Value)
	case vm.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOn:
		t.Errorf("the new rp-m2 is %s", vm.Runtime.PowerState)
	case dataDiskOf(vm) != before.disk["rp-m2"] || vm.Config.Uuid != before.uuid["rp-m2"]:
		t.Errorf("the new rp-m2 has disk %q and UUID %s; the old had %q and %s", dataDiskOf(vm), vm.Config.Uuid, before.disk["rp-m2"], before.uuid["rp-m2"])
	case extraConfig(vm, vsphere.TagImage) != e.image:
		t.Errorf("the new rp-m2 is of image %s, want %s", extraConfig(vm, vsphere.TagImage), e.image)
	}
	if len(vms) != 4 {
		t.Errorf("VMs after the replacement: %v, want the 3 masters and the worker (the old VM destroyed)", keys(vms))
	}
	if fl.handedOver("rp-m2") {
		t.Error("rp-m2's role said HandOver to a VM that was off")
	}
	if ev := e.event("rp", "rp-m2", "not handed over: its VM is poweredOff"); ev.Type != "Warning" || ev.Reason != "Replace" {
		t.Errorf("the hand-over event: %+v", ev)
	}
	if ev := e.event("rp", "rp-m2", "replaced by a VM of image "+e.image); ev.Reason != "Replaced" {
		t.Errorf("the last event: %+v", ev)
	}

	// 2. rp-m3's guest hangs: its VM runs, its agent says nothing. The
	// replacement waits for it, and nothing else may change the cluster.
	fl.silence(e.vms("rp")["rp-m3"].Self.Value)
	fl.settle()
	asked := time.Now()
	op = e.start("POST", replace("rp-m3"), v1.ReplaceNodeRequest{FreshDisk: true})
	two, five := 2, 5
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"POST", replace("rp-m1"), nil},
		{"POST", v1.PathClusters + "/rp/scale", v1.ScaleRequest{Workers: &two}},
		{"POST", v1.PathClusters + "/rp/scale", v1.ScaleRequest{Masters: &five}},
		{"POST", v1.PathClusters + "/rp/upgrade", v1.UpgradeRequest{Image: newImage}},
		{"POST", v1.PathClusters + "/rp/restore", v1.RestoreRequest{}},
	} {
		r := doJSON(t, e.tc.admin, c.method, e.tc.url+c.path, c.body)
		if r.status != http.StatusConflict && r.status != http.StatusUnprocessableEntity {
			t.Errorf("%s %s %+v while rp-m3 is replaced: %d %s", c.method, c.path, c.body, r.status, r.body)
		}
	}
	if got := e.waitOp(op.ID); got.State != v1.OperationSucceeded {
		t.Fatalf("replace rp-m3: %s: %s", got.State, got.Message)
	}
	if took := time.Since(asked); took < 20*time.Second {
		t.Errorf("rp-m3's replacement took %s: it did not wait for its agent", took)
	}
	if ev := e.event("rp", "rp-m3", "its agent has been silent since the request"); ev.Type != "Warning" {
		t.Errorf("the hand-over event: %+v", ev)
	}
	after := e.snapshotVMs("rp")
	if d := after.disk["rp-m3"]; d == "" || d == before.disk["rp-m3"] || !strings.Contains(d, "/rp-m3-") || !e.dataDiskExists(d) {
		t.Errorf("rp-m3's data disk after the fresh-disk path: %q (before %q)", d, before.disk["rp-m3"])
	}
	if !e.dataDiskExists(before.disk["rp-m3"]) {
		t.Errorf("rp-m3's old disk %s was deleted", before.disk["rp-m3"])
	}
	if after.uuid["rp-m3"] != before.uuid["rp-m3"] || after.disk["rp-m1"] != before.disk["rp-m1"] {
		t.Errorf("after rp-m3's replacement: UUID %s (was %s), rp-m1's disk %s (was %s)", after.uuid["rp-m3"], before.uuid["rp-m3"], after.disk["rp-m1"], before.disk["rp-m1"])
	}
	if shared := fl.sharedDisk(); shared != "" {
		t.Errorf("a data disk was on two VMs at once: %s", shared)
	}
	for _, n := range e.cluster("rp").Status.Nodes {
		if n.Upgrade != "" || n.Image != e.image {
			t.Errorf("node %s after the replacements: upgrade %q, image %s", n.Name, n.Upgrade, n.Image)
		}
	}
	// Nothing is left over that holds the cluster: it scales again.
	e.waitAllReady("rp")
	if got := e.waitOp(e.start("POST", v1.PathClusters+"/rp/scale", v1.ScaleRequest{Workers: &two}).ID); got.State != v1.OperationSucceeded {
		t.Errorf("scale after the replacements: %s: %s", got.State, got.Message)
	}

	// Nor does a replacement start while another node is on its way out
	// (rp-w1's pods cannot move, so it stays Leaving for a while).
	fl.setStuck("rp-w1", true)
	removal := e.start("DELETE", v1.PathClusters+"/rp/nodes/rp-w1", nil)
	r = doJSON(t, e.tc.admin, "POST", e.tc.url+replace("rp-m1"), nil)
	r.wantStatus(t, http.StatusConflict, v1.CodeConflict)
	if !strings.Contains(r.err.Message, "rp-w1") || !strings.Contains(r.err.Message, "being removed") {
		t.Errorf("replace while rp-w1 leaves: %s", r.err.Message)
	}
	fl.setStuck("rp-w1", false)
	if got := e.waitOp(removal.ID); got.State != v1.OperationSucceeded {
		t.Errorf("remove rp-w1: %s: %s", got.State, got.Message)
	}
}

// A replacement that does not get Ready is rolled back: the old VM gets
// its name and disk back and powers on, the operation fails saying why,
// and the node can be replaced again.
func TestReplaceNodeRollsBackANewVMThatIsNotReady(t *testing.T) {
	e := newClusterEnv(t, func(c *Config) { c.LeaveTimeout = 20 * time.Second; c.UpgradeNodeTimeout = 5 * time.Second })
	e.do("POST", v1.PathClusters, e.spec("rn", 3, 0))
	fl := e.startFleet("rn", "")
	e.waitAllReady("rn")
	before := e.snapshotVMs("rn")
	old := e.vms("rn")["rn-m2"].Self

	fl.hold("rn-m2", true) // whatever VM is rn-m2 reports Converging, never Ready
	op := e.start("POST", v1.PathClusters+"/rn/nodes/rn-m2/replace", v1.ReplaceNodeRequest{})
	got := e.waitOp(op.ID)
	if got.State != v1.OperationFailed || !strings.Contains(got.Message, "rn-m2's replacement was rolled back") || !strings.Contains(got.Message, "not Ready within 5s") {
		t.Fatalf("replace rn-m2 by a VM that never gets Ready: %s: %s", got.State, got.Message)
	}
	if !fl.handedOver("rn-m2") {
		t.Error("rn-m2's agent answered, but its role never said HandOver")
	}
	vms := e.vms("rn")
	switch vm, ok := vms["rn-m2"]; {
	case !ok:
		t.Fatalf("no rn-m2 after the rollback: %v", keys(vms))
	case vm.Self.Value != old.Value || vm.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOn || dataDiskOf(vm) != before.disk["rn-m2"]:
		t.Errorf("rn-m2 after the rollback: VM %s %s with disk %q; want the old VM %s powered on with %q",
			vm.Self.Value, vm.Runtime.PowerState, dataDiskOf(vm), old.Value, before.disk["rn-m2"])
	}
	if shared := fl.sharedDisk(); len(vms) != 3 || shared != "" {
		t.Errorf("VMs after the rollback: %v (want the 3 masters); disk on two VMs: %q", keys(vms), shared)
	}
	if ev := e.event("rn", "rn-m2", "rolled back: the old VM"); ev.Type != "Warning" || ev.Reason != "ReplaceRolledBack" {
		t.Errorf("rollback event %+v", ev)
	}
	for _, n := range e.cluster("rn").Status.Nodes {
		if n.Upgrade != "" {
			t.Errorf("node %s after the rollback: upgrade %q", n.Name, n.Upgrade)
		}
	}

	// The rollback left nothing behind: once its VM serves, a second
	// replacement goes through.
	fl.hold("rn-m2", false)
	e.waitAllReady("rn")
	if got := e.waitOp(e.start("POST", v1.PathClusters+"/rn/nodes/rn-m2/replace", v1.ReplaceNodeRequest{}).ID); got.State != v1.OperationSucceeded {
		t.Fatalf("replace rn-m2 again: %s: %s", got.State, got.Message)
	}
	if vm := e.vms("rn")["rn-m2"]; vm.Self.Value == old.Value || dataDiskOf(vm) != before.disk["rn-m2"] {
		t.Errorf("rn-m2 after the second replacement: VM %s (old %s), disk %q", vm.Self.Value, old.Value, dataDiskOf(vm))
	}
}

// A replacement whose data disk is lost stops on it, saying how to go on
// with replace-node itself; asked again with --fresh-disk, it gives the
// new VM an empty disk.
func TestReplaceNodeFreshDiskForALostDisk(t *testing.T) {
	e := newClusterEnv(t, func(c *Config) { c.LeaveTimeout = 20 * time.Second; c.UpgradeNodeTimeout = time.Minute })
	e.do("POST", v1.PathClusters, e.spec("rl", 3, 0))
	fl := e.startFleet("rl", "")
	e.waitAllReady("rl")
	before := e.snapshotVMs("rl")
	replace := v1.PathClusters + "/rl/nodes/rl-m2/replace"

	e.loseDataDisk(before.disk["rl-m2"])
	got := e.waitOp(e.start("POST", replace, v1.ReplaceNodeRequest{}).ID)
	if got.State != v1.OperationFailed || !strings.Contains(got.Message, "harmonyctl cluster replace-node rl rl-m2 --fresh-disk") {
		t.Fatalf("replace rl-m2 with its disk lost: %s: %s", got.State, got.Message)
	}
	if n := len(e.vms("rl")); n != 4 {
		t.Errorf("%d VMs while rl-m2's replacement waits for its disk, want 4 (the old one kept aside, the new one without a disk)", n)
	}
	// Asked again as it was, it is refused: the replacement runs.
	r := doJSON(t, e.tc.admin, "POST", e.tc.url+replace, v1.ReplaceNodeRequest{})
	r.wantStatus(t, http.StatusConflict, v1.CodeConflict)

	amend := e.start("POST", replace, v1.ReplaceNodeRequest{FreshDisk: true})
	if ev := e.event("rl", "rl-m2", "fresh-disk path, chosen by admin"); ev.Type != "Warning" || ev.Reason != "ReplaceFreshDisk" {
		t.Errorf("rl-m2: the fresh-disk event: %+v", ev)
	}
	if got := e.waitOp(amend.ID); got.State != v1.OperationSucceeded {
		t.Fatalf("replace rl-m2 on a fresh disk: %s: %s", got.State, got.Message)
	}
	fl.halt()
	vms := e.vms("rl")
	if d := dataDiskOf(vms["rl-m2"]); d == "" || d == before.disk["rl-m2"] || !strings.Contains(d, "/rl-m2-") || !e.dataDiskExists(d) {
		t.Errorf("rl-m2's data disk after the fresh-disk path: %q (lost %q)", d, before.disk["rl-m2"])
	}
	if len(vms) != 3 || fl.diskShared != "" {
		t.Errorf("VMs after the replacement: %v (want the 3 masters); disk on two VMs: %q", keys(vms), fl.diskShared)
	}
}

// An old VM that leaves vCenter in the middle of its replacement (an
// admin removed it from the inventory) does not trap the machine. Before
// the clone, nothing is left to hand over, power off or rename: the new
// VM is cloned at once. After it, a rollback has no old VM to give the
// disk back to: the node is cloned again from its old image. Either way
// the data disk, which outlived the VM, is the node's again. A new VM
// that leaves while it is verified is rolled back at once.
func TestReplaceNodeGoesOnWhenTheOldVMIsGone(t *testing.T) {
	e := newClusterEnv(t, func(c *Config) { c.LeaveTimeout = time.Minute; c.UpgradeNodeTimeout = 10 * time.Minute })
	e.do("POST", v1.PathClusters, e.spec("rg", 3, 0))
	fl := e.startFleet("rg", "")
	e.waitAllReady("rg")
	before := e.snapshotVMs("rg")
	replace := func(node string) string { return v1.PathClusters + "/rg/nodes/" + node + "/replace" }

	// goneWhileHandingOver silences node's agent, so that the replacement
	// that path starts waits for a hand-over, and meanwhile removes its
	// VM from vCenter. The replacement goes on, saying so, and succeeds.
	goneWhileHandingOver := func(node, path string, body any, reason string) types.ManagedObjectReference {
		t.Helper()
		old := e.vms("rg")[node].Self
		fl.silence(old.Value)
		fl.settle()
		op := e.start("POST", path, body)
		e.waitReplacementStep("rg", node, v1.SwapHandingOver)
		e.unregister(old)
		if got := e.waitOp(op.ID); got.State != v1.OperationSucceeded {
			t.Fatalf("%s %+v, %s's old VM gone: %s: %s", path, body, node, got.State, got.Message)
		}
		if ev := e.event("rg", node, "the old VM "+old.Value+" is gone from vCenter; cloning its replacement"); ev.Type != "Warning" || ev.Reason != reason {
			t.Errorf("%s's old VM gone: event %+v", node, ev)
		}
		return old
	}

	// 1. A replace-node's hand-over looks at the old VM: gone.
	old := goneWhileHandingOver("rg-m2", replace("rg-m2"), nil, "Replace")
	vms := e.vms("rg")
	if vm := vms["rg-m2"]; vm.Self.Value == old.Value || dataDiskOf(vm) != before.disk["rg-m2"] || vm.Config.Uuid != before.uuid["rg-m2"] {
		t.Errorf("rg-m2 after its replacement: VM %s (old %s), disk %q, UUID %s; want its old disk %q and UUID %s",
			vm.Self.Value, old.Value, dataDiskOf(vm), vm.Config.Uuid, before.disk["rg-m2"], before.uuid["rg-m2"])
	}
	if len(vms) != 3 {
		t.Errorf("VMs after rg-m2's replacement: %v, want the 3 masters", keys(vms))
	}

	// 2. rg-m3's new VM, on the fresh-disk path, does not get Ready, and
	// its old VM, set aside, leaves vCenter before the rollback would
	// give it its disk back: the node is cloned again on its old disk.
	old = e.vms("rg")["rg-m3"].Self
	fl.hold("rg-m3", true) // Converging: the new VM waits to be verified
	op := e.start("POST", replace("rg-m3"), v1.ReplaceNodeRequest{FreshDisk: true})
	e.waitReplacementStep("rg", "rg-m3", v1.SwapVerifying)
	e.unregister(old)
	fl.refuse.Store(true) // the new VM refuses its role: rolled back at once
	got := e.waitOp(op.ID)
	if got.State != v1.OperationFailed || !strings.Contains(got.Message, "rg-m3's replacement was rolled back") {
		t.Fatalf("replace rg-m3 by a VM that refuses its role, its old VM gone: %s: %s", got.State, got.Message)
	}
	if ev := e.event("rg", "rg-m3", "the old VM "+old.Value+" is gone from vCenter, so rg-m3 is cloned again from its old image"); ev.Type != "Warning" || ev.Reason != "ReplaceRolledBack" ||
		!strings.Contains(ev.Message, "with the old VM's data disk "+before.disk["rg-m3"]+", not the fresh one") {
		t.Errorf("rg-m3's rollback without its old VM: event %+v", ev)
	}
	fl.hold("rg-m3", false)
	fl.refuse.Store(false)
	e.waitAllReady("rg")
	vms = e.vms("rg")
	switch vm := vms["rg-m3"]; {
	case vm.Self.Value == old.Value:
		t.Errorf("rg-m3 is still its old VM %s", old.Value)
	case dataDiskOf(vm) != before.disk["rg-m3"] || vm.Config.Uuid != before.uuid["rg-m3"] || extraConfig(vm, vsphere.TagImage) != e.image:
		t.Errorf("rg-m3 cloned again: disk %q, UUID %s, image %s; want %q, %s, %s",
			dataDiskOf(vm), vm.Config.Uuid, extraConfig(vm, vsphere.TagImage), before.disk["rg-m3"], before.uuid["rg-m3"], e.image)
	}
	if shared := fl.sharedDisk(); len(vms) != 3 || shared != "" {
		t.Errorf("VMs after the rollback: %v (want the 3 masters); disk on two VMs: %q", keys(vms), shared)
	}
	for _, n := range e.cluster("rg").Status.Nodes {
		if n.Upgrade != "" {
			t.Errorf("node %s after the rollback: replacement step %q", n.Name, n.Upgrade)
		}
	}

	// 3. rg-m2's new VM leaves vCenter while it is verified: nothing will
	// report from it, so the replacement is rolled back at once, not
	// after the node timeout, and the old VM serves on with its disk.
	old = e.vms("rg")["rg-m2"].Self
	fl.hold("rg-m2", true)
	op = e.start("POST", replace("rg-m2"), nil)
	e.waitReplacementStep("rg", "rg-m2", v1.SwapVerifying)
	newVM := e.vms("rg")["rg-m2"].Self
	e.unregister(newVM)
	if got := e.waitOp(op.ID); got.State != v1.OperationFailed || !strings.Contains(got.Message, "rg-m2's replacement was rolled back") {
		t.Fatalf("replace rg-m2, its new VM gone: %s: %s", got.State, got.Message)
	}
	if ev := e.event("rg", "rg-m2", "the new VM "+newVM.Value+" is gone from vCenter"); ev.Type != "Warning" {
		t.Errorf("rg-m2's new VM gone: event %+v", ev)
	}
	fl.hold("rg-m2", false)
	e.waitAllReady("rg")
	vms = e.vms("rg")
	if vm := vms["rg-m2"]; vm.Self.Value != old.Value || dataDiskOf(vm) != before.disk["rg-m2"] {
		t.Errorf("rg-m2 after the rollback: VM %s with disk %q; want its old VM %s with %q", vm.Self.Value, dataDiskOf(vm), old.Value, before.disk["rg-m2"])
	}
	if len(vms) != 3 {
		t.Errorf("VMs after rg-m2's rollback: %v, want the 3 masters", keys(vms))
	}

	// 4. An upgrade's hand-over asks nothing of vCenter: the engine's
	// sweep finds that rg-m1's VM is gone, and its replacement goes on.
	newImage := e.importImage(nodeOVA(t, "1.1.0"))
	goneWhileHandingOver("rg-m1", v1.PathClusters+"/rg/upgrade", v1.UpgradeRequest{Image: newImage}, "Upgrade")
	fl.halt()
	if vm := e.vms("rg")["rg-m1"]; dataDiskOf(vm) != before.disk["rg-m1"] || extraConfig(vm, vsphere.TagImage) != newImage {
		t.Errorf("rg-m1 after the upgrade: disk %q, image %s; want %q, %s", dataDiskOf(vm), extraConfig(vm, vsphere.TagImage), before.disk["rg-m1"], newImage)
	}
}
