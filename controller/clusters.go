package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/store"
	"github.com/harmonykaas/harmony/controller/vsphere"
)

// precheckTimeout bounds the vCenter reads a request makes before it
// creates anything.
const precheckTimeout = time.Minute

func (c *Controller) handleCreateCluster(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	spec, err := v1.DecodeClusterSpec(r.Body)
	if err != nil {
		return badInput(err)
	}
	provider, err := c.provider(spec.Provider)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return fieldRefusal("provider", "no provider %q; apply one first", spec.Provider)
		}
		return storeError(err, "provider")
	}
	var img *v1.Image
	if err := c.store.View(func(tx *store.Tx) error { img, err = readyImage(tx, spec.Provider, spec.Image); return err }); err != nil {
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, errNotReady) {
			return fieldRefusal("image", "provider %q has no ready image %q (harmonyctl image list)", spec.Provider, spec.Image)
		}
		return storeError(err, "image")
	}
	if img.Role != "node" {
		return fieldRefusal("image", "%q is a %s image; clusters are built from node images", img.Name, img.Role)
	}
	if spec.KubernetesVersion == "" && len(img.KubernetesVersions) > 0 {
		spec.KubernetesVersion = img.KubernetesVersions[0]
	}
	if !knowsVersion(img, spec.KubernetesVersion) {
		return fieldRefusal("kubernetesVersion", "unknown version %q: image %s carries %v", spec.KubernetesVersion, img.Name, img.KubernetesVersions)
	}
	if e := checkVIP(&provider, spec.VIP); e != nil {
		return e
	}

	ctx, cancel := context.WithTimeout(r.Context(), precheckTimeout)
	defer cancel()
	s, e := c.session(ctx, provider)
	if e != nil {
		return e
	}
	tmpl, err := s.FindTemplate(ctx, img.Name)
	if err != nil {
		return refuse(http.StatusBadGateway, v1.CodeVCenterUnreachable, "find template %s: %v", img.Name, err)
	}
	if tmpl == nil {
		return precheckRefusal("image", "template %s is not in vCenter (folder %s/%s); import the image again", img.Name, s.FolderPath(), vsphere.TemplatesFolder)
	}

	now := c.now().UTC()
	uid, err := randomHex(8)
	if err != nil {
		return refuse(http.StatusInternalServerError, v1.CodeInternal, "%v", err)
	}
	rec := &clusterRecord{Spec: *spec, UID: uid, Generation: 1, Template: tmpl.Path, Snapshot: tmpl.Snapshot,
		TemplateBytes: tmpl.CapacityBytes, CreatedAt: now}
	var machines []machineRecord
	for range *spec.Masters {
		machines = append(machines, rec.newMachine(v1.RoleMaster, now))
	}
	for range spec.Workers {
		machines = append(machines, rec.newMachine(v1.RoleWorker, now))
	}
	if e := c.precheck(ctx, s, rec, machines); e != nil {
		return e
	}
	secrets, err := newClusterSecrets(now)
	if err != nil {
		return refuse(http.StatusInternalServerError, v1.CodeInternal, "%v", err)
	}

	var op v1.Operation
	err = c.store.Update(func(tx *store.Tx) error {
		if tx.Has(store.Clusters, spec.Name) {
			return &apiError{status: http.StatusConflict, code: v1.CodeConflict, message: fmt.Sprintf("cluster %q already exists", spec.Name), field: "name"}
		}
		if err := allocateVIP(tx, &provider, spec.Name, spec.VIP); err != nil {
			return err
		}
		if err := allocateIPs(tx, &provider, machines); err != nil {
			return err
		}
		vrid, err := freeVRID(tx, spec.Provider)
		if err != nil {
			return err
		}
		rec.VRID = vrid
		if err := tx.Put(store.Secrets, secretKeyCluster(spec.Name), secrets); err != nil {
			return err
		}
		if err := addMachines(tx, rec, secrets, machines, now); err != nil {
			return err
		}
		if op, err = newOperation(tx, "create", spec.Name, now); err != nil {
			return err
		}
		op.Generation = rec.Generation
		if err := tx.Put(store.Operations, op.ID, op); err != nil {
			return err
		}
		if err := tx.Put(store.Clusters, spec.Name, rec); err != nil {
			return err
		}
		_, err = addEvent(tx, spec.Name, v1.Event{Time: now, Reason: "Created", Message: fmt.Sprintf(
			"cluster %s: %d masters, %d workers, Kubernetes %s from %s by %s", spec.Name, *spec.Masters, spec.Workers, spec.KubernetesVersion, img.Name, who.name)})
		return err
	})
	if e := txError(err, "cluster"); e != nil {
		return e
	}
	c.log.Info("cluster created", "cluster", spec.Name, "masters", *spec.Masters, "workers", spec.Workers, "by", who.name, "operation", op.ID)
	c.engine.kick(spec.Name)
	writeJSON(w, http.StatusAccepted, op)
	return nil
}

