//go:build linux

package kubeadm

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/agent/kubeapi"
	"github.com/harmonykaas/harmony/agent/pki"
	"github.com/harmonykaas/harmony/agent/reconcile"
	v1 "github.com/harmonykaas/harmony/api/v1"
	internalkc "github.com/harmonykaas/harmony/internal/kubeconfig"
)

// checkDrain drains node m1 against the real apiserver of
// TestFirstMasterInNetns (kubeadm's Node,RBAC authorization and
// NodeRestriction admission), as the node itself: a kubelet.conf whose
// client certificate is a file, as after the kubelet's TLS bootstrap.
// The node is cordoned; its plain pod is evicted, its mirror pod and its
// DaemonSet's pod stay, another node's pod is untouched, and a pod its
// disruption budget protects is reported, not forced. While pods remain
// the step is Leaving; past its share of the leave window it gives up and
// lets the node leave; once the pods are gone it has drained.
func checkDrain(t *testing.T, host *reconcile.Host, dial func(ctx context.Context, network, addr string) (net.Conn, error),
	cl *testCluster, role *v1.Role, api *apiClient, admin *tls.Certificate) {
	t.Helper()
	// The node's files go under a root of their own: the master's
	// component under test must not see a kubelet.conf.
	host = &reconcile.Host{Root: t.TempDir(), Services: host.Services, Log: host.Log}
	node := role.NodeName
	writeNodeKubeconfig(t, host, cl, node, "https://"+net.JoinHostPort(role.Addresses.IPs[0], "6443"))
	nodeCert := kubeletCert(t, host)

	// The node registers itself, as its kubelet would.
	mustSend(t, api, nodeCert, http.MethodPost, "/api/v1/nodes", fmt.Sprintf(`{"metadata":{"name":%q}}`, node), http.StatusCreated)
	mustSend(t, api, admin, http.MethodPost, "/api/v1/nodes", `{"metadata":{"name":"other"}}`, http.StatusCreated)
	// No controller manager runs here to make the namespace's default
	// service account, which admission wants for every pod.
	mustSend(t, api, admin, http.MethodPost, "/api/v1/namespaces/default/serviceaccounts", `{"metadata":{"name":"default"}}`, http.StatusCreated)
	pod := func(name, onNode, meta string) {
		body := fmt.Sprintf(`{"metadata":{"name":%q,"namespace":"default"%s},"spec":{"nodeName":%q,"containers":[{"name":"c","image":"registry.k8s.io/pause:3.10.1"}]}}`, name, meta, onNode)
		mustSend(t, api, admin, http.MethodPost, "/api/v1/namespaces/default/pods", body, http.StatusCreated)
	}
	pod("plain", node, "")
	pod("protected", node, `,"labels":{"app":"protected"}`)
	pod("mirror", node, `,"annotations":{"kubernetes.io/config.mirror":"x"}`)
	pod("daemon", node, `,"ownerReferences":[{"apiVersion":"apps/v1","kind":"DaemonSet","name":"ds","uid":"6e0d1cf4-63d1-4a5b-9d43-1d7f1b4a1f2a","controller":true}]`)
	pod("elsewhere", "other", "")
	pod("done", node, "")
	mustSend(t, api, admin, http.MethodPatch, "/api/v1/namespaces/default/pods/done/status", `{"status":{"phase":"Succeeded"}}`, http.StatusOK)
	// A budget guards only running pods (a pending one may always go),
	// and no kubelet here runs it: its status says so instead.
	mustSend(t, api, admin, http.MethodPatch, "/api/v1/namespaces/default/pods/protected/status", `{"status":{"phase":"Running"}}`, http.StatusOK)
	mustSend(t, api, admin, http.MethodPost, "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
		`{"metadata":{"name":"protected"},"spec":{"minAvailable":1,"selector":{"matchLabels":{"app":"protected"}}}}`, http.StatusCreated)
	// The disruption controller does not run here: the budget's status
	// says what it would of a pod not yet healthy, no disruption allowed.
	mustSend(t, api, admin, http.MethodPut, "/apis/policy/v1/namespaces/default/poddisruptionbudgets/protected/status",
		pdbStatus(t, api, admin), http.StatusOK)

	d := drainStep{kubelet: true, dial: dial}
	leave := *role
	leave.Leave = &v1.LeaveSettings{Deadline: time.Now().Add(10 * time.Minute)}
	st := d.Leave(context.Background(), host, &leave)
	if st.Phase != reconcile.PhaseLeaving || !strings.Contains(st.Message, "default/plain (evicted, terminating)") ||
		!strings.Contains(st.Message, "default/protected (its disruption budget allows no eviction now)") ||
		!strings.Contains(st.Message, "default/done (evicted") ||
		strings.Contains(st.Message, "mirror") || strings.Contains(st.Message, "daemon") || strings.Contains(st.Message, "elsewhere") {
		t.Errorf("drain with pods left: %+v", st)
	}
	// A pod that has ended is deleted at once by its eviction.
	mustSend(t, api, admin, http.MethodGet, "/api/v1/namespaces/default/pods/done", "", http.StatusNotFound)
	// The kubelet marks an evicted pod Failed before it deletes it: the
	// pod is still there, and the drain still waits for it.
	mustSend(t, api, admin, http.MethodPatch, "/api/v1/namespaces/default/pods/plain/status", `{"status":{"phase":"Failed"}}`, http.StatusOK)
	if st := d.Leave(context.Background(), host, &leave); st.Phase != reconcile.PhaseLeaving || !strings.Contains(st.Message, "default/plain (terminating)") {
		t.Errorf("drain with an evicted pod marked Failed, not yet deleted: %+v", st)
	}
	var n struct {
		Spec struct {
			Unschedulable bool `json:"unschedulable"`
		} `json:"spec"`
	}
	getJSON(t, api, admin, "/api/v1/nodes/"+node, &n)
	if !n.Spec.Unschedulable {
		t.Error("the node was not cordoned")
	}
	for name, wantDeleting := range map[string]bool{"plain": true, "protected": false, "mirror": false, "daemon": false, "elsewhere": false} {
		var p struct {
			Metadata struct {
				DeletionTimestamp *time.Time `json:"deletionTimestamp"`
			} `json:"metadata"`
		}
		getJSON(t, api, admin, "/api/v1/namespaces/default/pods/"+name, &p)
		if got := p.Metadata.DeletionTimestamp != nil; got != wantDeleting {
			t.Errorf("pod %s being deleted: %v, want %v", name, got, wantDeleting)
		}
	}

	// Past its share of the window: the node leaves with the pods on it.
	// (A leave of its own: what a leave's drain did is kept for it.)
	gaveUp := leave
	gaveUp.Leave = &v1.LeaveSettings{Deadline: leave.Leave.Deadline.Add(time.Minute)}
	late := d
	late.now = func() time.Time { return gaveUp.Leave.Deadline.Add(-drainReserve + time.Second) }
	if st := late.Leave(context.Background(), host, &gaveUp); st.Phase != reconcile.PhaseLeft || st.Healthy || !strings.Contains(st.Message, "drain given up") {
		t.Errorf("drain past its share of the window: %+v", st)
	}
	// The next pass of the same leave says so again, without draining.
	if st := d.Leave(context.Background(), host, &gaveUp); st.Phase != reconcile.PhaseLeft || st.Healthy || len(st.Actions) != 0 || !strings.Contains(st.Message, "drain given up") {
		t.Errorf("the given-up drain's leave, next pass: %+v", st)
	}
	// A worker an upgrade replaces keeps its pods: its drain never gives
	// up (the controller stops the upgrade at the deadline instead).
	keep := leave
	keep.Leave = &v1.LeaveSettings{Deadline: leave.Leave.Deadline, KeepPods: true}
	if st := late.Leave(context.Background(), host, &keep); st.Phase != reconcile.PhaseLeaving || !strings.Contains(st.Message, "default/protected") {
		t.Errorf("drain with keepPods past its share of the window: %+v", st)
	}

	// The pods gone (no kubelet here confirms the plain pod's end, so it
	// is removed at once; the budget's pod is removed by hand): drained.
	for _, name := range []string{"plain", "protected"} {
		mustSend(t, api, admin, http.MethodDelete, "/api/v1/namespaces/default/pods/"+name, `{"gracePeriodSeconds":0}`, http.StatusOK)
	}
	if st := d.Leave(context.Background(), host, &leave); st.Phase != reconcile.PhaseLeft || !st.Healthy || st.Message != "cordoned and drained" {
		t.Errorf("drain of an empty node: %+v", st)
	}

	// A hand-over's cordon carries the mark, and the node that takes over
	// uncordons it with the node's own credential; a plain cordon (an
	// admin's, or a leave's) stays.
	handOver := leave
	handOver.Leave = &v1.LeaveSettings{Deadline: leave.Leave.Deadline, HandOver: true}
	if st := d.Leave(context.Background(), host, &handOver); st.Phase != reconcile.PhaseLeft || !st.Healthy {
		t.Errorf("hand-over drain: %+v", st)
	}
	nodeAPI, err := kubeapi.Open(host, KubeletKubeconfig, dial)
	if err != nil {
		t.Fatal(err)
	}
	var obj nodeObject
	getJSON(t, api, admin, "/api/v1/nodes/"+node, &obj)
	if !obj.Spec.Unschedulable || obj.Metadata.Annotations[handOverAnnotation] != "true" {
		t.Errorf("after a hand-over's cordon: unschedulable %v, annotations %v", obj.Spec.Unschedulable, obj.Metadata.Annotations)
	}
	if done, err := uncordonAfterHandOver(context.Background(), nodeAPI, node, &obj); !done || err != nil {
		t.Errorf("uncordon after the hand-over: %v %v", done, err)
	}
	obj = nodeObject{}
	getJSON(t, api, admin, "/api/v1/nodes/"+node, &obj)
	if obj.Spec.Unschedulable || obj.Metadata.Annotations[handOverAnnotation] != "" {
		t.Errorf("after the uncordon: unschedulable %v, annotations %v", obj.Spec.Unschedulable, obj.Metadata.Annotations)
	}
	// Its control plane stopped, the hand-over marks the Node for the VM
	// that takes over, as the node: Ready goes Unknown, so that kubeadm
	// join accepts the name; the other conditions stay.
	readyAgain := `{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady"},{"type":"MemoryPressure","status":"False","reason":"KubeletHasSufficientMemory"}]}}`
	mustSend(t, api, nodeCert, http.MethodPatch, "/api/v1/nodes/"+node+"/status", readyAgain, http.StatusOK)
	if err := markHandedOver(context.Background(), nodeAPI, node, time.Now()); err != nil {
		t.Fatalf("mark the Node handed over: %v", err)
	}
	if got := conditions(t, api, admin, node); got["Ready"] != "Unknown "+handedOverReason || got["MemoryPressure"] != "False KubeletHasSufficientMemory" {
		t.Errorf("conditions after the hand-over's mark: %v", got)
	}
	// Gone meanwhile: nothing to mark.
	if err := markHandedOver(context.Background(), nodeAPI, "gone", time.Now()); err != nil {
		t.Errorf("mark a Node that is gone: %v", err)
	}
	mustSend(t, api, nodeCert, http.MethodPatch, "/api/v1/nodes/"+node+"/status", readyAgain, http.StatusOK)
	// Drained once for the hand-over, it is not done again: the
	// hand-over's later steps stop the apiserver its credential reaches.
	if st := d.Leave(context.Background(), host, &handOver); st.Phase != reconcile.PhaseLeft || len(st.Actions) != 0 || st.Message != "cordoned and drained for the hand-over" {
		t.Errorf("hand-over drain again: %+v", st)
	}
	again := leave
	again.Leave = &v1.LeaveSettings{Deadline: leave.Leave.Deadline.Add(2 * time.Minute)}
	if st := d.Leave(context.Background(), host, &again); st.Phase != reconcile.PhaseLeft || st.Message != "cordoned and drained" {
		t.Errorf("plain drain: %+v", st)
	}
	getJSON(t, api, admin, "/api/v1/nodes/"+node, &obj)
	if done, err := uncordonAfterHandOver(context.Background(), nodeAPI, node, &obj); done || err != nil || !obj.Spec.Unschedulable {
		t.Errorf("a plain cordon was undone: %v %v %+v", done, err, obj.Spec)
	}

	// Another node's credential cannot drain this one: NodeRestriction.
	writeNodeKubeconfig(t, host, cl, "other", "https://"+net.JoinHostPort(role.Addresses.IPs[0], "6443"))
	other := leave
	other.Leave = &v1.LeaveSettings{Deadline: leave.Leave.Deadline.Add(3 * time.Minute)}
	if st := d.Leave(context.Background(), host, &other); st.Phase != reconcile.PhaseLeaving || !strings.Contains(st.Message, "403") {
		t.Errorf("drain of %s with another node's credential: %+v", node, st)
	}
	// Nor mark it not Ready.
	otherAPI, err := kubeapi.Open(host, KubeletKubeconfig, dial)
	if err != nil {
		t.Fatal(err)
	}
	if err := markHandedOver(context.Background(), otherAPI, node, time.Now()); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("marking %s with another node's credential: %v", node, err)
	}
	if got := conditions(t, api, admin, node); got["Ready"] != "True KubeletReady" {
		t.Errorf("conditions after another node's mark: %v", got)
	}
	// kubeadm reset, a later step, removes kubelet.conf; the sequence's
	// next pass starts again with the drain, which reports what it did.
	os.Remove(host.Path(KubeletKubeconfig))
	if st := d.Leave(context.Background(), host, &again); st.Phase != reconcile.PhaseLeft || !st.Healthy || st.Message != "cordoned and drained" {
		t.Errorf("drain after kubeadm reset, same leave: %+v", st)
	}
	never := leave
	never.Leave = &v1.LeaveSettings{Deadline: leave.Leave.Deadline.Add(4 * time.Minute)}
	if st := d.Leave(context.Background(), host, &never); st.Phase != reconcile.PhaseLeft || !strings.Contains(st.Message, "never joined") {
		t.Errorf("drain of a node that never joined: %+v", st)
	}
}

