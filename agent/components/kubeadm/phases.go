package kubeadm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path"
	"strings"
	"time"

	"github.com/harmonykaas/harmony/agent/files"
	"github.com/harmonykaas/harmony/agent/kubeapi"
	"github.com/harmonykaas/harmony/agent/reconcile"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// Records of what the phases last ran with, so that an unchanged node
// (or a restarted agent) runs nothing.
const (
	localPhasesRecord   = StateDir + "/local-phases.sha256"
	clusterPhasesRecord = StateDir + "/cluster-phases.json"
	// clusterPhasesRefresh: the first master redoes its cluster phases
	// this often even when nothing changed. They are safe to redo, and
	// bootstrap-token then pushes the token's expiry (tokenTTL) forward.
	clusterPhasesRefresh = 12 * time.Hour
)

// localPhases runs kubeadm's per-master phases (certs, kubeconfig,
// control-plane) when their inputs changed or an output is missing.
// kubeadm keeps valid existing certificates and kubeconfigs, so a rerun
// changes only what must change. owe (if not nil) runs before they do.
func (c *Component) localPhases(ctx context.Context, host *reconcile.Host, p *plan, initYAML []byte, pkiDigest string, owe func() error, st *reconcile.Status) error {
	kubeconfigPhases := []string{"all"}
	if !p.first {
		kubeconfigPhases = []string{"admin", "controller-manager", "scheduler"}
	}
	record := digest(c.version, string(initYAML), pkiDigest, strings.Join(kubeconfigPhases, ","))
	if old, err := os.ReadFile(host.Path(localPhasesRecord)); err == nil && string(old) == record && allExist(host, localOutputs(p)) {
		return nil
	}
	if owe != nil {
		if err := owe(); err != nil {
			return err
		}
	}

	phases := [][]string{{"certs", "all"}}
	for _, k := range kubeconfigPhases {
		phases = append(phases, []string{"kubeconfig", k})
	}
	phases = append(phases, []string{"control-plane", "all"})
	for _, ph := range phases {
		args := append([]string{"init", "phase"}, ph...)
		if _, err := c.kubeadm(ctx, host, p.token, append(args, "--config", InitConfigFile)...); err != nil {
			return err
		}
		st.Actions = append(st.Actions, "ran kubeadm init phase "+strings.Join(ph, " "))
	}
	_, err := files.Write(host.Path(localPhasesRecord), []byte(record), 0o600, nil)
	return err
}

// localOutputs are what the local phases make; one missing reruns them.
func localOutputs(p *plan) []string {
	var out []string
	for _, leaf := range leafCerts {
		out = append(out, path.Join(PKIDir, leaf.name+".crt"), path.Join(PKIDir, leaf.name+".key"))
	}
	for _, k := range kubeconfigFiles(p) {
		out = append(out, path.Join(KubernetesDir, k))
	}
	for _, m := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		out = append(out, path.Join(ManifestsDir, m+".yaml"))
	}
	return out
}

// clusterRecord says when the cluster phases last completed, and with
// what inputs.
type clusterRecord struct {
	Inputs    string    `json:"inputs"`
	Completed time.Time `json:"completed"`
}

