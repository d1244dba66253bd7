// Package cluster is the controller's cluster service: the records, the
// roles and secrets it makes, address and VRRP allocation, the pre-checks
// against vCenter, and the engine that drives every machine through its
// steps. It has no HTTP in it: one typed method per operation, and typed
// refusals (*Error) that the API layer maps to its answers.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/etcdcopies"
	"github.com/harmonykaas/harmony/controller/store"
	"github.com/harmonykaas/harmony/controller/vsphere"
	"github.com/harmonykaas/harmony/internal/randstr"
)

// Workflow defaults.
const (
	DefaultCloneParallelism = 8
	DefaultRetryBase        = 2 * time.Second
	DefaultMaxAttempts      = 6
	// DefaultResyncInterval re-checks settled clusters against vCenter
	// (vanished VMs, expired agent certificates).
	DefaultResyncInterval = 5 * time.Minute
	// DefaultStatusPoll: see Config.StatusPoll.
	DefaultStatusPoll = 5 * time.Second
	// DefaultLeaveTimeout bounds how long a removed node is given to
	// leave its cluster (etcd member removed, kubeadm reset, VIP given up)
	// before its VM is powered off anyway.
	DefaultLeaveTimeout = 10 * time.Minute
)

// ErrImageNotReady is what Catalog.Image returns for an image that is
// still importing.
var ErrImageNotReady = errors.New("image not ready")

// Catalog is what the service reads that other parts of the controller
// own.
type Catalog interface {
	// Provider returns a provider with its vCenter password.
	Provider(name string) (v1.Provider, error)
	// Session returns a logged-in vCenter session for a provider.
	Session(ctx context.Context, p v1.Provider) (*vsphere.Session, error)
	// Image returns a provider's image: store.ErrNotFound if it has none
	// of that name, ErrImageNotReady while it imports.
	Image(provider, name string) (*v1.Image, error)
}

// Bootstrapper issues a node's one-time bootstrap: a new token (its
// unused ones revoked) in the document the VM's agent enrolls with.
type Bootstrapper interface {
	Bootstrap(node string, ttl time.Duration) (*v1.Bootstrap, error)
}

// Config is what the service works with.
type Config struct {
	Store     *store.Store
	Catalog   Catalog
	Bootstrap Bootstrapper
	// Notify wakes the watchers of keys (NotifyKey) after a change.
	Notify func(keys ...string)
	Now    func() time.Time
	Log    *slog.Logger
	// CloneParallelism bounds the VMs built or removed at once.
	CloneParallelism int
	// RetryBase is the first retry delay of a failed step, doubled per
	// attempt; MaxAttempts marks the machine failed.
	RetryBase   time.Duration
	MaxAttempts int
	// LeaveTimeout is how long a removed node has to leave its cluster;
	// default DefaultLeaveTimeout.
	LeaveTimeout time.Duration
	// UpgradeNodeTimeout is how long a replacement VM has to report
	// Ready before it is rolled back; default DefaultUpgradeNodeTimeout.
	UpgradeNodeTimeout time.Duration
	// Copies are the controller's copies of the clusters' etcd
	// snapshots: a cluster deleted with purge loses them too, as its
	// data disks. Nil: none are kept.
	Copies *etcdcopies.Store
	// SnapshotTimeout is how long the masters have to take and copy an
	// etcd snapshot asked for by hand; default DefaultSnapshotTimeout.
	SnapshotTimeout time.Duration
	// ResyncInterval is how often every cluster is checked against
	// vCenter, work or not; default DefaultResyncInterval.
	ResyncInterval time.Duration
	// StatusPoll is how often a cluster at work looks again at the node
	// reports it waits on (a hand-over, a leave, a new VM's Ready, a
	// snapshot); a report with news for them makes it look at once
	// (NodeReported). Default DefaultStatusPoll.
	StatusPoll time.Duration
}

// Service creates, changes and deletes clusters.
type Service struct {
	cfg    Config
	log    *slog.Logger
	engine *engine
	// started is when this controller began to hear agents: none is
	// silent for longer than it has been up.
	started time.Time
}

