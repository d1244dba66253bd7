package cluster

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/store"
)

// record is a cluster as the store keeps it: the admin's spec and what the
// workflow decided once (VRID, template).
type record struct {
	Spec       v1.ClusterSpec `json:"spec"`
	UID        string         `json:"uid"`
	Generation int64          `json:"generation"`
	// ObservedGeneration is the newest generation the workflow finished.
	ObservedGeneration int64 `json:"observedGeneration"`
	Deleting           bool  `json:"deleting,omitempty"`
	Purge              bool  `json:"purge,omitempty"`
	VRID               int   `json:"vrid"`
	// Template and Snapshot are the image's template when the cluster was
	// made; new nodes clone the same.
	Template      string `json:"template"`
	Snapshot      string `json:"snapshot,omitempty"`
	TemplateBytes int64  `json:"templateBytes"`
	// DataDiskDir is the datastore folder of the masters' data disks
	// (diskDir); empty in clusters made before it was stored.
	DataDiskDir string `json:"dataDiskDir,omitempty"`
	// DataDiskDatastores are the datastores a master's data disk was on
	// when the master's record went (removed, or its cluster deleted):
	// then nothing else says where its disk, or its folder, is, and the
	// provider's data datastores may have changed since.
	DataDiskDatastores []string       `json:"dataDiskDatastores,omitempty"`
	MasterSeq          int            `json:"masterSeq"`
	WorkerSeq          int            `json:"workerSeq"`
	Conditions         []v1.Condition `json:"conditions,omitempty"`
	CreatedAt          time.Time      `json:"createdAt"`
	// Upgrade is the newest upgrade, running or finished.
	Upgrade *upgradeRecord `json:"upgrade,omitempty"`
	// Restore is the newest etcd restore, running or finished.
	Restore *restoreRecord `json:"restore,omitempty"`
	// EtcdSnapshot is the newest etcd snapshot asked for by hand,
	// running or ended.
	EtcdSnapshot *snapshotRequest `json:"etcdSnapshot,omitempty"`
	// LostEtcdMembers are the etcd members of masters removed without
	// leaving the cluster (lostMember), newest last, at most
	// v1.MaxRemoveMembers: the masters' roles ask their agents to remove
	// those still listed.
	LostEtcdMembers []string `json:"lostEtcdMembers,omitempty"`
}

// Workflow steps of a machine, in order. Each is recorded once done.
const (
	stepPending      = ""
	stepCloned       = "Cloned"
	stepConfigured   = "Configured"
	stepDataDisk     = "DataDiskAttached"
	stepBootstrapped = "BootstrapWritten"
	stepPoweredOn    = "PoweredOn"
	// Teardown.
	stepLeft       = "LeftCluster"
	stepPoweredOff = "PoweredOff"
	stepKept       = "Kept"
	stepGone       = "Gone"
)