// newMachine names the next machine of a role.
func (rec *clusterRecord) newMachine(role v1.NodeRole, now time.Time) machineRecord {
	var name string
	if role == v1.RoleMaster {
		rec.MasterSeq++
		name = fmt.Sprintf("%s-m%d", rec.Spec.Name, rec.MasterSeq)
	} else {
		rec.WorkerSeq++
		name = fmt.Sprintf("%s-w%d", rec.Spec.Name, rec.WorkerSeq)
	}
	return machineRecord{Cluster: rec.Spec.Name, Name: name, Role: role, CreatedAt: now}
}

// addMachines stores new machines with their node records and gives
// every machine of the cluster its new role.
func addMachines(tx *store.Tx, rec *clusterRecord, sec *clusterSecrets, add []machineRecord, now time.Time) error {
	for i := range add {
		m := &add[i]
		if err := putMachine(tx, m); err != nil {
			return err
		}
		uid, err := randomHex(16)
		if err != nil {
			return err
		}
		if err := tx.CreateNode(store.Node{Name: m.Name, UID: uid, Cluster: rec.Spec.Name, Role: m.Role,
			IPs: []string{m.IP}, DNSNames: []string{m.Name}, CreatedAt: now}); err != nil {
			return err
		}
	}
	return putClusterRoles(tx, rec, sec)
}

// putClusterRoles recomputes and stores the roles of the cluster's
// remaining machines.
func putClusterRoles(tx *store.Tx, rec *clusterRecord, sec *clusterSecrets) error {
	machines, err := loadMachines(tx, rec.Spec.Name)
	if err != nil {
		return err
	}
	roles, err := clusterRoles(rec, sec, machines)
	if err != nil {
		return err
	}
	if len(roles) == 0 {
		return nil
	}
	// The store wakes the nodes' watches once this transaction commits.
	_, err = tx.PutRoles(roles)
	return err
}

func checkVIP(p *v1.Provider, vip string) *apiError {
	if p.IPPool == nil {
		return fieldRefusal("provider", "provider %q has no ipPool; clusters need static addresses for the VIP and the masters", p.Name)
	}
	addrs, err := p.IPPool.Addresses()
	if err != nil {
		return fieldRefusal("provider", "provider %q: %v", p.Name, err)
	}
	a, _ := netip.ParseAddr(vip)
	if !slices.Contains(addrs, a) {
		return fieldRefusal("vip", "%s is not inside the ipPool of provider %q (%v)", vip, p.Name, p.IPPool.Ranges)
	}
	return nil
}

func allocateVIP(tx *store.Tx, p *v1.Provider, cluster, vip string) error {
	var owner addressOwner
	if err := tx.Get(store.Addresses, addressKey(p.Name, vip), &owner); err == nil {
		holder := "the VIP of cluster " + owner.Cluster
		if owner.Node != "" {
			holder = "node " + owner.Node + " of cluster " + owner.Cluster
		}
		return &apiError{status: http.StatusConflict, code: v1.CodeConflict, field: "vip",
			message: fmt.Sprintf("%s is already held by %s; pick a free address of the pool", vip, holder)}
	}
	return tx.Put(store.Addresses, addressKey(p.Name, vip), addressOwner{Cluster: cluster})
}

// allocateIPs gives each machine the lowest free address of the pool.
func allocateIPs(tx *store.Tx, p *v1.Provider, machines []machineRecord) error {
	addrs, err := p.IPPool.Addresses()
	if err != nil {
		return err
	}
	next := 0
	for i := range machines {
		for ; next < len(addrs) && tx.Has(store.Addresses, addressKey(p.Name, addrs[next].String())); next++ {
		}
		if next == len(addrs) {
			return &apiError{status: http.StatusUnprocessableEntity, code: v1.CodePrecheckFailed, field: "ipPool",
				message: fmt.Sprintf("provider %q's ipPool has too few free addresses: %d more nodes need one", p.Name, len(machines)-i)}
		}
		machines[i].IP = addrs[next].String()
		if err := tx.Put(store.Addresses, addressKey(p.Name, machines[i].IP), addressOwner{Cluster: machines[i].Cluster, Node: machines[i].Name}); err != nil {
			return err
		}
		next++
	}
	return nil
}