// New returns the service; Start runs its engine.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Catalog == nil || cfg.Bootstrap == nil {
		return nil, errors.New("cluster service: store, catalog and bootstrapper are required")
	}
	if cfg.Notify == nil {
		cfg.Notify = func(...string) {}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.CloneParallelism == 0 {
		cfg.CloneParallelism = DefaultCloneParallelism
	}
	if cfg.CloneParallelism < 1 || cfg.CloneParallelism > 256 {
		return nil, fmt.Errorf("clone parallelism %d: want 1 to 256", cfg.CloneParallelism)
	}
	if cfg.RetryBase == 0 {
		cfg.RetryBase = DefaultRetryBase
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	if cfg.LeaveTimeout == 0 {
		cfg.LeaveTimeout = DefaultLeaveTimeout
	}
	if cfg.UpgradeNodeTimeout == 0 {
		cfg.UpgradeNodeTimeout = DefaultUpgradeNodeTimeout
	}
	if cfg.SnapshotTimeout == 0 {
		cfg.SnapshotTimeout = DefaultSnapshotTimeout
	}
	if cfg.ResyncInterval <= 0 {
		cfg.ResyncInterval = DefaultResyncInterval
	}
	if cfg.StatusPoll <= 0 {
		cfg.StatusPoll = DefaultStatusPoll
	}
	if cfg.UpgradeNodeTimeout < 0 {
		return nil, fmt.Errorf("upgrade node timeout %s: want a positive duration", cfg.UpgradeNodeTimeout)
	}
	if cfg.LeaveTimeout < 0 {
		return nil, fmt.Errorf("leave timeout %s: want a positive duration", cfg.LeaveTimeout)
	}
	s := &Service{cfg: cfg, log: cfg.Log, started: cfg.Now()}
	s.engine = newEngine(&s.cfg)
	return s, nil
}

// Start resumes every cluster's workflow and re-checks clusters
// periodically, until ctx ends.
func (s *Service) Start(ctx context.Context) { s.engine.start(ctx) }

// Wait returns when the engine has stopped after its context ended.
func (s *Service) Wait() { s.engine.wait() }

// NotifyKey is the key Config.Notify is called with when a cluster, its
// machines, events or operations change.
func NotifyKey(cluster string) string { return "cluster:" + cluster }

// Create checks a new cluster against its provider, image and vCenter,
// records it with its machines, addresses, secrets and roles in one
// transaction, and starts building it.
func (s *Service) Create(ctx context.Context, spec *v1.ClusterSpec, by string) (v1.Operation, error) {
	provider, err := s.cfg.Catalog.Provider(spec.Provider)
	if errors.Is(err, store.ErrNotFound) {
		return v1.Operation{}, refuse(Invalid, "provider", "no provider %q; apply one first", spec.Provider)
	} else if err != nil {
		return v1.Operation{}, fmt.Errorf("provider %s: %w", spec.Provider, err)
	}
	img, err := s.nodeImage(spec.Provider, spec.Image)
	if err != nil {
		return v1.Operation{}, err
	}
	if spec.KubernetesVersion == "" && len(img.KubernetesVersions) > 0 {
		spec.KubernetesVersion = img.KubernetesVersions[0]
	}
	if !slices.Contains(img.KubernetesVersions, spec.KubernetesVersion) {
		return v1.Operation{}, refuse(Invalid, "kubernetesVersion", "unknown version %q: image %s carries %v", spec.KubernetesVersion, img.Name, img.KubernetesVersions)
	}
	if err := checkVIP(&provider, spec.VIP); err != nil {
		return v1.Operation{}, err
	}

	ctx, cancel := context.WithTimeout(ctx, precheckTimeout)
	defer cancel()
	vc, err := s.session(ctx, provider)
	if err != nil {
		return v1.Operation{}, err
	}
	tmpl, err := findTemplate(ctx, vc, img)
	if err != nil {
		return v1.Operation{}, err
	}

	now := s.cfg.Now().UTC()
	uid, err := randstr.Hex(8)
	if err != nil {
		return v1.Operation{}, err
	}
	rec := &record{Spec: *spec, UID: uid, Generation: 1, Template: tmpl.Path, Snapshot: tmpl.Snapshot,
		TemplateBytes: tmpl.CapacityBytes, DataDiskDir: dataDiskRoot + "/" + v1.ClusterInstance(spec.Name, uid), CreatedAt: now}
	var machines []machine
	for range *spec.Masters {
		machines = append(machines, rec.newMachine(v1.RoleMaster, now))
	}
	for range spec.Workers {
		machines = append(machines, rec.newMachine(v1.RoleWorker, now))
	}
	if err := precheck(ctx, vc, rec, machines); err != nil {
		return v1.Operation{}, err
	}
	sec, err := newSecrets(now)
	if err != nil {
		return v1.Operation{}, err
	}

	op := v1.Operation{Kind: v1.OperationCreate, Cluster: spec.Name, Generation: rec.Generation, CreatedAt: now}
	err = s.cfg.Store.Update(func(tx *store.Tx) error {
		if tx.Has(store.Clusters, spec.Name) {
			return refuse(Conflict, "name", "cluster %q already exists", spec.Name)
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
		if err := tx.Put(store.Secrets, secretKey(spec.Name), sec); err != nil {
			return err
		}
		if err := addMachines(tx, rec, sec, machines, now); err != nil {
			return err
		}
		if err := tx.AddOperation(&op); err != nil {
			return err
		}
		if err := tx.Put(store.Clusters, spec.Name, rec); err != nil {
			return err
		}
		_, err = addEvent(tx, spec.Name, v1.Event{Time: now, Reason: "Created", Message: fmt.Sprintf(
			"cluster %s: %d masters, %d workers, Kubernetes %s from %s by %s", spec.Name, *spec.Masters, spec.Workers, spec.KubernetesVersion, img.Name, by)})
		return err
	})
	if err != nil {
		return v1.Operation{}, err
	}
	s.log.Info("cluster created", "cluster", spec.Name, "masters", *spec.Masters, "workers", spec.Workers, "by", by, "operation", op.ID)
	s.engine.kick(spec.Name)
	return op, nil
}

// Scale sets the cluster's counts of masters and workers (nil keeps a
// count): new machines are checked against vCenter first; scale-in
// removes the newest machines.
func (s *Service) Scale(ctx context.Context, name string, req v1.ScaleRequest, by string) (v1.Operation, error) {
	var rec *record
	var machines []machine
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		var err error
		if rec, err = s.load(tx, name); err != nil {
			return err
		}
		machines, err = loadMachines(tx, name)
		return err
	})
	if err != nil {
		return v1.Operation{}, err
	}
	if rec.Deleting {
		return v1.Operation{}, refuse(Conflict, "", "cluster %q is being deleted", name)
	}
	if rec.Upgrade.running() {
		return v1.Operation{}, upgradeRuns(rec)
	}
	if err := replacing(name, machines); err != nil {
		return v1.Operation{}, err
	}
	masters, workers := *rec.Spec.Masters, rec.Spec.Workers
	if req.Masters != nil {
		masters = *req.Masters
	}
	if req.Workers != nil {
		workers = *req.Workers
	}
	if err := v1.ValidateCounts(masters, workers); err != nil {
		var fe *v1.FieldError
		if errors.As(err, &fe) {
			return v1.Operation{}, refuse(Invalid, fe.Field, "%v", err)
		}
		return v1.Operation{}, refuse(Invalid, "", "%v", err)
	}
	now := s.cfg.Now().UTC()
	live := map[v1.NodeRole][]machine{}
	for _, m := range machines {
		if !m.Remove {
			live[m.Role] = append(live[m.Role], m)
		}
	}
	want := map[v1.NodeRole]int{v1.RoleMaster: masters, v1.RoleWorker: workers}
	var add []machine
	var remove []string
	for _, role := range []v1.NodeRole{v1.RoleMaster, v1.RoleWorker} {
		have := live[role]
		for i := len(have); i < want[role]; i++ {
			add = append(add, rec.newMachine(role, now))
		}
		// Scale in removes the newest machines first.
		slices.SortFunc(have, func(a, b machine) int { return cmpCreated(b, a) })
		for i := 0; i < len(have)-want[role]; i++ {
			remove = append(remove, have[i].Name)
		}
	}
	if len(add) == 0 && len(remove) == 0 {
		return v1.Operation{}, refuse(Conflict, "", "cluster %q already has %d masters and %d workers", name, masters, workers)
	}
	if len(add) > 0 {
		ctx, cancel := context.WithTimeout(ctx, precheckTimeout)
		defer cancel()
		vc, err := s.sessionFor(ctx, rec.Spec.Provider)
		if err != nil {
			return v1.Operation{}, err
		}
		if err := precheck(ctx, vc, rec, add); err != nil {
			return v1.Operation{}, err
		}
	}
	return s.change(name, rec.Generation, v1.OperationScale, func(tx *store.Tx, cur *record, sec *secrets) (string, error) {
		cur.MasterSeq, cur.WorkerSeq = rec.MasterSeq, rec.WorkerSeq
		cur.Spec.Masters, cur.Spec.Workers = &masters, workers
		for _, n := range remove {
			if err := markRemoved(tx, name, n, false, now.Add(s.cfg.LeaveTimeout)); err != nil {
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
		} else if err := putRoles(tx, cur, sec); err != nil {
			return "", err
		}
		return fmt.Sprintf("scale to %d masters and %d workers by %s: %d to add, %d to remove", masters, workers, by, len(add), len(remove)), nil
	})
}

// RemoveNode removes one worker, destroying its VM or, with keepVM,
// keeping it powered off for troubleshooting.
func (s *Service) RemoveNode(name, node string, keepVM bool, by string) (v1.Operation, error) {
	return s.change(name, 0, v1.OperationRemoveNode, func(tx *store.Tx, rec *record, sec *secrets) (string, error) {
		if rec.Deleting {
			return "", refuse(Conflict, "", "cluster %q is being deleted", name)
		}
		if rec.Upgrade.running() {
			return "", upgradeRuns(rec)
		}
		var m machine
		if err := tx.Get(store.Machines, machineKey(name, node), &m); err != nil || m.Remove {
			return "", refuse(NotFound, "node", "cluster %q has no node %q", name, node)
		}
		if m.Role == v1.RoleMaster {
			return "", refuse(Invalid, "node",
				"%s is a master; masters must stay odd: scale masters down by two with `harmonyctl cluster scale %s --masters N`", node, name)
		}
		if err := markRemoved(tx, name, node, keepVM, s.cfg.Now().UTC().Add(s.cfg.LeaveTimeout)); err != nil {
			return "", err
		}
		rec.Spec.Workers--
		if err := putRoles(tx, rec, sec); err != nil {
			return "", err
		}
		verb := "destroy its VM"
		if keepVM {
			verb = "keep its VM powered off"
		}
		return fmt.Sprintf("remove %s and %s, by %s", node, verb, by), nil
	})
}

// Delete removes the cluster's machines and then the cluster; its data
// disks are kept unless purge.
func (s *Service) Delete(name string, purge bool, by string) (v1.Operation, error) {
	return s.change(name, 0, v1.OperationDelete, func(tx *store.Tx, rec *record, sec *secrets) (string, error) {
		rec.Deleting = true
		rec.Purge = rec.Purge || purge
		if rec.Upgrade.running() {
			rec.Upgrade.State, rec.Upgrade.Message, rec.Upgrade.FinishedAt = v1.UpgradeAborted, "the cluster is deleted", s.cfg.Now().UTC()
		}
		if rec.EtcdSnapshot.running() {
			if err := endSnapshotRequest(tx, rec, "the cluster is deleted", s.cfg.Now().UTC()); err != nil {
				return "", err
			}
		}
		machines, err := loadMachines(tx, name)
		if err != nil {
			return "", err
		}
		// The whole cluster goes: no node leaves it (no deadline, no
		// leave role), and nothing waits for the agents.
		for _, m := range machines {
			if err := markRemoved(tx, name, m.Name, false, time.Time{}); err != nil {
				return "", err
			}
		}
		if purge {
			return fmt.Sprintf("delete the cluster and its data disks, by %s", by), nil
		}
		return fmt.Sprintf("delete the cluster, keeping its data disks, by %s", by), nil
	})
}

// Retry restarts the workflow of every failed or backing-off machine.
func (s *Service) Retry(name, by string) (v1.Operation, error) {
	return s.change(name, 0, v1.OperationRetry, func(tx *store.Tx, rec *record, sec *secrets) (string, error) {
		machines, err := loadMachines(tx, name)
		if err != nil {
			return "", err
		}
		n := 0
		for _, m := range machines {
			if m.Failed || m.Attempts > 0 {
				m.Failed, m.Attempts, m.NextTry = false, 0, time.Time{}
				if m.leaving() && m.LeaveBy.Before(s.cfg.Now()) {
					// A node that did not leave in time gets another
					// window; its role carries the new deadline.
					m.LeaveBy = s.cfg.Now().UTC().Add(s.cfg.LeaveTimeout)
				}
				if err := putMachine(tx, &m); err != nil {
					return "", err
				}
				n++
			}
		}
		if err := putRoles(tx, rec, sec); err != nil {
			return "", err
		}
		return fmt.Sprintf("retry %d failed nodes, by %s", n, by), nil
	})
}

// change applies a change in one transaction, refusing it if the cluster
// changed since the caller read it at generation gen, bumps the
// generation, and records an operation and an event.
func (s *Service) change(name string, gen int64, kind v1.OperationKind,
	fn func(tx *store.Tx, rec *record, sec *secrets) (string, error)) (v1.Operation, error) {
	now := s.cfg.Now().UTC()
	op := v1.Operation{Kind: kind, Cluster: name, CreatedAt: now}
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		rec, err := s.load(tx, name)
		if err != nil {
			return err
		}
		if gen != 0 && rec.Generation != gen {
			return refuse(Conflict, "", "cluster %q changed while this request was checked; try again", name)
		}
		sec, err := loadSecrets(tx, name)
		if err != nil {
			return err
		}
		msg, err := fn(tx, rec, sec)
		if err != nil {
			return err
		}
		rec.Generation++
		rec.Conditions = removeCondition(rec.Conditions, v1.ConditionFailed)
		if err := tx.Put(store.Clusters, name, rec); err != nil {
			return err
		}
		op.Generation = rec.Generation
		if err := tx.AddOperation(&op); err != nil {
			return err
		}
		_, err = addEvent(tx, name, v1.Event{Time: now, Reason: reasonOfOperation(kind), Message: msg})
		return err
	})
	if err != nil {
		return v1.Operation{}, err
	}
	s.log.Info("cluster changed", "cluster", name, "change", kind, "operation", op.ID)
	s.engine.kick(name)
	return op, nil
}