// clusterPhases runs, on the first master with a ready apiserver, the
// phases that act on the cluster rather than the node: upload-config,
// bootstrap-token (when the role has a token), the CoreDNS addon, and where a
// kubelet exists mark-control-plane and kubelet-finalize. They run once
// per change of inputs (recorded on disk, so an agent restart does not
// redo them) and again every clusterPhasesRefresh; every one is safe to
// redo. They reach this master's apiserver directly, not through the VIP.
func (c *Component) clusterPhases(ctx context.Context, host *reconcile.Host, p *plan, initYAML []byte, st *reconcile.Status) (time.Time, error) {
	var names []string
	for _, b := range bindings() {
		names = append(names, b.Body["metadata"].(map[string]any)["name"].(string))
	}
	// A new binding reruns the phases on clusters made before it; so does
	// the cluster-info check, which clusters made before it need.
	inputs := digest(c.version, string(initYAML), fmt.Sprint(c.cfg.Kubelet), strings.Join(names, ","), clusterInfoPath)
	var rec clusterRecord
	if data, err := os.ReadFile(host.Path(clusterPhasesRecord)); err == nil && json.Unmarshal(data, &rec) == nil &&
		rec.Inputs == inputs && time.Since(rec.Completed) < clusterPhasesRefresh {
		return rec.Completed, nil
	}

	superAdmin, err := kubeapi.ReadBounded(host.Path(SuperAdminKubeconfig))
	if err != nil {
		return time.Time{}, fmt.Errorf("read %s: %w", SuperAdminKubeconfig, err)
	}
	server := "https://" + net.JoinHostPort(p.advertise.String(), fmt.Sprint(apiServerPort))
	local, err := localKubeconfig(superAdmin, server)
	if err != nil {
		return time.Time{}, err
	}
	changed, err := files.Write(host.Path(LocalKubeconfig), local, 0o600, nil)
	if err != nil {
		return time.Time{}, err
	}
	if changed {
		st.Actions = append(st.Actions, "wrote "+LocalKubeconfig)
	}
	created, err := c.ensureBindings(ctx, host)
	st.Actions = append(st.Actions, created...)
	if err != nil {
		return time.Time{}, err
	}

	for _, args := range clusterPhaseArgs(p.token != "", c.cfg.Kubelet) {
		if _, err := c.kubeadm(ctx, host, p.token, args...); err != nil {
			return time.Time{}, err
		}
		name, _, _ := strings.Cut(strings.Join(args, " "), " --")
		st.Actions = append(st.Actions, "ran kubeadm "+name)
		if args[2] == "bootstrap-token" {
			mended, err := c.ensureClusterInfo(ctx, host, p.endpoint)
			st.Actions = append(st.Actions, mended...)
			if err != nil {
				return time.Time{}, err
			}
		}
	}

	rec = clusterRecord{Inputs: inputs, Completed: time.Now().UTC().Truncate(time.Second)}
	data, err := json.Marshal(rec)
	if err != nil {
		return time.Time{}, err
	}
	if _, err := files.Write(host.Path(clusterPhasesRecord), data, 0o600, nil); err != nil {
		return time.Time{}, err
	}
	return rec.Completed, nil
}

// clusterRecordTime is when the cluster phases last completed, or zero.
func (c *Component) clusterRecordTime(host *reconcile.Host) time.Time {
	var rec clusterRecord
	if data, err := os.ReadFile(host.Path(clusterPhasesRecord)); err == nil && json.Unmarshal(data, &rec) == nil {
		return rec.Completed
	}
	return time.Time{}
}

// clusterAdmins is the group admin.conf's certificate names, and the
// binding that makes it cluster-admin. kubeadm creates the binding only
// when its phases use admin.conf at its default path, through the VIP;
// ours use the local kubeconfig, so the component creates it.
const clusterAdmins = "kubeadm:cluster-admins"

// bindings are the ClusterRoleBindings the first master makes: admin.conf's
// group to cluster-admin, and the group of each Harmony grant role to its
// ClusterRole, so that a user's short-lived certificate from the
// controller gets what their grant says from the cluster's own RBAC.
func bindings() []kubeapi.Object {
	objs := []kubeapi.Object{kubeapi.GroupBinding(clusterAdmins, "cluster-admin", clusterAdmins)}
	for _, r := range v1.GrantRoles {
		objs = append(objs, kubeapi.GroupBinding(r.KubernetesGroup(), r.KubernetesClusterRole(), r.KubernetesGroup()))
	}
	return objs
}

// ensureBindings creates the bindings that do not exist yet, with the
// super-admin credentials; it returns what it created.
func (c *Component) ensureBindings(ctx context.Context, host *reconcile.Host) ([]string, error) {
	api, err := c.adminAPI(host)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return api.EnsureAll(ctx, bindings())
}

func digest(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func allExist(host *reconcile.Host, nodePaths []string) bool {
	for _, p := range nodePaths {
		if !exists(host.Path(p)) {
			return false
		}
	}
	return true
}

// clusterPhaseArgs are kubeadm's command lines for the cluster phases, in
// order. Each names InitConfigFile. The phases that take --kubeconfig use
// the local admin kubeconfig (the apiserver on this master);
// mark-control-plane and kubelet-finalize take no such flag and use
// kubeadm's /etc/kubernetes/admin.conf, which the local phases wrote.
func clusterPhaseArgs(token, kubelet bool) [][]string {
	local := []string{"--kubeconfig", LocalKubeconfig}
	phases := [][]string{append([]string{"upload-config", "all"}, local...)}
	if token {
		phases = append(phases, append([]string{"bootstrap-token"}, local...))
	}
	// CoreDNS alone: kube-proxy runs as a unit of every node
	// (agent/components/kubeproxy), not as kubeadm's DaemonSet.
	phases = append(phases, append([]string{"addon", "coredns"}, local...))
	if kubelet {
		phases = append(phases, []string{"mark-control-plane"}, []string{"kubelet-finalize", "all"})
	}
	for i, ph := range phases {
		phases[i] = append(append([]string{"init", "phase"}, ph...), "--config", InitConfigFile)
	}
	return phases
}
