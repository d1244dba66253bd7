package cluster

import (
	"context"
	"fmt"
	"strings"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/store"
	"github.com/harmonykaas/harmony/controller/vsphere"
)

const (
	// statusVCenterTimeout bounds the vCenter read of Get.
	statusVCenterTimeout = 10 * time.Second
	eventsInView         = 30
)

// staleBefore is when a node's agent must have reported since not to be
// Unresponsive: StatusStaleAfter ago, once this controller has been up
// that long (one that was down heard nothing meanwhile); zero before.
func (s *Service) staleBefore() time.Time {
	now := s.cfg.Now()
	if now.Sub(s.started) < v1.StatusStaleAfter {
		return time.Time{}
	}
	return now.Add(-v1.StatusStaleAfter)
}

// List returns every cluster from the store, without asking vCenter.
func (s *Service) List() ([]v1.Cluster, error) {
	out := []v1.Cluster{}
	staleBefore := s.staleBefore()
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		recs, err := store.ListJSON[record](tx, store.Clusters, "")
		if err != nil {
			return err
		}
		for i := range recs {
			machines, err := loadMachines(tx, recs[i].Spec.Name)
			if err != nil {
				return err
			}
			out = append(out, clusterView(tx, &recs[i], machines, nil, 0, staleBefore))
		}
		return nil
	})
	return out, err
}

// Get merges the store's workflow state, the agents' reports and what
// vCenter says now (power, guest IPs). vCenter being unreachable is a
// condition of the answer, not an error.
func (s *Service) Get(ctx context.Context, name string) (v1.Cluster, error) {
	var rec *record
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		var err error
		rec, err = s.load(tx, name)
		return err
	})
	if err != nil {
		return v1.Cluster{}, err
	}
	vms, vcErr := s.clusterVMs(ctx, rec)
	var view v1.Cluster
	err = s.cfg.Store.View(func(tx *store.Tx) error {
		if rec, err = s.load(tx, name); err != nil {
			return err
		}
		machines, err := loadMachines(tx, name)
		if err != nil {
			return err
		}
		view = clusterView(tx, rec, machines, vms, eventsInView, s.staleBefore())
		return nil
	})
	if err != nil {
		return v1.Cluster{}, err
	}
	if vcErr != nil {
		view.Status.Conditions = append(view.Status.Conditions, v1.Condition{Type: "VCenterReachable", Status: "False",
			Reason: "ReadFailed", Message: vcErr.Error(), LastTransitionTime: s.cfg.Now().UTC()})
	}
	if view.Status.EtcdSnapshotCopies, err = s.cfg.copiesOf(rec); err != nil {
		return v1.Cluster{}, err
	}
	return view, nil
}

// Operation returns an operation; one on a cluster comes with the
// cluster's node progress and the events after since (and newer than the
// operation), and Revision set to the newest event's sequence.
func (s *Service) Operation(id string, since int64) (*v1.Operation, error) {
	var op v1.Operation
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		if err := tx.Get(store.Operations, id, &op); err != nil {
			return err
		}
		if op.Cluster == "" {
			return nil
		}
		op.Revision = since
		evs, err := events(tx, op.Cluster, max(since, 0), eventsInView)
		if err != nil {
			return err
		}
		for _, e := range evs {
			if e.Time.Before(op.CreatedAt) {
				continue
			}
			op.Events = append(op.Events, e)
		}
		if len(evs) > 0 {
			op.Revision = evs[len(evs)-1].Seq
		}
		rec, err := loadCluster(tx, op.Cluster)
		if err != nil {
			return nil // deleted: the events are gone with it
		}
		machines, err := loadMachines(tx, op.Cluster)
		if err != nil {
			return err
		}
		op.Nodes = nodeViews(tx, rec, machines, nil, s.staleBefore())
		return nil
	})
	return &op, err
}

// OperationChanged reports whether operation id has ended or, for one on
// a cluster, the cluster has an event newer than since: what a watch of
// Operation waits for, read without building the operation's view.
func (s *Service) OperationChanged(id string, since int64) (bool, error) {
	var changed bool
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		var op v1.Operation
		if err := tx.Get(store.Operations, id, &op); err != nil {
			return err
		}
		if op.Done() || op.Cluster == "" {
			changed = op.Done()
			return nil
		}
		newest, err := newestEvent(tx, op.Cluster)
		changed = newest > since
		return err
	})
	return changed, err
}