// upgradeRuns refuses a change while an upgrade runs.
func upgradeRuns(rec *record) error {
	return refuse(Conflict, "", "cluster %q is upgrading to %s; wait for it, or stop it with `harmonyctl cluster upgrade %s --abort`",
		rec.Spec.Name, rec.Upgrade.Image, rec.Spec.Name)
}

// nodeImage is a provider's ready node image, refused with a field error
// otherwise.
func (s *Service) nodeImage(provider, name string) (*v1.Image, error) {
	img, err := s.cfg.Catalog.Image(provider, name)
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, ErrImageNotReady) {
		return nil, refuse(Invalid, "image", "provider %q has no ready image %q (harmonyctl image list)", provider, name)
	} else if err != nil {
		return nil, fmt.Errorf("image %s: %w", name, err)
	}
	if img.Role != "node" {
		return nil, refuse(Invalid, "image", "%q is a %s image; clusters are built from node images", img.Name, img.Role)
	}
	return img, nil
}

// findTemplate is the image's template in vCenter, refused when it is not
// there.
func findTemplate(ctx context.Context, vc *vsphere.Session, img *v1.Image) (*vsphere.Template, error) {
	tmpl, err := vc.FindTemplate(ctx, img.Name)
	if err != nil {
		return nil, refuse(Unreachable, "", "find template %s: %v", img.Name, err)
	}
	if tmpl == nil {
		return nil, refuse(PrecheckFailed, "image", "template %s is not in vCenter (folder %s/%s); import the image again", img.Name, vc.FolderPath(), vsphere.TemplatesFolder)
	}
	return tmpl, nil
}

