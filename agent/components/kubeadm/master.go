package kubeadm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"time"

	"github.com/harmonykaas/harmony/agent/reconcile"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// reconcileMaster converges a master: configs (validated by kubeadm before
// they replace the old ones), the role's CAs, kubeadm's local phases, the
// apiserver (standing in for the kubelet when there is none), and on the
// first master the cluster-wide phases.
func (c *Component) reconcileMaster(ctx context.Context, host *reconcile.Host, role *v1.Role, p *plan, st reconcile.Status) reconcile.Status {
	// owe records, before a certificate, key or manifest the stand-in
	// apiserver reads at start changes, that it must restart: an agent
	// killed in between leaves the restart to the next pass. A kubelet
	// watches its manifests itself.
	var owe func() error
	if c.cfg.StandInForKubelet {
		st.Units = []string{APIServerUnit}
		owe = host.OweReload(APIServerUnit)
	}
	fail := func(err error) reconcile.Status { return c.fail(ctx, host, st, err) }
	if id := restorePending(role, p); id != "" {
		return c.stopForRestore(ctx, host, st, id)
	}
	// What is due for renewal is decided before the configuration is
	// rendered, since that carries the renewal's time (CertsRenewedEnv);
	// prune removes it once kubeadm has accepted the configuration.
	now := time.Now()
	due := dueForRenewal(host, kubeconfigFiles(p), now)
	renewed, err := certsRenewed(host, due, now)
	if err != nil {
		return fail(err)
	}
	p.certsRenewed = renewed

	// Configurations first, join before init: when kubeadm refuses either,
	// nothing else on the node has changed yet.
	wantJoin := !p.first && p.token != ""
	if wantJoin {
		join, err := renderJoin(p, apiServerPort)
		if err != nil {
			return fail(err)
		}
		if err := c.writeConfig(ctx, host, JoinConfigFile, join, p.token, &st); err != nil {
			return fail(err)
		}
	}
	initYAML, err := renderInit(role, p, apiServerPort)
	if err != nil {
		return fail(err)
	}
	if err := c.writeConfig(ctx, host, InitConfigFile, initYAML, p.token, &st); err != nil {
		return fail(err)
	}
	// Once kubeadm has accepted the configurations, before it runs.
	if err := writePatches(host, p, &st); err != nil {
		return fail(err)
	}
	if !wantJoin {
		// The first master joins nobody: drop a stale file holding a token.
		if err := removeFile(host, JoinConfigFile, &st); err != nil {
			return fail(err)
		}
	}

	if err := c.restoreAfterHandOver(ctx, host, &st); err != nil {
		return fail(err)
	}
	pkiDigest, err := writePKI(host, role, owe, &st)
	if err != nil {
		return fail(err)
	}
	if err := writeAuditPolicy(host, owe, &st); err != nil {
		return fail(err)
	}
	if err := prune(host, role, p, kubeconfigFiles(p), due, &st); err != nil {
		return fail(err)
	}

	// The runs that start the kubelet wait for its images; until then
	// nothing of kubeadm's runs, so a join finds no half-made node.
	startsKubelet := c.cfg.Kubelet && (p.first && !exists(host.Path(KubeletConfigFile)) ||
		!p.first && !exists(host.Path(KubeletKubeconfig)))
	if wait := c.imagesPending(host); startsKubelet && wait != "" {
		st.Phase = reconcile.PhaseConverged
		st.Message = wait
		return st
	}
	if c.cfg.Kubelet && !p.first && !exists(host.Path(KubeletKubeconfig)) {
		if err := c.joinControlPlane(ctx, host, p, &st); err != nil {
			return fail(err)
		}
	}
	if err := c.localPhases(ctx, host, p, initYAML, pkiDigest, owe, &st); err != nil {
		return fail(err)
	}
	if c.cfg.Kubelet && p.first && !exists(host.Path(KubeletConfigFile)) {
		// The kubelet then runs the static pods kubeadm wrote.
		if _, err := c.kubeadm(ctx, host, p.token, "init", "phase", "kubelet-start", "--config", InitConfigFile); err != nil {
			return fail(err)
		}
		st.Actions = append(st.Actions, "ran kubeadm init phase kubelet-start")
	}

	if c.cfg.StandInForKubelet {
		unit, err := c.standInUnit(host)
		if err != nil {
			return fail(err)
		}
		if !c.standInLogged {
			c.standInLogged = true
			logger(host).Info("no kubelet on this host: the agent runs kube-apiserver from its static-pod manifest as a process, standing in for the kubelet",
				"manifest", APIServerManifest, "unit", APIServerUnit)
		}
		// New certificates or keys (a rotated CA, new SANs) owed a
		// restart above (owe), since it reads several of them only at
		// start; RunUnit pays that debt.
		actions, err := host.RunUnit(ctx, unit, false)
		if err != nil {
			return fail(err)
		}
		st.Actions = append(st.Actions, actions...)
	}

	readyErr := c.ready(ctx, host)
	c.metrics.setReady(readyErr == nil)
	apiserver := "kube-apiserver"
	if c.cfg.StandInForKubelet {
		apiserver += " (standing in for the kubelet)"
	}
	var msg []string
	if readyErr == nil {
		msg = append(msg, apiserver+" ready")
	} else {
		msg = append(msg, fmt.Sprintf("%s not ready: %v", apiserver, readyErr))
	}
	var kubeletErr error
	if c.cfg.Kubelet {
		if kubeletErr = c.kubeletHealthy(ctx); kubeletErr != nil {
			msg = append(msg, kubeletErr.Error())
		} else {
			msg = append(msg, "kubelet healthy")
		}
	}

	var clusterDone time.Time
	switch {
	case !p.first:
	case readyErr != nil:
		msg = append(msg, "the cluster phases wait for it")
		clusterDone = c.clusterRecordTime(host)
	default:
		done, err := c.clusterPhases(ctx, host, p, initYAML, &st)
		if err != nil {
			c.metrics.setClusterPhases(c.clusterRecordTime(host))
			c.metrics.snapshot(host, kubeconfigFiles(p))
			return fail(err)
		}
		clusterDone = done
		msg = append(msg, "cluster phases done "+done.UTC().Format(time.RFC3339))
		pruned, err := c.pruneNodes(ctx, host, role, time.Now())
		st.Actions = append(st.Actions, pruned...)
		if err != nil {
			msg = append(msg, "stale Nodes not pruned: "+err.Error())
		}
	}
	c.metrics.setClusterPhases(clusterDone)
	c.metrics.snapshot(host, kubeconfigFiles(p))
	if readyErr == nil {
		// Every master, so that a kubelet's request waits for no one
		// master in particular; after the first master's cluster phases,
		// which bind admin.conf's group.
		decided, err := c.judgeServingRequests(ctx, host, role)
		st.Actions = append(st.Actions, decided...)
		if err != nil {
			msg = append(msg, "kubelet serving certificate requests not decided: "+err.Error())
		}
	}

	st.Phase = reconcile.PhaseConverged
	st.Healthy = readyErr == nil && kubeletErr == nil
	st.Message = strings.Join(msg, "; ")
	return st
}

