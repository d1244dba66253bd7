package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/images/components"
	"github.com/harmonykaas/harmony/internal/testutil"
)

// The workload the pod network subtests run: agnhost's netexec (an HTTP
// server that answers its hostname and dials others on request), built
// from the pinned Kubernetes module by make test-images, on both workers,
// and a ClusterIP Service in front of it.
const (
	netexecApp     = "netexec"
	netexecPort    = 8080
	netexecService = "netexec"
)

// kubectl runs the pinned kubectl (HARMONY_K8S_BIN) as the lab's admin.
func (l *labUnderTest) kubectl(t *testing.T, stdin string, args ...string) ([]byte, error) {
	t.Helper()
	dir := os.Getenv("HARMONY_K8S_BIN")
	if dir == "" {
		t.Fatal("HARMONY_K8S_BIN is unset: run make kubernetes (the lab's Kubernetes checks use its kubectl), or make unit")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return l.sum.Kubectl(ctx, dir, stdin, args...)
}

// loadTestImage imports an OCI archive of make test-images into a node's
// containerd, where the kubelet finds it (imagePullPolicy Never), as
// `harmonyctl lab load-image` does.
func (l *labUnderTest) loadTestImage(t *testing.T, node, file string) {
	t.Helper()
	dir := os.Getenv("HARMONY_TEST_IMAGES")
	if dir == "" {
		t.Fatal("HARMONY_TEST_IMAGES is unset: run make test-images (agnhost, built from the pinned Kubernetes module), or make unit")
	}
	if err := l.vm(t, node).LoadImage(context.Background(), filepath.Join(dir, file)); err != nil {
		t.Fatal(err)
	}
}

// kubePod is what the checks read of a pod.
type kubePod struct {
	Metadata struct {
		Name              string    `json:"name"`
		CreationTimestamp time.Time `json:"creationTimestamp"`
		DeletionTimestamp *string   `json:"deletionTimestamp"`
	} `json:"metadata"`
	Spec struct {
		NodeName string `json:"nodeName"`
	} `json:"spec"`
	Status struct {
		PodIP      string `json:"podIP"`
		Conditions []struct {
			Type               string    `json:"type"`
			Status             string    `json:"status"`
			LastTransitionTime time.Time `json:"lastTransitionTime"`
		} `json:"conditions"`
	} `json:"status"`
}

// readySince is when the pod became Ready, or zero.
func (p kubePod) readySince() time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == "Ready" && c.Status == "True" {
			return c.LastTransitionTime
		}
	}
	return time.Time{}
}

// netexecPods are the workload's live pods.
func (l *labUnderTest) netexecPods(t *testing.T) []kubePod {
	t.Helper()
	out, err := l.kubectl(t, "", "get", "pods", "-l", "app="+netexecApp, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var list struct{ Items []kubePod }
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatal(err)
	}
	var live []kubePod
	for _, p := range list.Items {
		if p.Metadata.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	return live
}

// netexecManifest is a Deployment of two netexec pods spread over the
// nodes that take pods (the workers: the masters keep kubeadm's taint),
// and its Service.
func netexecManifest(image string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: %[1]s, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: %[1]s}}
  template:
    metadata: {labels: {app: %[1]s}}
    spec:
      terminationGracePeriodSeconds: 5
      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: kubernetes.io/hostname
        whenUnsatisfiable: DoNotSchedule
        nodeTaintsPolicy: Honor
        labelSelector: {matchLabels: {app: %[1]s}}
      containers:
      - name: netexec
        image: %[2]s
        imagePullPolicy: Never
        args: [netexec, --http-port=%[3]d]
        ports: [{containerPort: %[3]d}]
        readinessProbe:
          httpGet: {path: /healthz, port: %[3]d}
          periodSeconds: 2
---
apiVersion: v1
kind: Service
metadata: {name: %[4]s, namespace: default}
spec:
  selector: {app: %[1]s}
  ports: [{port: 80, targetPort: %[3]d}]
