package kubeadm

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/harmonykaas/harmony/agent/kubeapi"
	"github.com/harmonykaas/harmony/agent/reconcile"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// drainReserve is the part of a leave window the drain leaves to the
// steps after it (the VIP, HAProxy, kubeadm reset, the etcd member): past
// Deadline minus drainReserve it stops waiting for pods and lets the
// node leave with them still on it, as the controller will power it off
// at Deadline anyway.
const drainReserve = 3 * time.Minute

// drainStep is the first step of the leave sequence: where a kubelet runs,
// the node is cordoned and its pods evicted through the API, while every
// other part of the node still runs. It acts as the node itself, with the
// kubelet's own credential (kubelet.conf): the Node authorizer lets a node
// mark itself unschedulable and evict the pods bound to it (NodeRestriction
// allows no other), so no new credential is handed out for it.
type drainStep struct {
	kubelet bool
	dial    kubeapi.Dialer
	now     func() time.Time
}

func (drainStep) Name() string { return "drain" }

// Leave drains once per leave: the sequence runs again from its first
// step on every pass, and once kubeadm reset has removed kubelet.conf the
// node would look as if it had never joined. What the drain did is
// recorded for the leave (its deadline) and reported again instead.
func (d drainStep) Leave(ctx context.Context, host *reconcile.Host, role *v1.Role) reconcile.Status {
	record := drainRecord{host.LeftMarker(d.Name())}
	if st, ok := record.recall(role); ok {
		return st
	}
	st := d.drain(ctx, host, role)
	// Only a node that had joined has a drain worth recalling.
	if st.Phase == reconcile.PhaseLeft && recordedLeave(role) && exists(host.Path(KubeletKubeconfig)) {
		if err := record.keep(role, st); err != nil {
			return st.Failed(err)
		}
	}
	return st
}

// drainRecord is what a plain leave's drain did, kept on disk for that
// leave, which its deadline names.
type drainRecord struct{ marker reconcile.LeftMarker }

type drainOutcome struct {
	Deadline time.Time `json:"deadline"`
	Healthy  bool      `json:"healthy"`
	Message  string    `json:"message"`
}

// recordedLeave reports whether role's leave has its drain recorded: a
// plain leave, named by its deadline; a hand-over keeps its own mark
// (handOverDrained).
func recordedLeave(role *v1.Role) bool {
	return role.Leave != nil && !role.Leave.Deadline.IsZero() && !handingOver(role)
}

// recall is the recorded outcome of this leave's drain, if there is one.
func (r drainRecord) recall(role *v1.Role) (reconcile.Status, bool) {
	if !recordedLeave(role) {
		return reconcile.Status{}, false
	}
	note, ok := r.marker.Left()
	var o drainOutcome
	if !ok || json.Unmarshal([]byte(note), &o) != nil || !o.Deadline.Equal(role.Leave.Deadline) {
		return reconcile.Status{}, false // another leave's, or none: drain
	}
	return reconcile.Status{Component: "drain", Phase: reconcile.PhaseLeft, Healthy: o.Healthy, Message: o.Message}, true
}

// keep records st as the outcome of role's leave (recordedLeave).
func (r drainRecord) keep(role *v1.Role, st reconcile.Status) error {
	note, err := json.Marshal(drainOutcome{Deadline: role.Leave.Deadline, Healthy: st.Healthy, Message: st.Message})
	if err != nil {
		return err
	}
	return r.marker.Set(string(note))
}

func (d drainStep) drain(ctx context.Context, host *reconcile.Host, role *v1.Role) reconcile.Status {
	st := reconcile.Status{Component: "drain", Phase: reconcile.PhaseLeft, Healthy: true}
	switch {
	case role.Role != v1.RoleMaster && role.Role != v1.RoleWorker:
		st.Message = "not a Kubernetes node: nothing to drain"
		return st
	case !d.kubelet:
		st.Message = "no kubelet on this host: nothing to cordon or drain"
		return st
	case !exists(host.Path(KubeletKubeconfig)):
		st.Message = "never joined (no " + KubeletKubeconfig + "): nothing to drain"
		return st
	case handingOver(role) && exists(host.Path(handOverDrained)):
		// The hand-over's later steps have stopped the apiserver this
		// node's credential reaches: the drain is not done again.
		st.Message = "cordoned and drained for the hand-over"
		return st
	}
	api, err := d.nodeClient(host)
	if err != nil {
		return d.retryOrGiveUp(st, role, fmt.Errorf("the node's API client: %w", err))
	}
	if err := cordon(ctx, api, role.NodeName, handingOver(role)); err != nil {
		return d.retryOrGiveUp(st, role, err)
	}
	st.Actions = append(st.Actions, "cordoned "+role.NodeName)
	left, err := evictAll(ctx, api, role.NodeName)
	if err != nil {
		return d.retryOrGiveUp(st, role, err)
	}
	if len(left) > 0 {
		return d.retryOrGiveUp(st, role, fmt.Errorf("%d pods still on the node: %s", len(left), strings.Join(left, ", ")))
	}
	st.Message = "cordoned and drained"
	if handingOver(role) {
		if err := setHandOverMark(host, handOverDrained, "drained"); err != nil {
			return st.Failed(err)
		}
	}
	return st
}