// joinControlPlane joins this master on a host with a kubelet, once:
// kubeadm makes the certificates, kubeconfigs and manifests from the CAs
// already in place, and bootstraps the kubelet with the token. The
// manifests may exist from an earlier pass without a kubelet; that
// preflight check alone is waived.
func (c *Component) joinControlPlane(ctx context.Context, host *reconcile.Host, p *plan, st *reconcile.Status) error {
	if p.token == "" {
		return errors.New("kubeadm.bootstrapToken: empty; this master joins the control plane with it")
	}
	ignore := []string{
		"FileAvailable--etc-kubernetes-manifests-kube-apiserver.yaml",
		"FileAvailable--etc-kubernetes-manifests-kube-controller-manager.yaml",
		"FileAvailable--etc-kubernetes-manifests-kube-scheduler.yaml",
		// A join refused at kubelet-start (a VM that replaces this
		// master finds the old VM's Node still Ready when the old VM
		// could not mark it, releaseNode, until the node lifecycle
		// controller does, about 40 s after its power-off) leaves this
		// file; the next try writes it again.
		"FileAvailable--etc-kubernetes-bootstrap-kubelet.conf",
	}
	if _, err := c.kubeadm(ctx, host, p.token, "join", "--config", JoinConfigFile,
		"--ignore-preflight-errors="+strings.Join(ignore, ",")); err != nil {
		return err
	}
	st.Actions = append(st.Actions, "ran kubeadm join (control plane)")
	return nil
}

// removeFile removes a node file the role no longer calls for.
func removeFile(host *reconcile.Host, nodePath string, st *reconcile.Status) error {
	switch err := os.Remove(host.Path(nodePath)); {
	case err == nil:
		st.Actions = append(st.Actions, "removed "+nodePath)
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("remove %s: %w", nodePath, err)
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// restorePending is the ID of the etcd restore the role asks for that the
// local member has yet to do its part of; "" when none.
func restorePending(role *v1.Role, p *plan) string {
	if role.Etcd == nil || role.Etcd.Restore == nil || role.Etcd.Restore.ID == p.etcdRestored {
		return ""
	}
	return role.Etcd.Restore.ID
}

// stopForRestore keeps this master's control plane stopped while its etcd
// member is restored: an apiserver or controller manager of before the
// restore would serve, or act on, the old keyspace (or caches of it) while
// the restored cluster forms. The kubelet stops the static pods once their
// manifests go; the local phases make them afresh once the member is
// back, carrying the restore's ID (EtcdRestoredEnv).
func (c *Component) stopForRestore(ctx context.Context, host *reconcile.Host, st reconcile.Status, id string) reconcile.Status {
	if c.cfg.StandInForKubelet {
		actions, err := host.StopUnit(ctx, APIServerUnit)
		st.Actions = append(st.Actions, actions...)
		if err != nil {
			return c.fail(ctx, host, st, err)
		}
	}
	for _, name := range controlPlaneManifests {
		if err := removeFile(host, path.Join(ManifestsDir, name), &st); err != nil {
			return c.fail(ctx, host, st, err)
		}
	}
	c.metrics.setReady(false)
	st.Phase, st.Healthy = reconcile.PhaseConverged, false
	st.Message = "control plane stopped until this master's etcd member has done its part of restore " + id
	return st
}
