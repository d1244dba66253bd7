package controller

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/store"
	"github.com/harmonykaas/harmony/controller/vsphere"
)

// Watch bounds: a watch returns at the next change or after this long.
const (
	DefaultOperationWatch = 30 * time.Second
	maxOperationWatch     = 2 * time.Minute
	statusVCenterTimeout  = 10 * time.Second
	eventsInView          = 30
)

func newOperation(tx *store.Tx, kind, cluster string, now time.Time) (v1.Operation, error) {
	id, err := randomHex(8)
	if err != nil {
		return v1.Operation{}, err
	}
	return v1.Operation{ID: id, Kind: kind, Cluster: cluster, State: v1.OperationRunning, CreatedAt: now}, nil
}

// handleGetOperation answers with the operation and its cluster's node
// progress and events. With ?watch=true&revision=N it waits until there
// is something newer than event N, or the operation ends.
func (c *Controller) handleGetOperation(w http.ResponseWriter, r *http.Request, _ principal) *apiError {
	id := r.PathValue("id")
	watch, err := boolParam(r, "watch")
	if err != nil {
		return badInput(err)
	}
	var since int64
	if v := r.URL.Query().Get("revision"); v != "" {
		if since, err = strconv.ParseInt(v, 10, 64); err != nil || since < 0 {
			return badInput(&v1.FieldError{Field: "revision", Problem: fmt.Sprintf("%q is not a non-negative integer", v)})
		}
	}
	deadline := time.Now().Add(DefaultOperationWatch)
	if v := r.URL.Query().Get("timeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > maxOperationWatch {
			return badInput(&v1.FieldError{Field: "timeout", Problem: fmt.Sprintf("%q is not a duration up to %s", v, maxOperationWatch)})
		}
		deadline = time.Now().Add(d)
	}
	if watch {
		_ = http.NewResponseController(w).SetWriteDeadline(deadline.Add(time.Minute))
	}
	for {
		op, err := c.operationView(id, since)
		if err != nil {
			return storeError(err, fmt.Sprintf("operation %q", id))
		}
		// Subscribe before reading again, so no change is missed.
		var woke <-chan struct{}
		if watch {
			var cancel func()
			woke, cancel = c.hub.subscribe(watchKey(op))
			defer cancel()
		}
		if !watch || op.Done() || op.Revision > since {
			writeJSON(w, http.StatusOK, op)
			return nil
		}
		if op2, err := c.operationView(id, since); err == nil && (op2.Done() || op2.Revision > since) {
			writeJSON(w, http.StatusOK, op2)
			return nil
		}
		select {
		case <-woke:
		case <-time.After(time.Until(deadline)):
			writeJSON(w, http.StatusOK, op)
			return nil
		case <-r.Context().Done():
			return shuttingDown()
		}
	}
}

func watchKey(op *v1.Operation) string {
	if op.Cluster != "" {
		return "cluster:" + op.Cluster
	}
	return "op:" + op.ID
}

// operationView is an operation with its cluster's nodes and the events
// after since.
func (c *Controller) operationView(id string, since int64) (*v1.Operation, error) {
	var op v1.Operation
	err := c.store.View(func(tx *store.Tx) error {
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
		op.Nodes = nodeViews(tx, rec, machines, nil)
		return nil
	})
	return &op, err
}