`, netexecApp, image, netexecPort, netexecService)
}

// dial asks the netexec pod from, through the API server's pod proxy, to
// make tries HTTP requests for the hostname of whatever answers at
// host:port, and returns the answers.
func (l *labUnderTest) dial(t *testing.T, from, host string, port, tries int) ([]string, error) {
	t.Helper()
	path := fmt.Sprintf("/api/v1/namespaces/default/pods/%s:%d/proxy/dial?request=hostname&protocol=http&host=%s&port=%d&tries=%d",
		from, netexecPort, host, port, tries)
	out, err := l.kubectl(t, "", "get", "--raw", path)
	if err != nil {
		return nil, err
	}
	var answer struct {
		Responses []string `json:"responses"`
		Errors    []string `json:"errors"`
	}
	if err := json.Unmarshal(out, &answer); err != nil {
		return nil, fmt.Errorf("dial answer %q: %w", out, err)
	}
	if len(answer.Errors) > 0 {
		return answer.Responses, fmt.Errorf("dial %s:%d from %s: %s", host, port, from, strings.Join(answer.Errors, "; "))
	}
	return answer.Responses, nil
}

// checkKubernetesNodes: every VM is a Ready Kubernetes Node running the
// kubelet the image carries, and the controller says so.
func (l *labUnderTest) checkKubernetesNodes(t *testing.T) {
	out, err := l.kubectl(t, "", "get", "nodes", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Items []struct {
			Metadata struct{ Name string }
			Spec     struct {
				ProviderID string `json:"providerID"`
			}
			Status struct {
				Conditions []struct{ Type, Status string }
				NodeInfo   struct{ KubeletVersion string }
			}
		}
	}
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatal(err)
	}
	version := l.kubernetesVersion(t)
	want := l.names()
	var got []string
	for _, n := range list.Items {
		got = append(got, n.Metadata.Name)
		ready := slices.ContainsFunc(n.Status.Conditions, func(c struct{ Type, Status string }) bool {
			return c.Type == "Ready" && c.Status == "True"
		})
		if !ready || n.Status.NodeInfo.KubeletVersion != version {
			t.Errorf("Node %s: ready %v, kubelet %s (the cluster's version is %s)", n.Metadata.Name, ready, n.Status.NodeInfo.KubeletVersion, version)
		}
		// The kubelet registered the provider ID the controller put in
		// the node's role: its VM's BIOS UUID.
		role, err := l.ctl.Role(context.Background(), n.Metadata.Name)
		if err != nil {
			t.Fatal(err)
		}
		if role.ProviderID == "" || n.Spec.ProviderID != role.ProviderID {
			t.Errorf("Node %s: provider ID %q, its role's %q", n.Metadata.Name, n.Spec.ProviderID, role.ProviderID)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("Kubernetes Nodes %v, VMs %v", got, want)
	}
	for _, n := range l.cluster(t).Status.Nodes {
		if n.Kubernetes != "Ready" || n.KubeletVersion != version {
			t.Errorf("the controller shows %s as %q, kubelet %q", n.Name, n.Kubernetes, n.KubeletVersion)
		}
	}
}

// kubernetesVersion is the cluster's: its spec's, else the image's n (the
// first pinned).
func (l *labUnderTest) kubernetesVersion(t *testing.T) string {
	if v := l.cluster(t).Spec.KubernetesVersion; v != "" {
		return v
	}
	return kubernetesPins(t)[0].Version
}

func kubernetesPins(t *testing.T) []components.Kubernetes {
	pins, err := components.Load("../images/components.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return pins.Kubernetes
}

// checkPodNetwork: pods on the two workers reach each other over flannel's
// VXLAN, and a ClusterIP Service is resolved by name through CoreDNS and
// reached from a pod on another node than some of its backends.
func (l *labUnderTest) checkPodNetwork(t *testing.T) {
	for _, n := range l.cluster(t).Status.Nodes {
		if n.Role == v1.RoleWorker {
			l.loadTestImage(t, n.Name, "agnhost.tar")
		}
	}
	image := strings.TrimSpace(readFile(t, filepath.Join(os.Getenv("HARMONY_TEST_IMAGES"), "agnhost.ref")))
	if _, err := l.kubectl(t, netexecManifest(image), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	var pods []kubePod
	testutil.Eventually(t, 5*time.Minute, "two netexec pods Ready on the two workers", func() bool {
		pods = l.netexecPods(t)
		nodes := map[string]bool{}
		for _, p := range pods {
			if !p.readySince().IsZero() {
				nodes[p.Spec.NodeName] = true
			}
		}
		return len(pods) == 2 && len(nodes) == 2
	}, func() {
		out, _ := l.kubectl(t, "", "get", "pods", "-o", "wide", "-A")
		t.Logf("pods:\n%s", out)
	})
	a, b := pods[0], pods[1]
	for _, pair := range [][2]kubePod{{a, b}, {b, a}} {
		from, to := pair[0], pair[1]
		got, err := l.dial(t, from.Metadata.Name, to.Status.PodIP, netexecPort, 1)
		if err != nil || !slices.Equal(got, []string{to.Metadata.Name}) {
			t.Errorf("%s (on %s) to %s (%s on %s): answers %q, %v", from.Metadata.Name, from.Spec.NodeName,
				to.Metadata.Name, to.Status.PodIP, to.Spec.NodeName, got, err)
		}
	}
	// By name, through CoreDNS (on the masters), to the Service's
	// ClusterIP (kube-proxy's rules), from a pod on one worker: the
	// answers come from both backends, one of them on the other worker.
	name := fmt.Sprintf("%s.default.svc.cluster.local", netexecService)
	var seen []string
	testutil.Eventually(t, 2*time.Minute, "the Service answers by name from both backends", func() bool {
		got, err := l.dial(t, a.Metadata.Name, name, 80, 20)
		if err != nil {
			t.Logf("%v", err)
			return false
		}
		for _, h := range got {
			if !slices.Contains(seen, h) {
				seen = append(seen, h)
			}
		}
		return slices.Contains(seen, a.Metadata.Name) && slices.Contains(seen, b.Metadata.Name)
	}, func() { t.Logf("answers from %s", seen) })
}

// checkDrainedBeforePowerOff follows checkRemoveWorker: the removed
// worker's netexec pod was evicted and its replacement placed on the other
// worker before the controller powered the worker's VM off, and the
// replacement becomes Ready.
func (l *labUnderTest) checkDrainedBeforePowerOff(t *testing.T, worker string, before []kubePod) {
	var moved *kubePod
	for i := range before {
		if before[i].Spec.NodeName == worker {
			moved = &before[i]
		}
	}
	if moved == nil {
		t.Fatalf("no netexec pod was on %s: %+v", worker, before)
	}
	pods := l.netexecPods(t)
	var replacement *kubePod
	for i, p := range pods {
		if p.Spec.NodeName == worker {
			t.Errorf("pod %s still on the removed %s", p.Metadata.Name, worker)
		}
		if !slices.ContainsFunc(before, func(b kubePod) bool { return b.Metadata.Name == p.Metadata.Name }) {
			replacement = &pods[i]
		}
	}
	if replacement == nil || replacement.Spec.NodeName == "" {
		t.Fatalf("no replacement for %s scheduled elsewhere: %+v", moved.Metadata.Name, pods)
	}
	var poweredOff time.Time
	for _, e := range l.cluster(t).Status.Events {
		if strings.HasPrefix(e.Message, worker+": powered off") {
			poweredOff = e.Time
		}
	}
	if poweredOff.IsZero() {
		t.Fatalf("no power-off event for %s", worker)
	}
	// The drain evicts and waits for the evicted pods to end, as kubectl
	// drain does: the replacement exists and is placed on another node
	// before the VM powers off, and then becomes Ready there.
	if created := replacement.Metadata.CreationTimestamp; created.After(poweredOff) {
		t.Errorf("replacement %s created at %s, after %s was powered off at %s", replacement.Metadata.Name, created, worker, poweredOff)
	}
	name := replacement.Metadata.Name
	testutil.Eventually(t, 3*time.Minute, "the replacement Ready", func() bool {
		for _, p := range l.netexecPods(t) {
			if p.Metadata.Name == name && !p.readySince().IsZero() {
				return true
			}
		}
		return false
	}, func() { t.Logf("pods %+v", l.netexecPods(t)) })
	t.Logf("%s replaced by %s on %s, created %s before the power-off", moved.Metadata.Name, name,
		replacement.Spec.NodeName, poweredOff.Sub(replacement.Metadata.CreationTimestamp).Round(time.Second))
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
