package kubeadm

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"time"

	"github.com/harmonykaas/harmony/agent/kubeapi"
	"github.com/harmonykaas/harmony/agent/reconcile"
	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/images/components"
)

// HandedOverDir holds the control-plane manifests a master took out of
// the kubelet's sight when it handed over; a later Reconcile (a rollback
// that powered this VM on again) makes them afresh and empties it. It is
// beside the manifests' directory, so that a rename moves them (another
// file system, such as /var on a partition of its own, would not).
const HandedOverDir = KubernetesDir + "/harmony-handed-over"

// Marks a hand-over leaves with the held manifests; a VM that serves
// again clears them with those.
const (
	// handOverDrained: the drain of the hand-over is done.
	handOverDrained = HandedOverDir + "/drained"
	// kubeletStopped: the hand-over stops (or has stopped) the kubelet,
	// so a VM that serves again without a reboot starts it.
	kubeletStopped = HandedOverDir + "/kubelet-stopped"
	// nodeReleased: the Node's Ready condition is Unknown for the VM that
	// takes over.
	nodeReleased = HandedOverDir + "/node-released"
)

func handingOver(role *v1.Role) bool { return role.Leave != nil && role.Leave.HandOver }

// setHandOverMark writes one of the hand-over's marks, note its content.
func setHandOverMark(host *reconcile.Host, mark, note string) error {
	if err := os.MkdirAll(host.Path(HandedOverDir), 0o700); err != nil {
		return err
	}
	return os.WriteFile(host.Path(mark), []byte(note+"\n"), 0o600)
}

// handOverAnnotation marks a Node cordoned by a hand-over: the node that
// takes over (or the old one, rolled back) uncordons it. A Node an admin
// cordoned has no such mark and stays cordoned.
const handOverAnnotation = "harmony.io/cordoned-for-hand-over"

// controlPlaneManifests are the static pods a hand-over stops.
var controlPlaneManifests = []string{"kube-apiserver.yaml", "kube-controller-manager.yaml", "kube-scheduler.yaml"}

// handOver stops this master's control plane for a VM that replaces it
// (Leave with HandOver): the kubelet stops the static pods once their
// manifests leave its directory, and the step waits until the local
// apiserver no longer answers, so that the power-off that follows cuts no
// request. Nothing is reset: the Node, its certificates and the cluster's
// record of it stay for the new VM.
func (c *Component) handOver(ctx context.Context, host *reconcile.Host, role *v1.Role) reconcile.Status {
	st := reconcile.Status{Component: Name}
	c.metrics.clear()
	actions, err := host.StopUnit(ctx, APIServerUnit)
	st.Actions = actions
	if err != nil {
		return st.Failed(err)
	}
	if role.Role != v1.RoleMaster || !c.cfg.Kubelet {
		st.Phase, st.Healthy, st.Message = reconcile.PhaseLeft, true, "no control plane pods to stop; nothing reset: the new VM takes the node over"
		return st
	}
	hold := host.Path(HandedOverDir)
	if err := os.MkdirAll(hold, 0o700); err != nil {
		return st.Failed(err)
	}
	for _, name := range controlPlaneManifests {
		from := host.Path(path.Join(ManifestsDir, name))
		switch err := os.Rename(from, path.Join(hold, name)); {
		case err == nil:
			st.Actions = append(st.Actions, "moved "+path.Join(ManifestsDir, name)+" out of the kubelet's sight")
		case !errors.Is(err, fs.ErrNotExist):
			return st.Failed(fmt.Errorf("stop %s: %w", name, err))
		}
	}
	if err := c.ready(ctx, host); err == nil {
		st.Phase, st.Message = reconcile.PhaseLeaving, "waiting for the kubelet to stop kube-apiserver"
		return st
	}
	st.Phase, st.Healthy = reconcile.PhaseLeft, true
	st.Message = "control plane stopped; nothing reset: the new VM takes the node over"
	// The first master's new VM takes over without a join (kubeadm's
	// kubelet-start), which checks nothing of the Node.
	if first, err := isFirstMaster(role); err == nil && !first {
		st.Message += "; " + c.releaseNode(ctx, host, role, &st)
	}
	return st
}

