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

	"github.com/harmonykaas/harmony/agent/kubeapi"
	"github.com/harmonykaas/harmony/agent/reconcile"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// HandedOverDir holds the control-plane manifests a master took out of
// the kubelet's sight when it handed over; a later Reconcile (a rollback
// that powered this VM on again) makes them afresh and empties it. It is
// beside the manifests' directory, so that a rename moves them (another
// file system, such as /var on a partition of its own, would not).
const HandedOverDir = KubernetesDir + "/harmony-handed-over"

// handOverDrained records, with the held manifests, that the drain of a
// hand-over is done; a VM that serves again clears it with them.
const handOverDrained = HandedOverDir + "/drained"

func handingOver(role *v1.Role) bool { return role.Leave != nil && role.Leave.HandOver }

func markHandOverDrained(host *reconcile.Host) error {
	if err := os.MkdirAll(host.Path(HandedOverDir), 0o700); err != nil {
		return err
	}
	return os.WriteFile(host.Path(handOverDrained), []byte("drained\n"), 0o600)
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
	st.Phase, st.Healthy, st.Message = reconcile.PhaseLeft, true, "control plane stopped; nothing reset: the new VM takes the node over"
	return st
}

// restoreAfterHandOver clears what a hand-over left on a VM that serves
// again (a rolled-back replacement): the held manifests go, as the local
// phases make them anew.
func restoreAfterHandOver(host *reconcile.Host, st *reconcile.Status) error {
	hold := host.Path(HandedOverDir)
	if _, err := os.Stat(hold); errors.Is(err, fs.ErrNotExist) {
		return nil
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
