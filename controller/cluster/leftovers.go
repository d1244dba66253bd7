package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/etcdcopies"
	"github.com/harmonykaas/harmony/controller/store"
	"github.com/harmonykaas/harmony/controller/vsphere"
)

// leftovers is the stored record of what a cluster deleted without purge
// left behind. Its cluster record is gone, so this is the only thing that
// still knows where the data disks and the snapshot copies are.
type leftovers struct {
	Cluster   string    `json:"cluster"`
	UID       string    `json:"uid"`
	Provider  string    `json:"provider"`
	DeletedAt time.Time `json:"deletedAt"`
	// DiskDir is the data disks' folder on each of Datastores: the
	// provider's data datastores when the cluster went, and any other a
	// master's disk was put on.
	DiskDir    string   `json:"diskDir"`
	Datastores []string `json:"datastores"`
}

func (l *leftovers) id() string { return v1.ClusterInstance(l.Cluster, l.UID) }

func (l *leftovers) copies() etcdcopies.Cluster {
	return etcdcopies.Cluster{Name: l.Cluster, UID: l.UID}
}

func (l *leftovers) folders() []string {
	out := make([]string, 0, len(l.Datastores))
	for _, ds := range l.Datastores {
		out = append(out, vsphere.DatastorePath(ds, l.DiskDir))
	}
	return out
}

// remove deletes the data disks' folder on each datastore, then the
// controller's copies of the cluster's etcd snapshots (copies nil: it
// keeps none); what is gone already counts as removed.
func (l *leftovers) remove(ctx context.Context, vc *vsphere.Session, copies *etcdcopies.Store) error {
	for _, ds := range l.Datastores {
		if err := vc.DeleteDatastoreDir(ctx, ds, l.DiskDir); err != nil {
			return err
		}
	}
	if copies != nil {
		if err := copies.Remove(l.copies()); err != nil {
			return fmt.Errorf("etcd snapshot copies: %w", err)
		}
	}
	return nil
}

// leftoversOf is what deleting the cluster leaves, once its machines are
// gone: its data disks' folder on the provider's data datastores now and
// on every datastore a master's disk was on (the provider's may have
// changed since), and the controller's copies of its snapshots. A purge
// with the cluster and a purge of its leftovers both remove this.
func leftoversOf(tx *store.Tx, cluster string, dataDatastores []string, now time.Time) (leftovers, error) {
	cur, err := loadCluster(tx, cluster)
	if err != nil {
		return leftovers{}, err
	}
	// The masters' records are gone by now; each noted its datastore.
	datastores := slices.Clone(dataDatastores)
	for _, ds := range cur.DataDiskDatastores {
		if !slices.Contains(datastores, ds) {
			datastores = append(datastores, ds)
		}
	}
	return leftovers{Cluster: cur.Spec.Name, UID: cur.UID, Provider: cur.Spec.Provider,
		DeletedAt: now.UTC(), DiskDir: cur.diskDir(), Datastores: datastores}, nil
}

// dataDiskWasOn notes that a master of the cluster had its data disk on
// datastore, as the master's record goes.
func dataDiskWasOn(tx *store.Tx, cluster, datastore string) error {
	rec, err := loadCluster(tx, cluster)
	if err != nil {
		return err
	}
	if slices.Contains(rec.DataDiskDatastores, datastore) {
		return nil
	}
	rec.DataDiskDatastores = append(rec.DataDiskDatastores, datastore)
	return tx.Put(store.Clusters, cluster, rec)
}

// Leftovers lists what the clusters deleted without purge left, oldest
// deletion first.
func (s *Service) Leftovers() ([]v1.ClusterLeftovers, error) {
	var all []leftovers
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		var err error
		all, err = store.ListJSON[leftovers](tx, store.Leftovers, "")
		return err
	})
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(all, func(a, b leftovers) int { return a.DeletedAt.Compare(b.DeletedAt) })
	out := make([]v1.ClusterLeftovers, 0, len(all))
	for i := range all {
		v, err := s.leftoversView(&all[i])
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func (s *Service) leftoversView(l *leftovers) (v1.ClusterLeftovers, error) {
	v := v1.ClusterLeftovers{ID: l.id(), Cluster: l.Cluster, UID: l.UID, Provider: l.Provider,
		DeletedAt: l.DeletedAt, DataDiskFolders: l.folders()}
	if s.cfg.Copies != nil {
		list, err := s.cfg.Copies.List(l.copies(), etcdcopies.Rule{})
		if err != nil {
			return v, fmt.Errorf("leftovers %s: %w", l.id(), err)
		}
		v.EtcdSnapshotCopies = len(list.Items)
	}
	return v, nil
}

// PurgeLeftovers removes what a deleted cluster left: its data disks'
// folder on each datastore, then the controller's copies of its etcd
// snapshots, then the record of them. A purge cut short keeps the record,
// so asking again finishes it; what is already gone counts as removed.
func (s *Service) PurgeLeftovers(ctx context.Context, id, by string) (v1.ClusterLeftovers, error) {
	var l leftovers
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		err := tx.Get(store.Leftovers, id, &l)
		if errors.Is(err, store.ErrNotFound) {
			return refuse(NotFound, "id", "no deleted cluster left anything under %.80q (harmonyctl cluster leftovers list names them)", id)
		}
		if err != nil {
			return err
		}
		// Clusters made before data disks had a folder per UID keep
		// harmony-data/NAME: never purge a folder a cluster still uses.
		recs, err := store.ListJSON[record](tx, store.Clusters, "")
		if err != nil {
			return err
		}
		for _, rec := range recs {
			if rec.Spec.Provider == l.Provider && rec.diskDir() == l.DiskDir {
				return refuse(Conflict, "id", "cluster %s keeps its data disks in %s too; purge it with the cluster instead", rec.Spec.Name, l.DiskDir)
			}
		}
		return nil
	})
	if err != nil {
		return v1.ClusterLeftovers{}, err
	}
	view, err := s.leftoversView(&l)
	if err != nil {
		return view, err
	}
	vc, err := s.sessionFor(ctx, l.Provider)
	if errors.Is(err, store.ErrNotFound) {
		return view, refuse(Conflict, "provider", "provider %s is gone: apply it again to purge these leftovers, or remove %v by hand", l.Provider, l.folders())
	}
	if err != nil {
		return view, err
	}
	if err := l.remove(ctx, vc, s.cfg.Copies); err != nil {
		return view, err
	}
	if err := s.cfg.Store.Update(func(tx *store.Tx) error { return tx.Delete(store.Leftovers, id) }); err != nil {
		return view, err
	}
	s.log.Info("deleted cluster's leftovers purged", "cluster", l.Cluster, "uid", l.UID, "folders", l.folders(), "etcdSnapshotCopies", view.EtcdSnapshotCopies, "by", by)
	return view, nil
}
