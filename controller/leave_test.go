package controller

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmware/govmomi/vim25/types"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// start sends a request that starts an operation, without waiting for it.
func (e *clusterEnv) start(method, path string, body any) v1.Operation {
	e.t.Helper()
	r := doJSON(e.t, e.tc.admin, method, e.tc.url+path, body)
	if r.status != http.StatusAccepted {
		e.t.Fatalf("%s %s: %d %s", method, path, r.status, r.body)
	}
	var op v1.Operation
	r.decode(e.t, &op)
	return op
}

func (e *clusterEnv) operation(id string) v1.Operation {
	e.t.Helper()
	var op v1.Operation
	doJSON(e.t, e.tc.admin, "GET", e.tc.url+v1.PathOperations+"/"+id, nil).decode(e.t, &op)
	return op
}

// event returns the cluster's newest event about node whose message
// contains text, or fails.
func (e *clusterEnv) event(cluster, node, text string) v1.Event {
	e.t.Helper()
	var cl v1.Cluster
	doJSON(e.t, e.tc.admin, "GET", e.tc.url+v1.PathClusters+"/"+cluster, nil).decode(e.t, &cl)
	for _, ev := range slices.Backward(cl.Status.Events) {
		if ev.Node == node && strings.Contains(ev.Message, text) {
			return ev
		}
	}
	var msgs []string
	for _, ev := range cl.Status.Events {
		msgs = append(msgs, ev.Type+" "+ev.Message)
	}
	e.t.Fatalf("no event of %s says %q; events:\n%s", node, text, strings.Join(msgs, "\n"))
	return v1.Event{}
}

// ownRole is what the node's agent reads: its role, through its own
// certificate.
func (e *clusterEnv) ownRole(client *http.Client) v1.Role {
	e.t.Helper()
	r := doJSON(e.t, client, "GET", e.tc.url+v1.PathNodeRole+"?after=0&wait=0s", nil)
	if r.status != http.StatusOK {
		e.t.Fatalf("own role: %d %s", r.status, r.body)
	}
	var role v1.Role
	r.decode(e.t, &role)
	return role
}