// releaseNode lets the VM that takes over join at once, and says how it
// went. kubeadm join refuses a name whose Node is Ready, and this Node
// stays Ready until the node lifecycle controller misses its kubelet,
// about 50 s after the power-off: each replaced master but the first
// waited that long. So, its static pods stopped, the kubelet stops too
// (its next status update, within 10 s, would say Ready again), and the
// node marks its own Ready condition Unknown with the kubelet's
// credential (NodeRestriction lets a node update its own status), through
// the VIP: its own apiserver has stopped. Best effort: whatever fails is
// said, and the node lifecycle controller marks the Node later, as it did
// before.
func (c *Component) releaseNode(ctx context.Context, host *reconcile.Host, role *v1.Role, st *reconcile.Status) string {
	const (
		released = "kubelet stopped and Node marked Ready=Unknown for the new VM"
		later    = "; the new VM's join waits for the node lifecycle controller to mark the Node"
	)
	if exists(host.Path(nodeReleased)) {
		return released
	}
	// Marked before the stop, so that an agent killed right after it
	// still has a VM that serves again start the kubelet.
	newStop := !exists(host.Path(kubeletStopped))
	if err := setHandOverMark(host, kubeletStopped, "stopped by the hand-over"); err != nil {
		return "kubelet not stopped: " + err.Error() + later
	}
	if err := c.systemctl(ctx, "stop", components.KubeletUnit); err != nil {
		return "kubelet not stopped: " + err.Error() + later
	}
	if newStop {
		st.Actions = append(st.Actions, "stopped "+components.KubeletUnit)
	}
	if err := c.markNodeHandedOver(ctx, host, role); err != nil {
		return "kubelet stopped; Node not marked: " + err.Error() + later
	}
	if err := setHandOverMark(host, nodeReleased, "released"); err != nil {
		return "kubelet stopped; Node marked, not recorded: " + err.Error()
	}
	st.Actions = append(st.Actions, "marked Node "+role.NodeName+" Ready=Unknown")
	logger(host).Info("stopped the kubelet and marked the Node not Ready for the VM that takes over", "node", role.NodeName)
	return released
}

// markNodeHandedOver sets the node's Ready condition to Unknown, as the
// node lifecycle controller does for a node whose kubelet went silent,
// with a reason that says why. A Node that is gone needs nothing.
func (c *Component) markNodeHandedOver(ctx context.Context, host *reconcile.Host, role *v1.Role) error {
	_, endpoint, err := vipEndpoint(role, frontendPort)
	if err != nil {
		return err
	}
	api, err := kubeapi.Open(host, KubeletKubeconfig, c.cfg.DialContext)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return markHandedOver(ctx, api.At("https://"+endpoint), role.NodeName, time.Now())
}

// handedOverReason is the Ready condition's reason on a Node whose VM has
// handed over.
const handedOverReason = "HandedOver"

func markHandedOver(ctx context.Context, api *kubeapi.Client, node string, now time.Time) error {
	at := now.UTC().Format(time.RFC3339)
	// A strategic merge patch merges the conditions by type: the others stay.
	patch := map[string]any{"status": map[string]any{"conditions": []map[string]any{{
		"type": "Ready", "status": "Unknown", "reason": handedOverReason,
		"message":           "Harmony stopped this node's kubelet: the VM that replaces it takes the Node over",
		"lastHeartbeatTime": at, "lastTransitionTime": at,
	}}}}
	_, err := api.Call(ctx, http.MethodPatch, "/api/v1/nodes/"+url.PathEscape(node)+"/status",
		"application/strategic-merge-patch+json", patch, nil, http.StatusOK, http.StatusNotFound)
	if err != nil {
		return fmt.Errorf("mark Node %s Ready=Unknown: %w", node, err)
	}
	return nil
}

// restoreAfterHandOver clears what a hand-over left on a VM that serves
// again (a rolled-back replacement): the kubelet the hand-over stopped
// starts again (a rollback before the power-off does not reboot this VM),
// and the held manifests go, as the local phases make them anew.
func (c *Component) restoreAfterHandOver(ctx context.Context, host *reconcile.Host, st *reconcile.Status) error {
	hold := host.Path(HandedOverDir)
	if _, err := os.Stat(hold); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if c.cfg.Kubelet && exists(host.Path(kubeletStopped)) {
		if err := c.systemctl(ctx, "start", components.KubeletUnit); err != nil {
			return err
		}
		st.Actions = append(st.Actions, "started "+components.KubeletUnit+", which the hand-over had stopped")
	}
	if err := os.RemoveAll(hold); err != nil {
		return fmt.Errorf("remove %s: %w", HandedOverDir, err)
	}
	st.Actions = append(st.Actions, "removed "+HandedOverDir+": this VM serves again")
	return nil
}

// uncordonAfterHandOver makes a Node cordoned by a hand-over schedulable
// again, once the node that took it over is up.
func uncordonAfterHandOver(ctx context.Context, api *kubeapi.Client, name string, node *nodeObject) (bool, error) {
	if !node.Spec.Unschedulable || node.Metadata.Annotations[handOverAnnotation] == "" {
		return false, nil
	}
	_, err := api.Call(ctx, http.MethodPatch, "/api/v1/nodes/"+url.PathEscape(name), "application/merge-patch+json",
		map[string]any{"metadata": map[string]any{"annotations": map[string]any{handOverAnnotation: nil}},
			"spec": map[string]any{"unschedulable": false}}, nil, http.StatusOK)
	if err != nil {
		return false, fmt.Errorf("uncordon after the hand-over: %w", err)
	}
	return true, nil
}
