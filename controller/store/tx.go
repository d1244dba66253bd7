package store

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/randstr"
)

// Bucket names a bucket of records that the controller's workflows keep:
// providers, images, clusters and their machines, operations, events,
// address allocations, and secrets.
type Bucket string

// Record buckets.
const (
	Providers  Bucket = "providers"
	Images     Bucket = "images"
	Clusters   Bucket = "clusters"
	Machines   Bucket = "machines"
	Operations Bucket = "operations"
	Events     Bucket = "events"
	Addresses  Bucket = "addresses"
	// Secrets holds vCenter passwords and cluster CAs: never returned by
	// the API, never logged.
	Secrets Bucket = "secrets"
	// Users holds local users, with their password hashes.
	Users Bucket = "users"
	// Sessions holds the users' login sessions until they expire.
	Sessions Bucket = "sessions"
	// Grants holds users' and groups' roles on clusters, keyed
	// "cluster/kind/subject".
	Grants Bucket = "grants"
	// Audit holds the audited requests of the last 90 days, keyed by time.
	Audit Bucket = "audit"
	// Settings holds controller-wide settings, such as the LDAP source
	// (its bind password is in Secrets).
	Settings Bucket = "settings"
	// Leftovers holds what each cluster deleted without purge left (its
	// data disks' folders, its snapshot copies), keyed by
	// v1.ClusterInstance, until it is purged.
	Leftovers Bucket = "leftovers"
)

var recordBuckets = [][]byte{
	[]byte(Providers), []byte(Images), []byte(Clusters), []byte(Machines),
	[]byte(Operations), []byte(Events), []byte(Addresses), []byte(Secrets),
	[]byte(Users), []byte(Sessions), []byte(Grants), []byte(Audit),
	[]byte(Settings), []byte(Leftovers),
}

// Tx is one transaction over the record buckets and the node records: a
// workflow step and everything it changes commit together or not at all.
type Tx struct {
	tx *bolt.Tx
	s  *Store
}

// Update runs fn in a read-write transaction.
func (s *Store) Update(fn func(*Tx) error) error {
	return s.db.Update(func(tx *bolt.Tx) error { return fn(&Tx{tx: tx, s: s}) })
}

// Batch runs fn in a read-write transaction that it may share with other
// concurrent Batch calls (one commit, one fsync, for all; see batcher);
// fn may run more than once, so it must be idempotent.
func (s *Store) Batch(fn func(*Tx) error) error {
	return s.batch.do(func(tx *bolt.Tx) error { return fn(&Tx{tx: tx, s: s}) })
}

// View runs fn in a read-only transaction.
func (s *Store) View(fn func(*Tx) error) error {
	return s.db.View(func(tx *bolt.Tx) error { return fn(&Tx{tx: tx, s: s}) })
}

// OnCommit runs fn after the transaction has committed, and not at all if
// it rolls back: wake watchers there, so that they read the new state.
func (t *Tx) OnCommit(fn func()) { t.tx.OnCommit(fn) }

func (t *Tx) bucket(b Bucket) *bolt.Bucket { return t.tx.Bucket([]byte(b)) }

// Get decodes one record; ErrNotFound if there is none.
func (t *Tx) Get(b Bucket, key string, v any) error { return getJSON(t.bucket(b), key, v) }

// Has reports whether a record exists.
func (t *Tx) Has(b Bucket, key string) bool { return t.bucket(b).Get([]byte(key)) != nil }

// Put stores one record.
func (t *Tx) Put(b Bucket, key string, v any) error { return putJSON(t.bucket(b), key, v) }

// Delete removes one record; a missing one is not an error.
func (t *Tx) Delete(b Bucket, key string) error { return t.bucket(b).Delete([]byte(key)) }

// List calls fn for each record whose key starts with prefix, in key
// order.
func (t *Tx) List(b Bucket, prefix string, fn func(key string, data []byte) error) error {
	return t.ListFrom(b, prefix, prefix, fn)
}

// ListFrom is List from the first key at or after from; from sorts at or
// after prefix.
func (t *Tx) ListFrom(b Bucket, prefix, from string, fn func(key string, data []byte) error) error {
	c := t.bucket(b).Cursor()
	p := []byte(prefix)
	for k, v := c.Seek([]byte(from)); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
		if err := fn(string(k), v); err != nil {
			return err
		}
	}
	return nil
}

