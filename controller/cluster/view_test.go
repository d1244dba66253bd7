package cluster

import (
	"strings"
	"testing"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// The PodNetwork condition says which network runs and whether it moves
// packets: flannel with its VXLAN settings and kube-proxy's mode, and
// contiv plainly as configuration only, also for a spec stored before
// network existed.
func TestPodNetworkCondition(t *testing.T) {
	flannel := v1.ClusterSpec{Network: &v1.NetworkSpec{Plugin: v1.CNIFlannel, KubeProxyMode: v1.KubeProxyIPTables,
		Flannel: &v1.FlannelSettings{VNI: 7, Port: 4789}}}
	c := podNetwork(&flannel)
	if c.Type != v1.ConditionPodNetwork || c.Status != "True" || c.Reason != "Flannel" ||
		c.Message != "flannel VXLAN (VNI 7, UDP port 4789); kube-proxy mode iptables" {
		t.Errorf("flannel: %+v", c)
	}
	for name, spec := range map[string]v1.ClusterSpec{
		"contiv":                {Network: &v1.NetworkSpec{Plugin: v1.CNIContiv}},
		"stored before network": {},
	} {
		c := podNetwork(&spec)
		if c.Status != "False" || c.Reason != "ContivConfigurationOnly" || !strings.Contains(c.Message, "configuration only") {
			t.Errorf("%s: %+v", name, c)
		}
	}
}

// A Node's Ready condition reads as kubectl shows it, and a readiness
// condition is True only when every live node counts.
func TestReadinessWords(t *testing.T) {
	for in, want := range map[string]string{"True": "Ready", "False": "NotReady", "Unknown": "Unknown", "": "Unknown"} {
		if got := kubernetesReady(in); got != want {
			t.Errorf("kubernetesReady(%q) = %q, want %q", in, got, want)
		}
	}
	for _, tc := range []struct {
		n, live int
		want    string
	}{{5, 5, "True"}, {4, 5, "False"}, {0, 0, "False"}} {
		if got := allOf(tc.n, tc.live); got != tc.want {
			t.Errorf("allOf(%d, %d) = %q, want %q", tc.n, tc.live, got, tc.want)
		}
	}
}

// NodesReady names the nodes that refuse their role for good, with what
// each component said, and only then changes its reason.
func TestNodesReadyNamesRefusals(t *testing.T) {
	if c := nodesReady(3, 3, nil, nil); c.Status != "True" || c.Reason != "AgentReports" || c.Message != "3 of 3 nodes report Ready" {
		t.Errorf("all Ready: %+v", c)
	}
	lacks := refusedComponents([]v1.ComponentStatus{
		{Name: "etcd", Healthy: true, Phase: "Converged"},
		{Name: "kubeadm", Phase: "Failed", Message: "kubeadm join: connection refused"},
		{Name: "kubelet", Phase: v1.ComponentRefused, Message: "kubernetesVersion v1.34.99: this image carries no kubelet of that version"},
	})
	if lacks != "kubelet: kubernetesVersion v1.34.99: this image carries no kubelet of that version" {
		t.Errorf("refusedComponents = %q: want the Refused component alone, with its message", lacks)
	}
	c := nodesReady(2, 3, []string{"c-m2 (" + lacks + ")"}, nil)
	if c.Status != "False" || c.Reason != "RoleRefused" ||
		c.Message != "2 of 3 nodes report Ready; refusing their role for good, their image lacking what it asks for: c-m2 (kubelet: kubernetesVersion v1.34.99: this image carries no kubelet of that version)" {
		t.Errorf("a refusal: %+v", c)
	}
}
