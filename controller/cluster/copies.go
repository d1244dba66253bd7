package cluster

import (
	"errors"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/etcdcopies"
	"github.com/harmonykaas/harmony/controller/store"
)

// copiesOf lists the copies the controller keeps of rec's etcd
// snapshots, oldest first; none when it keeps none.
func (c *Config) copiesOf(rec *record) ([]v1.EtcdSnapshotCopy, error) {
	if c.Copies == nil {
		return nil, nil
	}
	list, err := c.Copies.List(etcdcopies.Cluster{Name: rec.Spec.Name, UID: rec.UID}, etcdcopies.Rule{})
	return list.Items, err
}

// SnapshotCopies says whose copies of etcd snapshots node sends or reads,
// and the rule they are kept by: node must be a master, not leaving, of
// a cluster that takes snapshots (else NotFound: a worker has none). The
// cluster comes from the node's stored role and machine, never from the
// request.
func (s *Service) SnapshotCopies(node string) (etcdcopies.Cluster, etcdcopies.Rule, error) {
	var c etcdcopies.Cluster
	var rule etcdcopies.Rule
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		role, ok := tx.Role(node)
		if !ok || role.Role != v1.RoleMaster || role.Cluster.Name == "" {
			return refuse(NotFound, "", "node %q is not a master of a cluster: only masters have etcd snapshots", node)
		}
		rec, err := s.load(tx, role.Cluster.Name)
		if err != nil {
			return err
		}
		var m machine
		err = tx.Get(store.Machines, machineKey(rec.Spec.Name, node), &m)
		if errors.Is(err, store.ErrNotFound) || err == nil && (m.Remove || m.Role != v1.RoleMaster) {
			return refuse(NotFound, "", "node %q is not a master of cluster %q: only masters have etcd snapshots", node, rec.Spec.Name)
		}
		if err != nil {
			return err
		}
		sched, err := rec.Spec.EtcdSnapshots.Schedule()
		if err != nil {
			return err
		}
		if !sched.Enabled {
			return refuse(Conflict, "", "cluster %q takes no etcd snapshots (etcdSnapshots.disabled)", rec.Spec.Name)
		}
		c = etcdcopies.Cluster{Name: rec.Spec.Name, UID: rec.UID}
		rule = etcdcopies.Rule{Keep: sched.Keep, Gap: sched.Interval / 2}
		if r := rec.EtcdSnapshot; r.running() {
			rule.Want = r.After
		}
		return nil
	})
	return c, rule, err
}