// Last returns the greatest key that starts with prefix.
func (t *Tx) Last(b Bucket, prefix string) (string, bool) {
	c := t.bucket(b).Cursor()
	p := []byte(prefix)
	// One back from the first key past every key with the prefix.
	var k []byte
	if end := prefixEnd(p); end == nil {
		k, _ = c.Last()
	} else if k, _ = c.Seek(end); k == nil {
		k, _ = c.Last()
	} else {
		k, _ = c.Prev()
	}
	if k == nil || !bytes.HasPrefix(k, p) {
		return "", false
	}
	return string(k), true
}

// prefixEnd is the least key greater than every key that starts with p;
// nil when there is none (p is empty or all 0xff).
func prefixEnd(p []byte) []byte {
	end := slices.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// DeletePrefix removes every record whose key starts with prefix.
func (t *Tx) DeletePrefix(b Bucket, prefix string) error {
	_, err := t.DeleteIf(b, prefix, func(string, []byte) (bool, error) { return true, nil })
	return err
}

// DeleteIf removes the records under prefix that match says to; it
// returns how many it removed.
func (t *Tx) DeleteIf(b Bucket, prefix string, match func(key string, data []byte) (bool, error)) (int, error) {
	var keys []string
	err := t.List(b, prefix, func(k string, v []byte) error {
		ok, err := match(k, v)
		if ok {
			keys = append(keys, k)
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	for _, k := range keys {
		if err := t.Delete(b, k); err != nil {
			return 0, err
		}
	}
	return len(keys), nil
}

// NextSequence returns the bucket's next sequence number.
func (t *Tx) NextSequence(b Bucket) (uint64, error) { return t.bucket(b).NextSequence() }

// ListJSON decodes every record under prefix into a slice.
func ListJSON[T any](t *Tx, b Bucket, prefix string) ([]T, error) {
	var out []T
	err := t.List(b, prefix, func(k string, data []byte) error {
		var v T
		if err := json.Unmarshal(data, &v); err != nil {
			return fmt.Errorf("decode %s %q: %w", b, k, err)
		}
		out = append(out, v)
		return nil
	})
	return out, err
}

// CreateNode stores a node record with no token yet: a workflow issues
// the token when it writes the bootstrap, so that a retried step simply
// issues a new one.
func (t *Tx) CreateNode(n Node) error {
	nodes := t.tx.Bucket(bucketNodes)
	if nodes.Get([]byte(n.Name)) != nil {
		return fmt.Errorf("node %q: %w", n.Name, ErrExists)
	}
	return putJSON(nodes, n.Name, n)
}

// Node reads a node record.
func (t *Tx) Node(name string) (Node, error) {
	var n Node
	return n, getJSON(t.tx.Bucket(bucketNodes), name, &n)
}

// DeleteNode removes a node record with its tokens, role and status; a
// missing one is not an error.
func (t *Tx) DeleteNode(name string) error { return t.s.deleteNode(t.tx, name) }

// PutRoles validates and stores those of roles that differ from the
// node's stored role (in more than Revision and UpdatedAt) under one new
// revision, and their watches wake after the commit; 0 when none
// differs. A cluster's
// workflow recomputes every node's role at each step that changes one,
// and waking a hundred agents for one node's change cost them and the
// controller for nothing.
func (t *Tx) PutRoles(roles []v1.Role) (int64, error) {
	b := t.tx.Bucket(bucketRoles)
	changed := make([]v1.Role, 0, len(roles))
	for _, r := range roles {
		if stored := b.Get([]byte(r.NodeName)); stored == nil || !sameRole(stored, r) {
			changed = append(changed, r)
		}
	}
	if len(changed) == 0 {
		return 0, nil
	}
	for i := range changed {
		if err := changed[i].Validate(); err != nil {
			return 0, fmt.Errorf("role of %s: %w", changed[i].NodeName, err)
		}
	}
	return t.s.putRoles(t.tx, changed)
}

// sameRole reports whether r, stamped with stored's revision and time,
// encodes as stored does.
func sameRole(stored []byte, r v1.Role) bool {
	var ok bool
	if r.Revision, r.UpdatedAt, ok = roleStamp(stored); !ok {
		return false
	}
	data, err := json.Marshal(r)
	return err == nil && bytes.Equal(data, stored)
}

// roleStamp reads a stored role's revision and time from its first keys,
// without decoding the rest (a master's holds the cluster's CAs).
func roleStamp(stored []byte) (rev int64, at time.Time, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(stored))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return 0, at, false
	}
	var haveRev, haveAt bool
	for dec.More() && !(haveRev && haveAt) {
		key, err := dec.Token()
		if err != nil {
			return 0, at, false
		}
		switch key {
		case "revision":
			haveRev = dec.Decode(&rev) == nil
		case "updatedAt":
			haveAt = dec.Decode(&at) == nil
		case "role":
			// Encoded after both: a role without a time has none.
			return rev, at, haveRev
		default:
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return 0, at, false
			}
		}
	}
	return rev, at, haveRev
}

// Status reads a node's latest status report.
func (t *Tx) Status(name string) (v1.Status, bool) {
	var st v1.Status
	err := getJSON(t.tx.Bucket(bucketStatus), name, &st)
	return st, err == nil
}

// Role reads a node's stored role.
func (t *Tx) Role(name string) (v1.Role, bool) {
	var r v1.Role
	err := getJSON(t.tx.Bucket(bucketRoles), name, &r)
	return r, err == nil
}

// KeepFinishedOperations is how many finished operations a cluster keeps
// (the newest): AddOperation deletes older ones. Events and the audit log
// keep the longer history.
const KeepFinishedOperations = 100

// operationKey is an operation's key in the operation index: its cluster
// ("" for an image's), then its ID. Cluster names are DNS labels, so the
// cluster's operations are the keys under "cluster/". A step reads its own
// cluster's operations through it, never every cluster's, and never
// decodes another cluster's.
func operationKey(cluster, id string) []byte { return []byte(cluster + "/" + id) }

// AddOperation gives op a new ID, marks it running and stores it, and
// deletes its cluster's finished operations beyond the newest
// KeepFinishedOperations.
func (t *Tx) AddOperation(op *v1.Operation) error {
	id, err := randstr.Hex(8)
	if err != nil {
		return err
	}
	ops, err := t.ClusterOperations(op.Cluster)
	if err != nil {
		return err
	}
	ops = slices.DeleteFunc(ops, func(o v1.Operation) bool { return o.State == v1.OperationRunning })
	slices.SortFunc(ops, func(a, b v1.Operation) int {
		return cmp.Or(b.FinishedAt.Compare(a.FinishedAt), strings.Compare(b.ID, a.ID))
	})
	for _, old := range ops[min(len(ops), KeepFinishedOperations):] {
		if err := t.DeleteOperation(old); err != nil {
			return err
		}
	}
	op.ID, op.State = id, v1.OperationRunning
	if err := t.tx.Bucket(bucketOperationIndex).Put(operationKey(op.Cluster, op.ID), nil); err != nil {
		return err
	}
	return t.Put(Operations, op.ID, op)
}

// ClusterOperations reads a cluster's operations ("" for the images'), in
// ID order.
func (t *Tx) ClusterOperations(cluster string) ([]v1.Operation, error) {
	index := t.tx.Bucket(bucketOperationIndex)
	if index == nil {
		// A store of an older controller, opened read-only: Open adds the
		// index only when it may write.
		ops, err := ListJSON[v1.Operation](t, Operations, "")
		return slices.DeleteFunc(ops, func(o v1.Operation) bool { return o.Cluster != cluster }), err
	}
	var out []v1.Operation
	prefix := operationKey(cluster, "")
	c := index.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		var op v1.Operation
		switch err := t.Get(Operations, string(k[len(prefix):]), &op); {
		case errors.Is(err, ErrNotFound):
			continue
		case err != nil:
			return nil, fmt.Errorf("operation %s: %w", k[len(prefix):], err)
		}
		out = append(out, op)
	}
	return out, nil
}