// machine is one VM of a cluster and how far its workflow got.
type machine struct {
	Cluster       string      `json:"cluster"`
	Name          string      `json:"name"`
	Role          v1.NodeRole `json:"role"`
	IP            string      `json:"ip,omitempty"`
	OSDatastore   string      `json:"osDatastore"`
	DataDatastore string      `json:"dataDatastore,omitempty"`
	VM            string      `json:"vm,omitempty"`
	// UUID is the VM's BIOS UUID, its Kubernetes Node's provider ID.
	UUID      string    `json:"uuid,omitempty"`
	Step      string    `json:"step"`
	Remove    bool      `json:"remove,omitempty"`
	KeepVM    bool      `json:"keepVM,omitempty"`
	Attempts  int       `json:"attempts,omitempty"`
	NextTry   time.Time `json:"nextTry,omitzero"`
	LastError string    `json:"lastError,omitempty"`
	Failed    bool      `json:"failed,omitempty"`
	// News counts the node's reports with news for its waits while the
	// machine was at work (NodeReported): a step that read the node's
	// report before one of them waits for nothing (recordWait).
	News      uint64    `json:"news,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	// PoweredOnAt is when its workflow powered the VM on; a surge
	// worker's node timeout counts from it.
	PoweredOnAt time.Time `json:"poweredOnAt,omitzero"`
	// Rebootstrapped is when the engine last wrote a new bootstrap into
	// the VM's guestinfo because its agent's certificate had expired
	// (rebootstrapExpired).
	Rebootstrapped time.Time `json:"rebootstrapped,omitzero"`

	// LeaveBy is the deadline of the node's leaving its cluster, set when
	// it is marked for removal from a cluster that stays; zero when the
	// whole cluster goes (nothing to leave).
	LeaveBy time.Time `json:"leaveBy,omitzero"`

	// Image, Template and Snapshot are what the VM is cloned from; empty
	// in records older than upgrades: the cluster's.
	Image    string `json:"image,omitempty"`
	Template string `json:"template,omitempty"`
	Snapshot string `json:"snapshot,omitempty"`
	// KubernetesVersion is the node's; empty: the cluster's.
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// DataDisk names a master's data disk file; empty: the machine's
	// name. A replacement on the fresh-disk path gives it a new one.
	DataDisk string `json:"dataDisk,omitempty"`
	// Swap is a master's replacement by a new VM that takes its data disk.
	Swap *swap `json:"swap,omitempty"`
	// ReplacedBy names the surge worker that replaces this one in an
	// upgrade; ReplaceOf, on the surge worker, the one it replaces.
	ReplacedBy string `json:"replacedBy,omitempty"`
	ReplaceOf  string `json:"replaceOf,omitempty"`
}

// source is what the machine's VM is cloned from.
func (m *machine) source(rec *record) (image, template, snapshot string) {
	if m.Template == "" {
		return rec.Spec.Image, rec.Template, rec.Snapshot
	}
	return m.Image, m.Template, m.Snapshot
}

// kubernetesVersion is the version the node runs.
func (m *machine) kubernetesVersion(rec *record) string {
	if m.KubernetesVersion == "" {
		return rec.Spec.KubernetesVersion
	}
	return m.KubernetesVersion
}

// swapping reports whether the machine is being replaced (or its
// replacement rolled back) and not yet done.
func (m *machine) swapping() bool { return m.Swap != nil && m.Swap.Step != swapRolledBack }

func machineKey(cluster, name string) string { return cluster + "/" + name }

// provisioned reports whether the create workflow is done.
func (m *machine) provisioned() bool { return !m.Remove && m.Step == stepPoweredOn }

// diskDir is the datastore folder of the cluster's data disks. It is
// named for the cluster's name and UID, so that a cluster made again under
// the name of one deleted without purge, whose disks stay with its etcd
// keyspace, neither starts from those disks nor purges them. Clusters
// made before it have the name alone.
func (c *record) diskDir() string {
	return cmp.Or(c.DataDiskDir, dataDiskRoot+"/"+c.Spec.Name)
}

// stayingMaster reports whether the machine is one of the masters the
// cluster keeps: not one a scale-down or a replacement removes.
func (m *machine) stayingMaster() bool { return m.Role == v1.RoleMaster && !m.Remove }

// leaving reports whether the machine is removed from a cluster that
// stays and has not finished leaving it: its node gets a role with Leave.
func (m *machine) leaving() bool {
	if !m.Remove || m.LeaveBy.IsZero() {
		return false
	}
	switch m.Step {
	case stepLeft, stepPoweredOff, stepKept, stepGone:
		return false
	}
	return true
}

// settled reports whether the machine needs no more work: provisioned,
// or removed with its VM kept (until the cluster is deleted).
func (m *machine) settled() bool {
	return m.provisioned() && !m.swapping() || m.Remove && m.KeepVM && m.Step == stepKept
}

// secrets are a cluster's CAs and shared secrets.
type secrets struct {
	PKI            v1.ClusterPKI `json:"pki"`
	BootstrapToken string        `json:"bootstrapToken"`
	VRRPPassword   string        `json:"vrrpPassword"`
}

func secretKey(cluster string) string { return "cluster/" + cluster }

// addressKey is an IP allocation in a provider's pool.
func addressKey(provider, ip string) string { return provider + "/" + ip }

// addressOwner is who holds an allocated address.
type addressOwner struct {
	Cluster string `json:"cluster"`
	Node    string `json:"node,omitempty"` // empty for the VIP
}

func loadCluster(tx *store.Tx, name string) (*record, error) {
	var c record
	if err := tx.Get(store.Clusters, name, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

func loadSecrets(tx *store.Tx, name string) (*secrets, error) {
	var s secrets
	if err := tx.Get(store.Secrets, secretKey(name), &s); err != nil {
		return nil, fmt.Errorf("secrets of cluster %s: %w", name, err)
	}
	return &s, nil
}

func loadMachines(tx *store.Tx, cluster string) ([]machine, error) {
	return store.ListJSON[machine](tx, store.Machines, cluster+"/")
}

func putMachine(tx *store.Tx, m *machine) error {
	return tx.Put(store.Machines, machineKey(m.Cluster, m.Name), m)
}

// ProviderUsers names the clusters built on a provider.
func ProviderUsers(tx *store.Tx, provider string) ([]string, error) {
	recs, err := store.ListJSON[record](tx, store.Clusters, "")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, c := range recs {
		if c.Spec.Provider == provider {
			names = append(names, c.Spec.Name)
		}
	}
	return names, nil
}

// addEvent appends a cluster event and keeps the newest maxEvents.
func addEvent(tx *store.Tx, cluster string, ev v1.Event) (int64, error) {
	seq, err := tx.NextSequence(store.Events)
	if err != nil {
		return 0, err
	}
	ev.Seq = int64(seq)
	if ev.Type == "" {
		ev.Type = "Normal"
	}
	if err := tx.Put(store.Events, eventKey(cluster, ev.Seq), ev); err != nil {
		return 0, err
	}
	if ev.Seq%64 == 0 {
		if err := pruneEvents(tx, cluster); err != nil {
			return 0, err
		}
	}
	return ev.Seq, nil
}

const maxEvents = 1000

func eventKey(cluster string, seq int64) string { return fmt.Sprintf("%s/%016d", cluster, seq) }

func pruneEvents(tx *store.Tx, cluster string) error {
	var keys []string
	if err := tx.List(store.Events, cluster+"/", func(k string, _ []byte) error { keys = append(keys, k); return nil }); err != nil {
		return err
	}
	for len(keys) > maxEvents {
		if err := tx.Delete(store.Events, keys[0]); err != nil {
			return err
		}
		keys = keys[1:]
	}
	return nil
}

// events returns a cluster's events after seq, oldest first, at most limit
// of the newest.
func events(tx *store.Tx, cluster string, after int64, limit int) ([]v1.Event, error) {
	// Keys sort by sequence: start after `after`, and decode only the
	// newest `limit`. A watcher asks at every change, and a cluster keeps
	// up to maxEvents.
	var raw [][]byte
	prefix := cluster + "/"
	err := tx.ListFrom(store.Events, prefix, eventKey(cluster, after+1), func(_ string, data []byte) error {
		raw = append(raw, data)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(raw) > limit {
		raw = raw[len(raw)-limit:]
	}
	out := make([]v1.Event, len(raw))
	for i, data := range raw {
		if err := json.Unmarshal(data, &out[i]); err != nil {
			return nil, fmt.Errorf("decode event of %s: %w", cluster, err)
		}
	}
	return out, nil
}

// newestEvent is the sequence of the cluster's newest event; 0 if it has
// none.
func newestEvent(tx *store.Tx, cluster string) (int64, error) {
	prefix := cluster + "/"
	key, ok := tx.Last(store.Events, prefix)
	if !ok {
		return 0, nil
	}
	seq, err := strconv.ParseInt(strings.TrimPrefix(key, prefix), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("event key %q: %w", key, err)
	}
	return seq, nil
}

func setCondition(conds []v1.Condition, c v1.Condition, now time.Time) []v1.Condition {
	for i, have := range conds {
		if have.Type == c.Type {
			if have.Status == c.Status {
				c.LastTransitionTime = have.LastTransitionTime
			} else {
				c.LastTransitionTime = now
			}
			conds[i] = c
			return conds
		}
	}
	c.LastTransitionTime = now
	return append(conds, c)
}

func removeCondition(conds []v1.Condition, typ string) []v1.Condition {
	out := conds[:0]
	for _, c := range conds {
		if c.Type != typ {
			out = append(out, c)
		}
	}
	return out
}
