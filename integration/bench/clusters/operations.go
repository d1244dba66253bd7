package main

import (
	"fmt"
	"path/filepath"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/store"
)

// benchOperations measures a cluster's new operation (the product's
// AddOperation, then the operation finished, in a synced transaction of
// its own) in a store that holds the finished operations of many
// clusters, next to the same transaction with one record put: what a
// cluster's operations cost beyond the commit, which the fleet's history
// should not change.
func benchOperations(dir string, clusters, rounds int) error {
	s, err := store.Open(filepath.Join(dir, "operations-store.db"), store.Options{Create: true})
	if err != nil {
		return err
	}
	defer s.Close()
	now := time.Now().UTC()
	// One operation of cluster, started and finished in one transaction.
	operation := func(tx *store.Tx, cluster string) error {
		op := v1.Operation{Kind: v1.OperationScale, Cluster: cluster, CreatedAt: now}
		if err := tx.AddOperation(&op); err != nil {
			return err
		}
		op.State, op.Message, op.FinishedAt = v1.OperationSucceeded, "every VM of generation 2 is cloned, configured and powered on", now
		return tx.Put(store.Operations, op.ID, op)
	}
	// The measured cluster is one of them, with its history full: each
	// new operation then also deletes its oldest.
	for c := range clusters {
		err := s.Update(func(tx *store.Tx) error {
			for range store.KeepFinishedOperations {
				if err := operation(tx, fmt.Sprintf("cluster-%04d", c)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("fill the store: %w", err)
		}
	}
	add, err := rateAt(1, rounds, func() error {
		return s.Update(func(tx *store.Tx) error { return operation(tx, "cluster-0000") })
	})
	if err != nil {
		return err
	}
	seq := 0
	commit, err := rateAt(1, rounds, func() error {
		seq++
		return s.Update(func(tx *store.Tx) error {
			return tx.Put(store.Events, fmt.Sprintf("reference/%08d", seq), v1.Event{Type: "Normal", Reason: "Reference"})
		})
	})
	if err != nil {
		return err
	}
	fmt.Printf("\noperations: one at a time, in a store of %d finished operations of %d clusters\n", clusters*store.KeepFinishedOperations, clusters)
	row("operations started and finished", add, "store commits (fsync), one record each", commit)
	return nil
}