// clusterVMs reads the cluster folder's VMs from vCenter.
func (s *Service) clusterVMs(ctx context.Context, rec *record) (map[string]vsphere.VMInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, statusVCenterTimeout)
	defer cancel()
	provider, err := s.cfg.Catalog.Provider(rec.Spec.Provider)
	if err != nil {
		return nil, err
	}
	vc, err := s.cfg.Catalog.Session(ctx, provider)
	if err != nil {
		return nil, err
	}
	folder, err := vc.ClusterFolder(ctx, rec.Spec.Name)
	if err != nil {
		return nil, err
	}
	list, err := vc.VMs(ctx, folder)
	if err != nil {
		return nil, err
	}
	out := make(map[string]vsphere.VMInfo, len(list))
	for _, vm := range list {
		out[vm.Name] = vm
	}
	return out, nil
}

func clusterView(tx *store.Tx, rec *record, machines []machine, vms map[string]vsphere.VMInfo, nEvents int, staleBefore time.Time) v1.Cluster {
	spec := rec.Spec
	view := v1.Cluster{Spec: spec, Status: v1.ClusterStatus{
		Generation: rec.Generation, ObservedGeneration: rec.ObservedGeneration,
		Conditions: rec.Conditions, CreatedAt: rec.CreatedAt,
		Nodes: nodeViews(tx, rec, machines, vms, staleBefore),
	}}
	failed, pending, ready, live, kubeReady := false, false, 0, 0, 0
	var refused, silent []string
	for _, n := range view.Status.Nodes {
		switch n.Phase {
		case "Failed":
			failed = true
		case "Ready":
			ready++
		case "Unresponsive":
			silent = append(silent, fmt.Sprintf("%s (since %s)", n.Name, n.LastReport.Format(time.RFC3339)))
		}
		if n.Phase == "Kept" || n.Phase == "Removing" {
			continue
		}
		live++
		if n.Kubernetes == "Ready" {
			kubeReady++
		}
		if r := refusedComponents(n.Components); r != "" {
			refused = append(refused, fmt.Sprintf("%s (%s)", n.Name, r))
		}
	}
	for _, m := range machines {
		if !m.settled() {
			pending = true
		}
	}
	if r := rec.EtcdSnapshot; r != nil {
		req := r.EtcdSnapshotRequest
		view.Status.EtcdSnapshotRequest = &req
	}
	if u := rec.Upgrade; u != nil {
		view.Status.Upgrade = upgradeView(rec, machines)
	}
	switch {
	case rec.Deleting:
		view.Status.Phase = v1.PhaseDeleting
	case failed:
		view.Status.Phase = v1.PhaseFailed
	case rec.Upgrade.running():
		view.Status.Phase = v1.PhaseUpgrading
	case pending || rec.ObservedGeneration < rec.Generation:
		view.Status.Phase = v1.PhaseProvisioning
	default:
		view.Status.Phase = v1.PhaseRunning
	}
	view.Status.Conditions = append(append([]v1.Condition{}, view.Status.Conditions...), nodesReady(ready, live, refused, silent))
	view.Status.Conditions = append(view.Status.Conditions, v1.Condition{
		Type: v1.ConditionKubernetesNodesReady, Status: allOf(kubeReady, live), Reason: "AgentReports",
		Message: fmt.Sprintf("%d of %d Kubernetes Nodes Ready", kubeReady, live)}, podNetwork(&spec))
	if nEvents > 0 {
		view.Status.Events, _ = events(tx, spec.Name, 0, nEvents)
	}
	return view
}

// nodesReady is the NodesReady condition: how many of the live nodes
// report Ready, which refuse their role for good (their image lacks what
// it asks for), since waiting will not make those Ready, and which have
// gone silent.
func nodesReady(ready, live int, refused, silent []string) v1.Condition {
	c := v1.Condition{Type: v1.ConditionNodesReady, Status: allOf(ready, live), Reason: "AgentReports",
		Message: fmt.Sprintf("%d of %d nodes report Ready", ready, live)}
	if len(refused) > 0 {
		c.Reason = "RoleRefused"
		c.Message += "; refusing their role for good, their image lacking what it asks for: " + strings.Join(refused, "; ")
	}
	if len(silent) > 0 {
		c.Message += fmt.Sprintf("; no report for over %s: %s", v1.StatusStaleAfter, strings.Join(silent, ", "))
	}
	return c
}

// allOf is a condition's status: True when n counts every one of the live
// nodes, and there are some.
func allOf(n, live int) string {
	if n == live && live > 0 {
		return "True"
	}
	return "False"
}