// conditions are a Node's conditions, "status reason" by type.
func conditions(t *testing.T, api *apiClient, admin *tls.Certificate, node string) map[string]string {
	t.Helper()
	var obj nodeObject
	getJSON(t, api, admin, "/api/v1/nodes/"+node, &obj)
	out := map[string]string{}
	for _, c := range obj.Status.Conditions {
		out[c.Type] = c.Status + " " + c.Reason
	}
	return out
}

// writeNodeKubeconfig writes kubelet.conf for node as kubeadm's TLS
// bootstrap leaves it: the client certificate and key in one file that
// the kubeconfig names.
func writeNodeKubeconfig(t *testing.T, host *reconcile.Host, cl *testCluster, node, server string) {
	t.Helper()
	ca, err := pki.LoadCA(cl.clusterCA)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "crt"), filepath.Join(dir, "key")
	if _, err := ca.Ensure(certFile, keyFile, pki.Leaf{CommonName: "system:node:" + node, Organization: []string{"system:nodes"},
		Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatal(err)
	}
	const current = "/var/lib/kubelet/pki/kubelet-client-current.pem"
	pem := append(readFile(t, certFile), readFile(t, keyFile)...)
	if err := os.MkdirAll(filepath.Dir(host.Path(current)), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(host.Path(current), pem, 0o600); err != nil {
		t.Fatal(err)
	}
	kc := internalkc.New("kubernetes", server, []byte(cl.clusterCA.Certificate), "default-auth", nil, nil)
	kc.Users[0].User.CertFile, kc.Users[0].User.KeyFile = current, current
	data, err := kc.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(host.Path(KubeletKubeconfig)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(host.Path(KubeletKubeconfig), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func kubeletCert(t *testing.T, host *reconcile.Host) *tls.Certificate {
	t.Helper()
	pem := readFile(t, host.Path("/var/lib/kubelet/pki/kubelet-client-current.pem"))
	cert, err := tls.X509KeyPair(pem, pem)
	if err != nil {
		t.Fatal(err)
	}
	return &cert
}

func mustSend(t *testing.T, api *apiClient, cert *tls.Certificate, method, path, body string, want int) {
	t.Helper()
	if code, answer := api.send(t, cert, method, path, body); code != want {
		t.Fatalf("%s %s: %d, want %d: %s", method, path, code, want, tail(answer, 400))
	}
}

func getJSON(t *testing.T, api *apiClient, cert *tls.Certificate, path string, out any) {
	t.Helper()
	code, body := api.get(t, cert, path)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, code, tail(body, 300))
	}
	if err := json.Unmarshal([]byte(body), out); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// pdbStatus is the budget "protected" with a status that allows no
// disruption (and, its pod not healthy, no eviction of an unhealthy pod
// either), its observedGeneration current so the apiserver trusts it.
func pdbStatus(t *testing.T, api *apiClient, admin *tls.Certificate) string {
	t.Helper()
	var pdb map[string]any
	getJSON(t, api, admin, "/apis/policy/v1/namespaces/default/poddisruptionbudgets/protected", &pdb)
	meta := pdb["metadata"].(map[string]any)
	pdb["status"] = map[string]any{"observedGeneration": meta["generation"], "disruptionsAllowed": 0,
		"currentHealthy": 0, "desiredHealthy": 1, "expectedPods": 1}
	data, err := json.Marshal(pdb)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// checkPruneNodes follows checkDrain against the same real apiserver: on
// the first master, the Nodes of machines the cluster no longer has go
// (no peer of the role, not Ready, silent for a while, or never
// reported); a peer's Node stays whatever its state, and so does that of
// a node still leaving, whose kubelet reported lately.
func checkPruneNodes(t *testing.T, c *Component, host *reconcile.Host, role *v1.Role, api *apiClient, admin *tls.Certificate) {
	t.Helper()
	long := time.Now().Add(-10 * time.Minute).UTC().Format(time.RFC3339)
	lately := time.Now().UTC().Format(time.RFC3339)
	for name, beat := range map[string]string{"replaced-w1": long, "leaving-w2": lately} {
		mustSend(t, api, admin, http.MethodPost, "/api/v1/nodes", fmt.Sprintf(`{"metadata":{"name":%q}}`, name), http.StatusCreated)
		mustSend(t, api, admin, http.MethodPatch, "/api/v1/nodes/"+name+"/status",
			fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":"Unknown","reason":"NodeStatusUnknown","lastHeartbeatTime":%q,"lastTransitionTime":%q}]}}`, beat, beat),
			http.StatusOK)
	}
	actions, err := c.pruneNodes(context.Background(), host, role, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// "other" is checkDrain's Node of no machine, which never reported.
	want := []string{"deleted Node other: no longer in the cluster", "deleted Node replaced-w1: no longer in the cluster"}
	slices.Sort(actions)
	if !slices.Equal(actions, want) {
		t.Errorf("pruned %q, want %q", actions, want)
	}
	for name, want := range map[string]int{"replaced-w1": http.StatusNotFound, "other": http.StatusNotFound,
		"leaving-w2": http.StatusOK, role.NodeName: http.StatusOK} {
		if code, _ := api.get(t, admin, "/api/v1/nodes/"+name); code != want {
			t.Errorf("GET Node %s after pruning: %d, want %d", name, code, want)
		}
	}
	// A peer is never pruned, however silent: the master's own Node never
	// reported here.
	if again, err := c.pruneNodes(context.Background(), host, role, time.Now().Add(time.Hour)); err != nil || len(again) != 1 || again[0] != "deleted Node leaving-w2: no longer in the cluster" {
		t.Errorf("pruning an hour later: %q %v", again, err)
	}
}