// DeleteOperation removes an operation and its index entry.
func (t *Tx) DeleteOperation(op v1.Operation) error {
	if err := t.tx.Bucket(bucketOperationIndex).Delete(operationKey(op.Cluster, op.ID)); err != nil {
		return err
	}
	return t.Delete(Operations, op.ID)
}

// OperationClusters lists the clusters that have operations, from the
// index alone, without decoding any.
func (t *Tx) OperationClusters() []string {
	index := t.tx.Bucket(bucketOperationIndex)
	if index == nil {
		return nil // read-only, an older controller's store
	}
	var out []string
	c := index.Cursor()
	for k, _ := c.First(); k != nil; {
		cluster, _, _ := bytes.Cut(k, []byte("/"))
		out = append(out, string(cluster))
		// Past every key of this cluster: "/" + 1 is "0".
		k, _ = c.Seek(append(slices.Clip(cluster), '0'))
	}
	return out
}

// indexOperations fills the operation index from the operations, for a
// store that an older controller made. An operation that does not decode
// stays as it is, out of the index: reading it by its ID still says what
// is wrong with it, and no cluster's steps stop on it.
func indexOperations(tx *bolt.Tx, index *bolt.Bucket) error {
	return tx.Bucket([]byte(Operations)).ForEach(func(k, v []byte) error {
		var op v1.Operation
		if json.Unmarshal(v, &op) != nil {
			return nil
		}
		return index.Put(operationKey(op.Cluster, string(k)), nil)
	})
}