// freeVRID picks the lowest VRRP router ID no other cluster of the
// provider (its network) uses.
func freeVRID(tx *store.Tx, provider string) (int, error) {
	clusters, err := store.ListJSON[clusterRecord](tx, store.Clusters, "")
	if err != nil {
		return 0, err
	}
	used := map[int]bool{}
	for _, cl := range clusters {
		if cl.Spec.Provider == provider {
			used[cl.VRID] = true
		}
	}
	for id := 1; id <= 255; id++ {
		if !used[id] {
			return id, nil
		}
	}
	return 0, &apiError{status: http.StatusUnprocessableEntity, code: v1.CodePrecheckFailed, field: "provider",
		message: fmt.Sprintf("provider %q already has 255 clusters, every VRRP router ID is taken", provider)}
}

// precheck places the new machines' disks on the provider's datastores
// and checks the compute resource, before anything is created.
func (c *Controller) precheck(ctx context.Context, s *vsphere.Session, rec *clusterRecord, add []machineRecord) *apiError {
	capacity, err := s.Capacity(ctx)
	if err != nil {
		return refuse(http.StatusBadGateway, v1.CodeVCenterUnreachable, "read capacity: %v", err)
	}
	p := s.Provider
	var reqs []vsphere.DiskRequest
	var cpus, mem []int
	for _, m := range add {
		reqs = append(reqs, vsphere.DiskRequest{ID: m.Name + "/os", Bytes: rec.TemplateBytes, Datastores: p.Datastores.OS})
		size := rec.Spec.WorkerSize
		if m.Role == v1.RoleMaster {
			size = rec.Spec.MasterSize
			reqs = append(reqs, vsphere.DiskRequest{ID: m.Name + "/data", Bytes: int64(rec.Spec.MasterDataDiskGiB) << 30, Datastores: p.DataDatastores()})
		}
		cpus, mem = append(cpus, size.CPUs), append(mem, size.MemoryMiB)
	}
	placed, err := capacity.Place(reqs, func(r vsphere.DiskRequest) string {
		if r.ID[len(r.ID)-5:] == "/data" {
			return "datastores.data"
		}
		return "datastores.os"
	})
	if err != nil {
		var sf *vsphere.ShortfallError
		errors.As(err, &sf)
		return precheckRefusal(sf.Field, "%s", sf.Message)
	}
	if err := capacity.CheckCompute(cpus, mem); err != nil {
		var sf *vsphere.ShortfallError
		errors.As(err, &sf)
		field := sf.Field
		if field == "size" {
			field = "masterSize.cpus"
		}
		return precheckRefusal(field, "%s", sf.Message)
	}
	for i := range add {
		add[i].OSDatastore = placed[add[i].Name+"/os"]
		add[i].DataDatastore = placed[add[i].Name+"/data"]
	}
	return nil
}

func precheckRefusal(field, format string, args ...any) *apiError {
	e := refuse(http.StatusUnprocessableEntity, v1.CodePrecheckFailed, format, args...)
	e.field = field
	return e
}

// session connects to a provider for a request.
func (c *Controller) session(ctx context.Context, p v1.Provider) (*vsphere.Session, *apiError) {
	s, err := c.sessions.get(ctx, p)
	if err != nil {
		e := refuse(http.StatusBadGateway, v1.CodeVCenterUnreachable, "provider %s: %v", p.Name, err)
		e.field = "provider"
		return nil, e
	}
	return s, nil
}

// txError turns an *apiError returned from a transaction back into
// itself, and anything else into a store error.
func txError(err error, what string) *apiError {
	if err == nil {
		return nil
	}
	var e *apiError
	if errors.As(err, &e) {
		return e
	}
	return storeError(err, what)
}