func (c *Controller) handleListClusters(w http.ResponseWriter, r *http.Request, _ principal) *apiError {
	list := v1.ClusterList{Items: []v1.Cluster{}}
	err := c.store.View(func(tx *store.Tx) error {
		recs, err := store.ListJSON[clusterRecord](tx, store.Clusters, "")
		if err != nil {
			return err
		}
		for i := range recs {
			machines, err := loadMachines(tx, recs[i].Spec.Name)
			if err != nil {
				return err
			}
			list.Items = append(list.Items, clusterView(tx, &recs[i], machines, nil, 0))
		}
		return nil
	})
	if err != nil {
		return storeError(err, "clusters")
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// handleGetCluster merges the store's workflow state, the agents'
// reports and what vCenter says now (power, guest IPs).
func (c *Controller) handleGetCluster(w http.ResponseWriter, r *http.Request, _ principal) *apiError {
	name := r.PathValue("name")
	var rec *clusterRecord
	err := c.store.View(func(tx *store.Tx) error {
		var err error
		rec, err = loadCluster(tx, name)
		return err
	})
	if err != nil {
		return storeError(err, fmt.Sprintf("cluster %q", name))
	}
	vms, vcErr := c.clusterVMs(r.Context(), rec)
	var view v1.Cluster
	err = c.store.View(func(tx *store.Tx) error {
		if rec, err = loadCluster(tx, name); err != nil {
			return err
		}
		machines, err := loadMachines(tx, name)
		if err != nil {
			return err
		}
		view = clusterView(tx, rec, machines, vms, eventsInView)
		return nil
	})
	if err != nil {
		return storeError(err, fmt.Sprintf("cluster %q", name))
	}
	if vcErr != nil {
		view.Status.Conditions = append(view.Status.Conditions, v1.Condition{Type: "VCenterReachable", Status: "False",
			Reason: "ReadFailed", Message: vcErr.Error(), LastTransitionTime: c.now().UTC()})
	}
	writeJSON(w, http.StatusOK, view)
	return nil
}

// clusterVMs reads the cluster folder's VMs from vCenter.
func (c *Controller) clusterVMs(ctx context.Context, rec *clusterRecord) (map[string]vsphere.VMInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, statusVCenterTimeout)
	defer cancel()
	provider, err := c.provider(rec.Spec.Provider)
	if err != nil {
		return nil, err
	}
	s, err := c.sessions.get(ctx, provider)
	if err != nil {
		return nil, err
	}
	folder, err := s.ClusterFolder(ctx, rec.Spec.Name)
	if err != nil {
		return nil, err
	}
	list, err := s.VMs(ctx, folder)
	if err != nil {
		return nil, err
	}
	out := make(map[string]vsphere.VMInfo, len(list))
	for _, vm := range list {
		out[vm.Name] = vm
	}
	return out, nil
}

func clusterView(tx *store.Tx, rec *clusterRecord, machines []machineRecord, vms map[string]vsphere.VMInfo, nEvents int) v1.Cluster {
	spec := rec.Spec
	view := v1.Cluster{Spec: spec, Status: v1.ClusterStatus{
		Generation: rec.Generation, ObservedGeneration: rec.ObservedGeneration,
		Conditions: rec.Conditions, CreatedAt: rec.CreatedAt,
		Nodes: nodeViews(tx, rec, machines, vms),
	}}
	failed, pending, ready, live := false, false, 0, 0
	for _, n := range view.Status.Nodes {
		switch n.Phase {
		case "Failed":
			failed = true
		case "Ready":
			ready++
		}
		if n.Phase != "Kept" && n.Phase != "Removing" {
			live++
		}
	}
	for _, m := range machines {
		if !m.settled() {
			pending = true
		}
	}
	switch {
	case rec.Deleting:
		view.Status.Phase = v1.PhaseDeleting
	case failed:
		view.Status.Phase = v1.PhaseFailed
	case pending || rec.ObservedGeneration < rec.Generation:
		view.Status.Phase = v1.PhaseProvisioning
	default:
		view.Status.Phase = v1.PhaseRunning
	}
	status := "False"
	if ready == live && live > 0 {
		status = "True"
	}
	view.Status.Conditions = append(append([]v1.Condition{}, view.Status.Conditions...), v1.Condition{
		Type: v1.ConditionNodesReady, Status: status, Reason: "AgentReports",
		Message: fmt.Sprintf("%d of %d nodes report Ready", ready, live)})
	if nEvents > 0 {
		view.Status.Events, _ = events(tx, spec.Name, 0, nEvents)
	}
	return view
}

func nodeViews(tx *store.Tx, rec *clusterRecord, machines []machineRecord, vms map[string]vsphere.VMInfo) []v1.ClusterNode {
	out := make([]v1.ClusterNode, 0, len(machines))
	for _, m := range machines {
		n := v1.ClusterNode{Name: m.Name, Role: m.Role, IP: m.IP, Step: m.Step, VM: m.VM,
			Attempts: m.Attempts, LastError: m.LastError}
		if m.Role == v1.RoleMaster {
			n.DataDisk = dataDisk(rec, &m).Path()
		}
		if vm, ok := vms[m.Name]; ok {
			n.Power, n.GuestIP = vm.Power, vm.GuestIP
		}
		st, reported := tx.Status(m.Name)
		if reported {
			n.AgentPhase = st.Phase
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