func peerNames(r v1.Role) []string {
	var names []string
	for _, p := range r.Peers {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	return names
}

// A removed node leaves its cluster before its VM goes: its role says
// Leave, its machine waits for the agent's Left, or for the deadline, and
// the events say which. A node that never enrolled, or whose VM is off,
// goes at once.
func TestRemovedNodesLeaveTheCluster(t *testing.T) {
	const leaveTimeout = 8 * time.Second
	e := newClusterEnv(t, func(c *Config) { c.LeaveTimeout = leaveTimeout })
	e.do("POST", v1.PathClusters, e.spec("lv", 1, 4))
	w2, w3, w4client := e.enrollClusterNode("lv", "lv-w2"), e.enrollClusterNode("lv", "lv-w3"), e.enrollClusterNode("lv", "lv-w4")

	// 1. Scale in to three workers: the newest, w4, is told to leave.
	// Its role keeps the cluster's settings, lists the remaining nodes
	// and itself, and carries the deadline; the others no longer list it.
	three := 3
	asked := time.Now()
	op := e.start("POST", v1.PathClusters+"/lv/scale", v1.ScaleRequest{Workers: &three})
	role := e.ownRole(w4client)
	if role.Leave == nil {
		t.Fatalf("the removed node's role has no leave: %+v", role.Redacted())
	}
	if d := role.Leave.Deadline; d.Before(asked.Add(leaveTimeout-time.Second)) || d.After(time.Now().Add(leaveTimeout+time.Second)) {
		t.Errorf("leave deadline %s, want about %s after %s", d, leaveTimeout, asked)
	}
	if got, want := peerNames(role), []string{"lv-m1", "lv-w1", "lv-w2", "lv-w3", "lv-w4"}; !slices.Equal(got, want) {
		t.Errorf("leaving node's peers %q, want %q", got, want)
	}
	if role.Cluster.VIP != "198.18.10.79" || role.Role != v1.RoleWorker {
		t.Errorf("leaving role lost its settings: %+v", role.Redacted())
	}
	stay := e.ownRole(w2)
	if stay.Leave != nil || slices.Contains(peerNames(stay), "lv-w4") {
		t.Errorf("a remaining node's role: leave %+v, peers %q", stay.Leave, peerNames(stay))
	}

	// The machine waits for the agent: the VM stays on, the operation runs,
	// and no attempt is counted as a failure.
	time.Sleep(time.Second)
	if vm := e.vms("lv")["lv-w4"]; vm.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOn {
		t.Fatalf("lv-w4 is %q before it has left", vm.Runtime.PowerState)
	}
	if got := e.operation(op.ID); got.State != v1.OperationRunning {
		t.Fatalf("scale-in finished before the node left: %+v", got)
	}
	var cl v1.Cluster
	doJSON(t, e.tc.admin, "GET", e.tc.url+v1.PathClusters+"/lv", nil).decode(t, &cl)
	for _, n := range cl.Status.Nodes {
		if n.Name == "lv-w4" && (n.Attempts != 0 || n.LastError != "") {
			t.Errorf("waiting counted as a failure: %+v", n)
		}
	}

	// The agent reports Left: the VM is powered off and destroyed, and the
	// event says it left.
	left := v1.Status{APIVersion: v1.APIVersion, Kind: "Status", Phase: v1.PhaseLeft, ObservedRevision: role.Revision,
		Components: []v1.ComponentStatus{{Name: "kubeadm", Healthy: true, Phase: "Left", Message: "kubeadm reset"}}}
	if r := doJSON(t, w4client, "POST", e.tc.url+v1.PathNodeStatus, left); r.status != http.StatusNoContent {
		t.Fatalf("status: %d %s", r.status, r.body)
	}
	if got := e.waitOp(op.ID); got.State != v1.OperationSucceeded {
		t.Fatalf("scale-in: %+v", got)
	}
	if time.Since(asked) >= leaveTimeout {
		t.Errorf("the scale-in took %s, past the leave deadline: the Left report was not what ended the wait", time.Since(asked))
	}
	if _, ok := e.vms("lv")["lv-w4"]; ok {
		t.Error("lv-w4's VM is still there after it left")
	}
	if ev := e.event("lv", "lv-w4", "left the cluster"); ev.Type != "Normal" || !strings.Contains(ev.Message, "kubeadm reset") {
		t.Errorf("leave event %+v", ev)
	}

	// 2. A node that never reports: after the deadline a Warning says it
	// is powered off without leaving, and why; then the VM goes.
	asked = time.Now()
	op = e.start("DELETE", v1.PathClusters+"/lv/nodes/lv-w3", nil)
	if r := e.ownRole(w3); r.Leave == nil {
		t.Fatalf("lv-w3's role has no leave: %+v", r.Redacted())
	}
	if got := e.waitOp(op.ID); got.State != v1.OperationSucceeded {
		t.Fatalf("removal of lv-w3: %+v", got)
	}
	if took := time.Since(asked); took < leaveTimeout-time.Second {
		t.Errorf("lv-w3 went after %s, before its leave deadline of %s", took, leaveTimeout)
	}
	if _, ok := e.vms("lv")["lv-w3"]; ok {
		t.Error("lv-w3's VM is still there after its deadline")
	}
	ev := e.event("lv", "lv-w3", "without leaving")
	if ev.Type != "Warning" || !strings.Contains(ev.Message, "did not report Left by its deadline") || !strings.Contains(ev.Message, "never reported") {
		t.Errorf("deadline event %+v", ev)
	}

	// 3. A node that never enrolled leaves at once.
	asked = time.Now()
	e.do("DELETE", v1.PathClusters+"/lv/nodes/lv-w1", nil)
	if took := time.Since(asked); took >= leaveTimeout {
		t.Errorf("removing a node that never enrolled took %s", took)
	}
	if ev := e.event("lv", "lv-w1", "never enrolled"); ev.Type != "Normal" {
		t.Errorf("unenrolled event %+v", ev)
	}

	// 4. An enrolled node whose VM is off cannot leave: it goes at once,
	// with a Warning.
	e.powerOff(e.vms("lv")["lv-w2"].Self)
	asked = time.Now()
	e.do("DELETE", v1.PathClusters+"/lv/nodes/lv-w2", nil)
	if took := time.Since(asked); took >= leaveTimeout {
		t.Errorf("removing a node whose VM is off took %s", took)
	}
	if ev := e.event("lv", "lv-w2", "poweredOff, so it cannot leave"); ev.Type != "Warning" {
		t.Errorf("powered-off event %+v", ev)
	}
	if vms := e.vms("lv"); len(vms) != 1 {
		t.Errorf("VMs left: %v", keys(vms))
	}
}

// A node that leaves but reports a component unhealthy (a drain that ran
// out of its share of the leave window) goes, with a Warning that says
// what did not finish.
func TestUncleanLeaveIsAWarning(t *testing.T) {
	e := newClusterEnv(t, func(c *Config) { c.LeaveTimeout = time.Minute })
	e.do("POST", v1.PathClusters, e.spec("ul", 1, 2))
	w2 := e.enrollClusterNode("ul", "ul-w2")
	op := e.start("DELETE", v1.PathClusters+"/ul/nodes/ul-w2", nil)
	role := e.ownRole(w2)
	if role.Leave == nil {
		t.Fatalf("the removed node's role has no leave: %+v", role.Redacted())
	}
	left := v1.Status{APIVersion: v1.APIVersion, Kind: "Status", Phase: v1.PhaseLeft, ObservedRevision: role.Revision,
		Components: []v1.ComponentStatus{
			{Name: "drain", Healthy: false, Phase: "Left", Message: "drain given up 3m0s before the leave deadline: 1 pods still on the node: default/web-1 (disruption budget)"},
			{Name: "kubeadm", Healthy: true, Phase: "Left", Message: "kubeadm reset"},
		}}
	if r := doJSON(t, w2, "POST", e.tc.url+v1.PathNodeStatus, left); r.status != http.StatusNoContent {
		t.Fatalf("status: %d %s", r.status, r.body)
	}
	if got := e.waitOp(op.ID); got.State != v1.OperationSucceeded {
		t.Fatalf("removal: %+v", got)
	}
	ev := e.event("ul", "ul-w2", "left the cluster")
	if ev.Type != "Warning" || !strings.Contains(ev.Message, "drain did not finish cleanly") || !strings.Contains(ev.Message, "default/web-1") {
		t.Errorf("unclean leave event %+v", ev)
	}
}

// A master removed without leaving (its VM off here; a VM gone, or an
// agent silent past its deadline, take the same path) may still be an
// etcd member, which would count against the quorum for good. The
// Warning says so, and the remaining masters' roles name its member in
// etcd.removeMembers for their agents to remove, once each agent says it
// acts on the field. A master that left cleanly is not named.
func TestALostMastersEtcdMemberIsNamedForRemoval(t *testing.T) {
	e := newClusterEnv(t, func(c *Config) { c.LeaveTimeout = time.Minute })
	e.do("POST", v1.PathClusters, e.spec("lm", 5, 0))
	nodes := map[string]*http.Client{}
	members := map[string]string{"lm-m1": "a1", "lm-m2": "a2", "lm-m3": "a3", "lm-m4": "a4", "lm-m5": "8e9e05c52164694d"}
	report := func(name, phase string, capabilities ...string) {
		t.Helper()
		st := v1.Status{APIVersion: v1.APIVersion, Kind: "Status", Phase: phase, EtcdMemberID: members[name], Capabilities: capabilities,
			Components: []v1.ComponentStatus{{Name: "etcd", Healthy: true, Phase: "Converged"}}}
		if phase == v1.PhaseLeft {
			st.EtcdMemberID, st.Components[0].Phase = "", "Left"
		}
		if r := doJSON(t, nodes[name], "POST", e.tc.url+v1.PathNodeStatus, st); r.status != http.StatusNoContent {
			t.Fatalf("status of %s: %d %s", name, r.status, r.body)
		}
	}
	for name := range members {
		nodes[name] = e.enrollClusterNode("lm", name)
		if name == "lm-m2" {
			report(name, v1.PhaseReady)
		} else {
			report(name, v1.PhaseReady, v1.CapabilityEtcdRemoveMembers)
		}
	}
	toRemove := func(name string) []string {
		t.Helper()
		r := e.ownRole(nodes[name])
		if r.Etcd == nil {
			t.Fatalf("%s's role has no etcd settings", name)
		}
		return r.Etcd.RemoveMembers
	}
	for _, name := range []string{"lm-m1", "lm-m3"} {
		if got := toRemove(name); got != nil {
			t.Fatalf("%s's role names members to remove before any master was lost: %q", name, got)
		}
	}

	// lm-m5 is lost: its VM is off. Scaling in to three removes it and
	// lm-m4, which leaves cleanly.
	e.powerOff(e.vms("lm")["lm-m5"].Self)
	three := 3
	op := e.start("POST", v1.PathClusters+"/lm/scale", v1.ScaleRequest{Masters: &three})
	if r := e.ownRole(nodes["lm-m4"]); r.Leave == nil {
		t.Fatalf("lm-m4's role has no leave: %+v", r.Redacted())
	}
	report("lm-m4", v1.PhaseLeft)
	if got := e.waitOp(op.ID); got.State != v1.OperationSucceeded {
		t.Fatalf("scale-in: %+v", got)
	}
	ev := e.event("lm", "lm-m5", "without leaving")
	if want := "the remaining masters remove its etcd member " + members["lm-m5"]; ev.Type != "Warning" || !strings.Contains(ev.Message, want) {
		t.Errorf("lost master's event %+v, want it to say %q", ev, want)
	}
	if ev := e.event("lm", "lm-m4", "left the cluster"); ev.Type != "Normal" || strings.Contains(ev.Message, "etcd member") {
		t.Errorf("clean leave's event %+v", ev)
	}
	want := []string{members["lm-m5"]}
	for _, name := range []string{"lm-m1", "lm-m3"} {
		if got := toRemove(name); !slices.Equal(got, want) {
			t.Errorf("%s's role names %q to remove, want %q", name, got, want)
		}
	}
	if got := toRemove("lm-m2"); got != nil {
		t.Errorf("lm-m2's agent does not act on etcd.removeMembers, yet its role names %q", got)
	}

	// Once lm-m2's agent says it acts on the field, its role names the
	// member too.
	report("lm-m2", v1.PhaseReady, v1.CapabilityEtcdRemoveMembers)
	if got := toRemove("lm-m2"); !slices.Equal(got, want) {
		t.Errorf("lm-m2's role names %q to remove once its agent acts on it, want %q", got, want)
	}
}