func (c *Controller) handleScaleCluster(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	req, err := v1.DecodeScaleRequest(r.Body)
	if err != nil {
		return badInput(err)
	}
	name := r.PathValue("name")
	var rec *clusterRecord
	var machines []machineRecord
	err = c.store.View(func(tx *store.Tx) error {
		if rec, err = loadCluster(tx, name); err != nil {
			return err
		}
		machines, err = loadMachines(tx, name)
		return err
	})
	if err != nil {
		return storeError(err, fmt.Sprintf("cluster %q", name))
	}
	if rec.Deleting {
		return refuse(http.StatusConflict, v1.CodeConflict, "cluster %q is being deleted", name)
	}
	masters, workers := *rec.Spec.Masters, rec.Spec.Workers
	if req.Masters != nil {
		masters = *req.Masters
	}
	if req.Workers != nil {
		workers = *req.Workers
	}
	if err := v1.ValidateCounts(masters, workers); err != nil {
		return badInput(err)
	}
	now := c.now().UTC()
	live := map[v1.NodeRole][]machineRecord{}
	for _, m := range machines {
		if !m.Remove {
			live[m.Role] = append(live[m.Role], m)
		}
	}
	want := map[v1.NodeRole]int{v1.RoleMaster: masters, v1.RoleWorker: workers}
	var add []machineRecord
	var remove []string
	for _, role := range []v1.NodeRole{v1.RoleMaster, v1.RoleWorker} {
		have := live[role]
		for i := len(have); i < want[role]; i++ {
			add = append(add, rec.newMachine(role, now))
		}
		// Scale in removes the newest machines first.
		slices.SortFunc(have, func(a, b machineRecord) int { return cmpCreated(b, a) })
		for i := 0; i < len(have)-want[role]; i++ {
			remove = append(remove, have[i].Name)
		}
	}
	if len(add) == 0 && len(remove) == 0 {
		return refuse(http.StatusConflict, v1.CodeConflict, "cluster %q already has %d masters and %d workers", name, masters, workers)
	}
	if len(add) > 0 {
		provider, err := c.provider(rec.Spec.Provider)
		if err != nil {
			return storeError(err, "provider")
		}
		ctx, cancel := context.WithTimeout(r.Context(), precheckTimeout)
		defer cancel()
		s, e := c.session(ctx, provider)
		if e != nil {
			return e
		}
		if e := c.precheck(ctx, s, rec, add); e != nil {
			return e
		}
	}
	op, e := c.changeCluster(name, rec.Generation, "scale", func(tx *store.Tx, cur *clusterRecord, sec *clusterSecrets) (string, error) {
		cur.MasterSeq, cur.WorkerSeq = rec.MasterSeq, rec.WorkerSeq
		cur.Spec.Masters, cur.Spec.Workers = &masters, workers
		for _, n := range remove {
			if err := markRemoved(tx, name, n, false); err != nil {
				return "", err
			}
		}
		if len(add) > 0 {
			var provider v1.Provider
			if err := tx.Get(store.Providers, cur.Spec.Provider, &provider); err != nil {
				return "", err
			}
			if err := allocateIPs(tx, &provider, add); err != nil {
				return "", err
			}
			if err := addMachines(tx, cur, sec, add, now); err != nil {
				return "", err
			}
		} else if err := putClusterRoles(tx, cur, sec); err != nil {
			return "", err
		}
		return fmt.Sprintf("scale to %d masters and %d workers by %s: %d to add, %d to remove", masters, workers, who.name, len(add), len(remove)), nil
	})
	if e != nil {
		return e
	}
	writeJSON(w, http.StatusAccepted, op)
	return nil
}

// cmpCreated orders machines by creation, then by name with its index
// ("-w10" after "-w9").
func cmpCreated(a, b machineRecord) int {
	return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(len(a.Name), len(b.Name)), strings.Compare(a.Name, b.Name))
}

func markRemoved(tx *store.Tx, cluster, node string, keepVM bool) error {
	var m machineRecord
	if err := tx.Get(store.Machines, machineKey(cluster, node), &m); err != nil {
		return err
	}
	m.Remove, m.KeepVM = true, keepVM
	m.Failed, m.Attempts, m.NextTry, m.LastError = false, 0, time.Time{}, ""
	return putMachine(tx, &m)
}

// changeCluster applies a change in one transaction, refusing it if the
// cluster changed since the caller read it at generation gen, bumps the
// generation, and records an operation and an event.
func (c *Controller) changeCluster(name string, gen int64, kind string,
	change func(tx *store.Tx, rec *clusterRecord, sec *clusterSecrets) (string, error)) (v1.Operation, *apiError) {
	now := c.now().UTC()
	var op v1.Operation
	err := c.store.Update(func(tx *store.Tx) error {
		rec, err := loadCluster(tx, name)
		if err != nil {
			return err
		}
		if gen != 0 && rec.Generation != gen {
			return &apiError{status: http.StatusConflict, code: v1.CodeConflict,
				message: fmt.Sprintf("cluster %q changed while this request was checked; try again", name)}
		}
		var sec clusterSecrets
		if err := tx.Get(store.Secrets, secretKeyCluster(name), &sec); err != nil {
			return err
		}
		msg, err := change(tx, rec, &sec)
		if err != nil {
			return err
		}
		rec.Generation++
		rec.Conditions = slices.DeleteFunc(rec.Conditions, func(c v1.Condition) bool { return c.Type == v1.ConditionFailed })
		if err := tx.Put(store.Clusters, name, rec); err != nil {
			return err
		}
		if op, err = newOperation(tx, kind, name, now); err != nil {
			return err
		}
		op.Generation = rec.Generation
		if err := tx.Put(store.Operations, op.ID, op); err != nil {
			return err
		}
		_, err = addEvent(tx, name, v1.Event{Time: now, Reason: reasonFor(kind), Message: msg})
		return err
	})
	if e := txError(err, fmt.Sprintf("cluster %q", name)); e != nil {
		return op, e
	}
	c.log.Info("cluster changed", "cluster", name, "change", kind, "operation", op.ID)
	c.engine.kick(name)
	return op, nil
}