// retryOrGiveUp reports Leaving (the next pass drains again) until the
// drain's share of the leave window is used up; then Left, unhealthy, so
// that the node still hands over its VIP and etcd member in time. With
// KeepPods (a worker an upgrade replaces) it never gives up.
func (d drainStep) retryOrGiveUp(st reconcile.Status, role *v1.Role, err error) reconcile.Status {
	now := time.Now
	if d.now != nil {
		now = d.now
	}
	if role.Leave != nil && !role.Leave.KeepPods && !role.Leave.Deadline.IsZero() && now().After(role.Leave.Deadline.Add(-drainReserve)) {
		st.Phase, st.Healthy = reconcile.PhaseLeft, false
		st.Message = fmt.Sprintf("drain given up %s before the leave deadline: %v", drainReserve, err)
		return st
	}
	st.Phase, st.Healthy = reconcile.PhaseLeaving, true
	st.Message = "draining: " + err.Error()
	return st
}

// nodeClient is the node's own access to its cluster's API, with the
// kubelet's credential (kubelet.conf and the certificate it rotates).
func (d drainStep) nodeClient(host *reconcile.Host) (*kubeapi.Client, error) {
	return kubeapi.Open(host, KubeletKubeconfig, d.dial)
}

// cordon marks the node unschedulable; for a hand-over with the mark that
// has the node that takes over uncordon it.
func cordon(ctx context.Context, api *kubeapi.Client, node string, handOver bool) error {
	patch := map[string]any{"spec": map[string]any{"unschedulable": true}}
	if handOver {
		patch["metadata"] = map[string]any{"annotations": map[string]any{handOverAnnotation: "true"}}
	}
	_, err := api.Call(ctx, http.MethodPatch, "/api/v1/nodes/"+url.PathEscape(node), "application/merge-patch+json", patch, nil, http.StatusOK)
	return err
}

// pod is what the drain reads of a pod.
type pod struct {
	Metadata struct {
		Name              string            `json:"name"`
		Namespace         string            `json:"namespace"`
		Annotations       map[string]string `json:"annotations"`
		DeletionTimestamp *time.Time        `json:"deletionTimestamp"`
		OwnerReferences   []struct {
			Kind       string `json:"kind"`
			Controller *bool  `json:"controller"`
		} `json:"ownerReferences"`
	} `json:"metadata"`
}

// mirrorAnnotation marks the API's copy of a static pod, which lives as
// long as its manifest, not through the API.
const mirrorAnnotation = "kubernetes.io/config.mirror"

// evictable reports whether a drain moves the pod, as kubectl drain
// --ignore-daemonsets does: not a static pod's mirror, not a DaemonSet's
// pod (its controller would put it straight back). A pod that has ended
// is evicted too (the API deletes it at once, whatever its budget): the
// kubelet marks an evicted pod Failed or Succeeded before it deletes it,
// and a drain that took that for gone let the VM power off with the pod
// still bound to the node.
func (p *pod) evictable() bool {
	if _, ok := p.Metadata.Annotations[mirrorAnnotation]; ok {
		return false
	}
	for _, o := range p.Metadata.OwnerReferences {
		if o.Kind == "DaemonSet" && o.Controller != nil && *o.Controller {
			return false
		}
	}
	return true
}

// evictAll asks for the eviction of every evictable pod on the node and
// returns those still there ("namespace/name", with why when an eviction
// was refused): evicted pods that are still terminating, and pods a
// disruption budget keeps for now.
func evictAll(ctx context.Context, api *kubeapi.Client, node string) ([]string, error) {
	var list struct {
		Items []pod `json:"items"`
	}
	q := url.Values{"fieldSelector": {"spec.nodeName=" + node}}
	if _, err := api.Call(ctx, http.MethodGet, "/api/v1/pods?"+q.Encode(), "", nil, &list, http.StatusOK); err != nil {
		return nil, err
	}
	var left []string
	for _, p := range list.Items {
		if !p.evictable() {
			continue
		}
		name := p.Metadata.Namespace + "/" + p.Metadata.Name
		if p.Metadata.DeletionTimestamp != nil {
			left = append(left, name+" (terminating)")
			continue
		}
		eviction := map[string]any{
			"apiVersion": "policy/v1", "kind": "Eviction",
			"metadata": map[string]any{"name": p.Metadata.Name, "namespace": p.Metadata.Namespace},
		}
		path := "/api/v1/namespaces/" + url.PathEscape(p.Metadata.Namespace) + "/pods/" + url.PathEscape(p.Metadata.Name) + "/eviction"
		code, err := api.Call(ctx, http.MethodPost, path, "application/json", eviction, nil,
			http.StatusCreated, http.StatusOK, http.StatusNotFound, http.StatusTooManyRequests)
		switch {
		case err != nil:
			return nil, err
		case code == http.StatusNotFound:
			// Gone meanwhile.
		case code == http.StatusTooManyRequests:
			left = append(left, name+" (its disruption budget allows no eviction now)")
		default:
			left = append(left, name+" (evicted, terminating)")
		}
	}
	return left, nil
}
