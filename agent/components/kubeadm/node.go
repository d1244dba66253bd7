package kubeadm

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/harmonykaas/harmony/agent/kubeapi"
	"github.com/harmonykaas/harmony/agent/reconcile"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// nodeObject is what the component reads of its Kubernetes Node.
type nodeObject struct {
	Metadata struct {
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		Unschedulable bool `json:"unschedulable"`
	} `json:"spec"`
	Status struct {
		Conditions []struct {
			Type    string `json:"type"`
			Status  string `json:"status"`
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"conditions"`
		NodeInfo struct {
			KubeletVersion string `json:"kubeletVersion"`
		} `json:"nodeInfo"`
	} `json:"status"`
}

// observeNode reads the node's own Node with the kubelet's credential
// (the Node authorizer lets a node read itself) and keeps its Ready
// condition for the status report. A failed read keeps the last
// observation, whose time then shows its age.
func (c *Component) observeNode(ctx context.Context, host *reconcile.Host, name string) (*v1.KubernetesNodeStatus, error) {
	api, err := kubeapi.Open(host, KubeletKubeconfig, c.cfg.DialContext)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var node nodeObject
	code, err := api.Call(ctx, http.MethodGet, "/api/v1/nodes/"+url.PathEscape(name), "", nil, &node, http.StatusOK, http.StatusNotFound)
	if err != nil {
		return nil, err
	}
	obs := &v1.KubernetesNodeStatus{Ready: "Unknown", Reason: "NotRegistered",
		Message: "the kubelet has not registered the Node yet", ObservedAt: time.Now().UTC().Truncate(time.Second)}
	if code == http.StatusOK {
		obs.Reason, obs.Message = "", ""
		obs.KubeletVersion = node.Status.NodeInfo.KubeletVersion
		for _, cond := range node.Status.Conditions {
			if cond.Type == "Ready" {
				obs.Ready, obs.Reason, obs.Message = cond.Status, cond.Reason, cond.Message
			}
		}
	}
	obs.Clamp()
	c.node.Store(obs)
	if code == http.StatusOK {
		uncordoned, err := uncordonAfterHandOver(ctx, api, name, &node)
		if err != nil {
			return obs, err
		}
		if uncordoned {
			logger(host).Info("uncordoned the Node a hand-over had cordoned", "node", name)
		}
	}
	return obs, nil
}

// KubernetesNode is the last observation of the node's Kubernetes Node,
// or nil before the node has joined.
func (c *Component) KubernetesNode() *v1.KubernetesNodeStatus { return c.node.Load() }

// nodeSummary is the observation in a status message.
func nodeSummary(n *v1.KubernetesNodeStatus) string {
	switch {
	case n.Ready == "True":
		return "Node Ready"
	case n.Reason != "":
		return "Node not Ready (" + n.Reason + ")"
	}
	return "Node not Ready"
}