func reasonFor(kind string) string {
	switch kind {
	case "scale":
		return "Scaled"
	case "remove-node":
		return "NodeRemoval"
	case "delete":
		return "Deleting"
	case "retry":
		return "Retry"
	}
	return kind
}

func (c *Controller) handleRemoveNode(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	name, node := r.PathValue("name"), r.PathValue("node")
	keepVM, err := boolParam(r, "keepVM")
	if err != nil {
		return badInput(err)
	}
	op, e := c.changeCluster(name, 0, "remove-node", func(tx *store.Tx, rec *clusterRecord, sec *clusterSecrets) (string, error) {
		if rec.Deleting {
			return "", &apiError{status: http.StatusConflict, code: v1.CodeConflict, message: fmt.Sprintf("cluster %q is being deleted", name)}
		}
		var m machineRecord
		if err := tx.Get(store.Machines, machineKey(name, node), &m); err != nil || m.Remove {
			return "", &apiError{status: http.StatusNotFound, code: v1.CodeNotFound, field: "node",
				message: fmt.Sprintf("cluster %q has no node %q", name, node)}
		}
		if m.Role == v1.RoleMaster {
			return "", &apiError{status: http.StatusBadRequest, code: v1.CodeBadRequest, field: "node", message: fmt.Sprintf(
				"%s is a master; masters must stay odd: scale masters down by two with `harmonyctl cluster scale %s --masters N`", node, name)}
		}
		if err := markRemoved(tx, name, node, keepVM); err != nil {
			return "", err
		}
		rec.Spec.Workers--
		if err := putClusterRoles(tx, rec, sec); err != nil {
			return "", err
		}
		verb := "destroy its VM"
		if keepVM {
			verb = "keep its VM powered off"
		}
		return fmt.Sprintf("remove %s and %s, by %s", node, verb, who.name), nil
	})
	if e != nil {
		return e
	}
	writeJSON(w, http.StatusAccepted, op)
	return nil
}

func (c *Controller) handleDeleteCluster(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	name := r.PathValue("name")
	purge, err := boolParam(r, "purge")
	if err != nil {
		return badInput(err)
	}
	op, e := c.changeCluster(name, 0, "delete", func(tx *store.Tx, rec *clusterRecord, sec *clusterSecrets) (string, error) {
		rec.Deleting = true
		rec.Purge = rec.Purge || purge
		machines, err := loadMachines(tx, name)
		if err != nil {
			return "", err
		}
		for _, m := range machines {
			if err := markRemoved(tx, name, m.Name, false); err != nil {
				return "", err
			}
		}
		if purge {
			return fmt.Sprintf("delete the cluster and its data disks, by %s", who.name), nil
		}
		return fmt.Sprintf("delete the cluster, keeping its data disks, by %s", who.name), nil
	})
	if e != nil {
		return e
	}
	writeJSON(w, http.StatusAccepted, op)
	return nil
}

func (c *Controller) handleRetryCluster(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	name := r.PathValue("name")
	op, e := c.changeCluster(name, 0, "retry", func(tx *store.Tx, rec *clusterRecord, sec *clusterSecrets) (string, error) {
		machines, err := loadMachines(tx, name)
		if err != nil {
			return "", err
		}
		n := 0
		for _, m := range machines {
			if m.Failed || m.Attempts > 0 {
				m.Failed, m.Attempts, m.NextTry = false, 0, time.Time{}
				if err := putMachine(tx, &m); err != nil {
					return "", err
				}
				n++
			}
		}
		return fmt.Sprintf("retry %d failed nodes, by %s", n, who.name), nil
	})
	if e != nil {
		return e
	}
	writeJSON(w, http.StatusAccepted, op)
	return nil
}

func boolParam(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, &v1.FieldError{Field: name, Problem: fmt.Sprintf("%q is not true or false", v)}
	}
	return b, nil
}