// kubernetesReady names a Node's Ready condition status as kubectl does.
func kubernetesReady(status string) string {
	switch status {
	case "True":
		return "Ready"
	case "False":
		return "NotReady"
	}
	return "Unknown"
}

// podNetwork is the PodNetwork condition: what the spec's network is and
// whether it moves packets.
func podNetwork(spec *v1.ClusterSpec) v1.Condition {
	cni := spec.CNI()
	if cni.Type == v1.CNIContiv {
		return v1.Condition{Type: v1.ConditionPodNetwork, Status: "False", Reason: "ContivConfigurationOnly",
			Message: "contiv: configuration only. Contiv supports no current Kubernetes (its last release is for 1.8), so every node renders and validates its configuration but runs no Contiv daemon, and pods get no network; choose network.plugin flannel for one that moves packets"}
	}
	msg := "flannel VXLAN"
	if f := cni.Flannel; f != nil {
		msg += fmt.Sprintf(" (VNI %d, UDP port %d)", f.VNI, f.Port)
	}
	return v1.Condition{Type: v1.ConditionPodNetwork, Status: "True", Reason: "Flannel",
		Message: msg + "; kube-proxy mode " + spec.KubeProxyMode()}
}

func nodeViews(tx *store.Tx, rec *record, machines []machine, vms map[string]vsphere.VMInfo, staleBefore time.Time) []v1.ClusterNode {
	out := make([]v1.ClusterNode, 0, len(machines))
	replaces := map[string]string{} // surge worker → the worker it replaces
	for _, m := range machines {
		if m.ReplacedBy != "" {
			replaces[m.ReplacedBy] = m.Name
		}
	}
	for _, m := range machines {
		n := v1.ClusterNode{Name: m.Name, Role: m.Role, IP: m.IP, Step: m.Step, VM: m.VM,
			Attempts: m.Attempts, LastError: m.LastError}
		if m.Role == v1.RoleMaster {
			n.DataDisk = dataDisk(rec, &m).Path()
		}
		n.Image, _, _ = m.source(rec)
		switch {
		case m.Swap != nil && m.Swap.Rollback:
			n.Upgrade = v1.UpgradeRollingBack + m.Swap.Step
		case m.Swap != nil:
			n.Upgrade = m.Swap.Step
		case m.ReplacedBy != "":
			n.Upgrade = v1.UpgradeReplacedBy + m.ReplacedBy
		case replaces[m.Name] != "":
			n.Upgrade = v1.UpgradeReplaces + replaces[m.Name]
		}
		if vm, ok := vms[m.Name]; ok {
			n.Power, n.GuestIP = vm.Power, vm.GuestIP
		}
		st, reported := tx.Status(m.Name)
		if reported {
			n.AgentPhase, n.Components = st.Phase, st.Components
			if !st.ReportedAt.IsZero() {
				n.LastReport = &st.ReportedAt
			}
			n.EtcdSnapshotAt, n.EtcdSnapshots, n.EtcdRestored = st.EtcdSnapshotAt, st.EtcdSnapshots, st.EtcdRestored
			if k := st.KubernetesNode; k != nil {
				n.Kubernetes, n.KubeletVersion = kubernetesReady(k.Ready), k.KubeletVersion
			}
		}
		node, nodeErr := tx.Node(m.Name)
		switch {
		case m.Remove && m.Step == stepKept:
			n.Phase = "Kept"
		case m.Remove:
			n.Phase = "Removing"
		case m.Failed:
			n.Phase = "Failed"
		case m.Step != stepPoweredOn:
			n.Phase = "Provisioning"
		case reported && st.ReportedAt.Before(staleBefore):
			n.Phase = "Unresponsive"
		case reported && st.Phase == v1.PhaseReady:
			n.Phase = "Ready"
		case nodeErr == nil && !node.EnrolledAt.IsZero():
			n.Phase = "Enrolled"
		default:
			n.Phase = "Booting"
		}
		out = append(out, n)
	}
	return out
}

// upgradeView is the newest upgrade with its count of nodes done.
func upgradeView(rec *record, machines []machine) *v1.UpgradeStatus {
	u := rec.Upgrade
	out := &v1.UpgradeStatus{Image: u.Image, KubernetesVersion: u.KubernetesVersion, FromImage: u.FromImage,
		FromKubernetesVersion: u.FromVersion, State: u.State, Message: u.Message, StartedAt: u.StartedAt, FinishedAt: u.FinishedAt}
	for _, m := range machines {
		if m.Remove {
			continue
		}
		out.Nodes++
		if m.upgraded(rec) {
			out.Upgraded++
		}
	}
	return out
}