// load reads a cluster record, refusing with NotFound if there is none.
func (s *Service) load(tx *store.Tx, name string) (*record, error) {
	rec, err := loadCluster(tx, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, refuse(NotFound, "", "cluster %q not found", name)
	}
	return rec, err
}

// sessionFor is a session with the vCenter of the named provider.
func (s *Service) sessionFor(ctx context.Context, provider string) (*vsphere.Session, error) {
	p, err := s.cfg.Catalog.Provider(provider)
	if err != nil {
		return nil, fmt.Errorf("provider %s: %w", provider, err)
	}
	return s.session(ctx, p)
}

func (s *Service) session(ctx context.Context, p v1.Provider) (*vsphere.Session, error) {
	vc, err := s.cfg.Catalog.Session(ctx, p)
	if err != nil {
		return nil, refuse(Unreachable, "provider", "provider %s: %v", p.Name, err)
	}
	return vc, nil
}

func reasonOfOperation(kind v1.OperationKind) string {
	switch kind {
	case v1.OperationScale:
		return "Scaled"
	case v1.OperationRemoveNode:
		return "NodeRemoval"
	case v1.OperationReplaceNode:
		return "NodeReplacement"
	case v1.OperationDelete:
		return "Deleting"
	case v1.OperationRetry:
		return "Retry"
	case v1.OperationUpgrade:
		return "Upgrade"
	case v1.OperationRestore:
		return "Restore"
	case v1.OperationEtcdSnapshot:
		return "EtcdSnapshot"
	}
	return string(kind)
}
