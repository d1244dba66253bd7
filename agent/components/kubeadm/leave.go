package kubeadm

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/harmonykaas/harmony/agent/reconcile"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

var _ reconcile.Leaver = (*Component)(nil)

// Leave undoes what kubeadm made of the node: the stand-in apiserver (the
// agent's own unit, which kubeadm reset knows nothing of) stops, then
// `kubeadm reset --force` runs with the same root handling as every other
// kubeadm command (--rootfs in the lab) but outside the agent's sandbox
// (Config.Unconfined: it unmounts pod volumes), then the agent's own kubeadm
// files go (the configurations hold the bootstrap token). reset skips
// remove-etcd-member: etcd is the agent's (external to kubeadm), and that
// phase would otherwise delete /var/lib/etcd, the running member's data,
// because it finds no kubeadm config saying where a local etcd keeps it.
// The member leaves in the etcd component's own step, after this one.
func (c *Component) Leave(ctx context.Context, host *reconcile.Host, role *v1.Role) reconcile.Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := reconcile.Status{Component: Name}
	if err := c.checkConfig(); err != nil {
		return st.Failed(err)
	}
	if handingOver(role) {
		return c.handOver(ctx, host, role)
	}
	c.metrics.clear()
	actions, err := host.StopUnit(ctx, APIServerUnit)
	st.Actions = actions
	if err != nil {
		return st.Failed(err)
	}
	marker := host.LeftMarker(Name)
	if note, ok := marker.Left(); ok {
		st.Phase, st.Healthy, st.Message = reconcile.PhaseLeft, true, note
		return st
	}
	if role.Role != v1.RoleMaster && role.Role != v1.RoleWorker {
		st.Phase, st.Healthy, st.Message = reconcile.PhaseLeft, true, "not a Kubernetes node: nothing to reset"
		return st
	}
	if _, err := c.kubeadmUnconfined(ctx, host, "reset", "--force", "--skip-phases=remove-etcd-member", "--cleanup-tmp-dir"); err != nil {
		return st.Failed(err)
	}
	st.Actions = append(st.Actions, "ran kubeadm reset")
	for _, dir := range []string{ConfigDir, StateDir} {
		p := host.Path(dir)
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			return st.Failed(fmt.Errorf("remove %s: %w", dir, err))
		}
		st.Actions = append(st.Actions, "removed "+dir)
	}
	note := "kubeadm reset"
	if c.cfg.StandInForKubelet {
		note += "; the stand-in apiserver stopped"
	}
	if err := marker.Set(note); err != nil {
		return st.Failed(err)
	}
	logger(host).Info("reset the node's kubeadm state")
	st.Phase, st.Healthy, st.Message = reconcile.PhaseLeft, true, note
	return st
}

// Drain is the first step of the leave sequence (drainStep): the node
// cordons itself and has its pods evicted through the API, still served
// on the VIP, before any of its services stop.
func (c *Component) Drain() reconcile.Leaver {
	return drainStep{kubelet: c.cfg.Kubelet, dial: c.cfg.DialContext}
}
