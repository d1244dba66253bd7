// Package store keeps the controller's state in one bbolt file in the data
// directory: node records, hashed bootstrap tokens, roles and status.
// Every change is one transaction, so a crash leaves the old state or the
// new, and a restart resumes from it.
package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// FileName is the store's file inside the data directory.
const FileName = "harmony.db"

const schemaVersion = 1

var (
	bucketMeta   = []byte("meta")
	bucketNodes  = []byte("nodes")
	bucketTokens = []byte("tokens")
	bucketRoles  = []byte("roles")
	bucketStatus = []byte("status")
	bucketCerts  = []byte("certs")
	// bucketOperationIndex holds one empty record per operation, keyed
	// by its cluster and ID (operationKey).
	bucketOperationIndex = []byte("operation-index")

	keySchema   = []byte("schema")
	keyRevision = []byte("revision")
)

// Errors callers branch on.
var (
	ErrNotFound = errors.New("not found")
	ErrExists   = errors.New("already exists")
	ErrUsed     = errors.New("token already used")
	ErrExpired  = errors.New("token expired")
)

// Node is a node record: identity and inventory.
type Node struct {
	Name       string      `json:"name"`
	UID        string      `json:"uid"`
	Cluster    string      `json:"cluster"`
	Role       v1.NodeRole `json:"role"`
	IPs        []string    `json:"ips"`
	DNSNames   []string    `json:"dnsNames,omitempty"`
	CreatedAt  time.Time   `json:"createdAt"`
	EnrolledAt time.Time   `json:"enrolledAt,omitzero"`
	// The node's newest certificate, from enrollment or renewal.
	CertSerial   string    `json:"certSerial,omitempty"`
	CertNotAfter time.Time `json:"certNotAfter,omitzero"`
}

// Token is a bootstrap token as stored: its public id and the SHA-256 of its
// secret, never the secret itself.
type Token struct {
	ID         string    `json:"id"`
	Node       string    `json:"node"`
	NodeUID    string    `json:"nodeUID"`
	SecretHash []byte    `json:"secretHash"`
	CreatedAt  time.Time `json:"createdAt"`
	ExpiresAt  time.Time `json:"expiresAt"`
	UsedAt     time.Time `json:"usedAt,omitzero"`
}

// Store is the controller's state.
type Store struct {
	db   *bolt.DB
	path string
	opts Options
	// batch commits concurrent writes together (Batch).
	batch batcher
}

// Options say how to open the store.
type Options struct {
	// Create makes a new store when the file does not exist; without it a
	// missing file is an error (a controller that has a CA must never start
	// an empty store beside it).
	Create bool
	// ReadOnly opens the file for reading (a backup of a stopped
	// controller).
	ReadOnly bool
	// LockTimeout bounds the wait for another process's lock; default 2s.
	LockTimeout time.Duration
	// NodesChanged is called after a commit that changed the role of, or
	// removed, the named nodes: their role watches wake then, and read the
	// committed state.
	NodesChanged func(nodes ...string)
}

// ErrLocked means another process (a running controller) holds the file.
var ErrLocked = errors.New("locked by another process")

// Open checks and opens the store file. A damaged file is a *DamagedError
// naming it, never a crash; a second controller on the same file fails
// with ErrLocked rather than corrupting it.
func Open(path string, opts Options) (*Store, error) {
	if err := CheckFile(path); errors.Is(err, os.ErrNotExist) {
		if !opts.Create || opts.ReadOnly {
			return nil, fmt.Errorf("open store %s: %w", path, err)
		}
	} else if err != nil {
		return nil, err
	}
	if opts.LockTimeout == 0 {
		opts.LockTimeout = 2 * time.Second
	}
	s := &Store{path: path, opts: opts}
	err := guard(path, func() error {
		db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: opts.LockTimeout, ReadOnly: opts.ReadOnly})
		if errors.Is(err, bolt.ErrTimeout) {
			return fmt.Errorf("%w (is a controller using this data directory?)", ErrLocked)
		}
		if err != nil {
			return err
		}
		s.db = db
		s.batch.db = db
		// One read checks every page, then whether the store needs its
		// buckets made: a store that needs nothing is not written to, so a
		// start that is then refused (a CA that does not match) leaves the
		// file as it was.
		var ready bool
		err = db.View(func(tx *bolt.Tx) error {
			if err := verify(tx); err != nil {
				return &DamagedError{Path: path, Reason: err.Error()}
			}
			if ready = hasBuckets(tx); ready || opts.ReadOnly {
				return checkSchema(tx.Bucket(bucketMeta))
			}
			return nil
		})
		if err != nil || ready || opts.ReadOnly {
			return err
		}
		return db.Update(initBuckets)
	})
	if err != nil {
		if s.db != nil {
			s.db.Close()
		}
		var damaged *DamagedError
		if errors.As(err, &damaged) {
			return nil, err
		}
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	return s, nil
}

func allBuckets() [][]byte {
	return append([][]byte{bucketMeta, bucketNodes, bucketTokens, bucketRoles, bucketStatus, bucketCerts, bucketOperationIndex}, recordBuckets...)
}

func hasBuckets(tx *bolt.Tx) bool {
	for _, b := range allBuckets() {
		if tx.Bucket(b) == nil {
			return false
		}
	}
	return tx.Bucket(bucketMeta).Get(keySchema) != nil
}

func initBuckets(tx *bolt.Tx) error {
	unindexed := tx.Bucket(bucketOperationIndex) == nil
	for _, b := range allBuckets() {
		if _, err := tx.CreateBucketIfNotExists(b); err != nil {
			return err
		}
	}
	if unindexed {
		if err := indexOperations(tx, tx.Bucket(bucketOperationIndex)); err != nil {
			return err
		}
	}
	meta := tx.Bucket(bucketMeta)
	if meta.Get(keySchema) == nil {
		return meta.Put(keySchema, u64(schemaVersion))
	}
	return checkSchema(meta)
}

func checkSchema(meta *bolt.Bucket) error {
	if meta == nil {
		return errors.New("no meta bucket: not a Harmony store")
	}
	v := meta.Get(keySchema)
	if len(v) != 8 {
		return errors.New("no schema version: not a Harmony store")
	}
	if got := binary.BigEndian.Uint64(v); got != schemaVersion {
		return fmt.Errorf("schema version %d, this controller knows %d", got, schemaVersion)
	}
	return nil
}

// Path is the store's file.
func (s *Store) Path() string { return s.path }

// changed wakes the named nodes' watchers once tx has committed.
func (s *Store) changed(tx *bolt.Tx, nodes ...string) {
	if s.opts.NodesChanged == nil || len(nodes) == 0 {
		return
	}
	tx.OnCommit(func() { s.opts.NodesChanged(nodes...) })
}

// Close closes the file.
func (s *Store) Close() error { return s.db.Close() }

// CreateNode stores a new node record with its first role and token.
// Returns the role's revision.
func (s *Store) CreateNode(n Node, role v1.Role, tok Token) (int64, error) {
	var rev int64
	// Batch: concurrent creations share one commit (and one fsync).
	err := s.batch.do(func(tx *bolt.Tx) error {
		nodes := tx.Bucket(bucketNodes)
		if nodes.Get([]byte(n.Name)) != nil {
			return fmt.Errorf("node %q: %w", n.Name, ErrExists)
		}
		if err := putJSON(nodes, n.Name, n); err != nil {
			return err
		}
		if err := putJSON(tx.Bucket(bucketTokens), tok.ID, tok); err != nil {
			return err
		}
		var err error
		rev, err = s.putRoles(tx, []v1.Role{role})
		return err
	})
	return rev, err
}

// Node returns one node record.
func (s *Store) Node(name string) (Node, error) {
	var n Node
	err := s.db.View(func(tx *bolt.Tx) error {
		return getJSON(tx.Bucket(bucketNodes), name, &n)
	})
	return n, err
}

// Nodes returns every node record, ordered by name.
func (s *Store) Nodes() ([]Node, error) {
	var out []Node
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketNodes).ForEach(func(k, v []byte) error {
			var n Node
			if err := json.Unmarshal(v, &n); err != nil {
				return fmt.Errorf("decode node %q: %w", k, err)
			}
			out = append(out, n)
			return nil
		})
	})
	return out, err
}

// DeleteNode removes a node record with its tokens, role and status.
func (s *Store) DeleteNode(name string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		nodes := tx.Bucket(bucketNodes)
		if nodes.Get([]byte(name)) == nil {
			return fmt.Errorf("node %q: %w", name, ErrNotFound)
		}
		return s.deleteNode(tx, name)
	})
}

// deleteNode removes a node record with its tokens, role and status, and
// wakes its watches after the commit: they end with node_gone.
func (s *Store) deleteNode(tx *bolt.Tx, name string) error {
	if err := deleteTokensOf(tx, name, false); err != nil {
		return err
	}
	for _, b := range [][]byte{bucketNodes, bucketRoles, bucketStatus} {
		if err := tx.Bucket(b).Delete([]byte(name)); err != nil {
			return err
		}
	}
	s.changed(tx, name)
	return nil
}

// ReplaceToken stores a new token for an existing node and removes the
// node's tokens that were never used.
func (s *Store) ReplaceToken(tok Token) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		var n Node
		if err := getJSON(tx.Bucket(bucketNodes), tok.Node, &n); err != nil {
			return err
		}
		if n.UID != tok.NodeUID {
			return fmt.Errorf("node %q was re-created: %w", tok.Node, ErrNotFound)
		}
		if err := deleteTokensOf(tx, tok.Node, true); err != nil {
			return err
		}
		return putJSON(tx.Bucket(bucketTokens), tok.ID, tok)
	})
}

// deleteTokensOf removes a node's tokens; with unusedOnly, used tokens stay
// as a record of the enrollment, and so that a replay still reads "used".
func deleteTokensOf(tx *bolt.Tx, node string, unusedOnly bool) error {
	tokens := tx.Bucket(bucketTokens)
	var doomed [][]byte
	err := tokens.ForEach(func(k, v []byte) error {
		var t Token
		if err := json.Unmarshal(v, &t); err != nil {
			return fmt.Errorf("decode token %q: %w", k, err)
		}
		if t.Node == node && (!unusedOnly || t.UsedAt.IsZero()) {
			doomed = append(doomed, append([]byte(nil), k...))
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, k := range doomed {
		if err := tokens.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// Token returns a token by its public id.
func (s *Store) Token(id string) (Token, error) {
	var t Token
	err := s.db.View(func(tx *bolt.Tx) error {
		return getJSON(tx.Bucket(bucketTokens), id, &t)
	})
	return t, err
}

// Issued describes a certificate just issued to a node.
type Issued struct {
	Node     string
	NodeUID  string
	Serial   string
	NotAfter time.Time
}

// ConsumeToken marks a token used and records the certificate issued for
// it, in one transaction. If a concurrent request used the token first, it
// returns ErrUsed and the caller must discard its certificate.
func (s *Store) ConsumeToken(id string, issued Issued, now time.Time) error {
	return s.batch.do(func(tx *bolt.Tx) error {
		tokens := tx.Bucket(bucketTokens)
		var t Token
		if err := getJSON(tokens, id, &t); err != nil {
			return err
		}
		switch {
		case !t.UsedAt.IsZero():
			return ErrUsed
		case !now.Before(t.ExpiresAt):
			return ErrExpired
		case t.Node != issued.Node || t.NodeUID != issued.NodeUID:
			return fmt.Errorf("token %s belongs to another node: %w", id, ErrNotFound)
		}
		t.UsedAt = now
		if err := putJSON(tokens, id, t); err != nil {
			return err
		}
		return recordCert(tx, issued, now, true)
	})
}

// RecordRenewal stores a renewed certificate of a node that still exists.
func (s *Store) RecordRenewal(issued Issued, now time.Time) error {
	return s.batch.do(func(tx *bolt.Tx) error {
		return recordCert(tx, issued, now, false)
	})
}

func recordCert(tx *bolt.Tx, issued Issued, now time.Time, enrolled bool) error {
	nodes := tx.Bucket(bucketNodes)
	var n Node
	if err := getJSON(nodes, issued.Node, &n); err != nil {
		return err
	}
	if n.UID != issued.NodeUID {
		return fmt.Errorf("node %q was re-created: %w", issued.Node, ErrNotFound)
	}
	if enrolled {
		n.EnrolledAt = now
	}
	n.CertSerial = issued.Serial
	n.CertNotAfter = issued.NotAfter
	return putJSON(nodes, n.Name, n)
}

// Role returns a node's role.
func (s *Store) Role(name string) (v1.Role, error) {
	var r v1.Role
	err := s.db.View(func(tx *bolt.Tx) error {
		return getJSON(tx.Bucket(bucketRoles), name, &r)
	})
	return r, err
}

// RoleMismatchError is a role document whose role differs from its node's
// record: a node's role is fixed when it is created.
type RoleMismatchError struct {
	Index     int
	Node      string
	Want, Got v1.NodeRole
}

func (e *RoleMismatchError) Error() string {
	return fmt.Sprintf("role %q differs from node %s's record (%q); a node's role is fixed at creation", e.Got, e.Node, e.Want)
}

// SetRoles replaces the roles of existing nodes in one transaction and
// gives them all one new revision, which it returns. It checks, in the same
// transaction, that every node exists (ErrNotFound) and keeps its role
// (*RoleMismatchError).
func (s *Store) SetRoles(roles []v1.Role) (int64, error) {
	var rev int64
	err := s.db.Update(func(tx *bolt.Tx) error {
		nodes := tx.Bucket(bucketNodes)
		for i, r := range roles {
			var n Node
			if err := getJSON(nodes, r.NodeName, &n); err != nil {
				return fmt.Errorf("node %q: %w", r.NodeName, ErrNotFound)
			}
			if n.Role != r.Role {
				return &RoleMismatchError{Index: i, Node: n.Name, Want: n.Role, Got: r.Role}
			}
		}
		var err error
		rev, err = s.putRoles(tx, roles)
		return err
	})
	return rev, err
}

// putRoles stores roles under one new revision; their nodes' watches wake
// after the commit, so they read the new roles.
func (s *Store) putRoles(tx *bolt.Tx, roles []v1.Role) (int64, error) {
	meta := tx.Bucket(bucketMeta)
	var rev int64 = 1
	if v := meta.Get(keyRevision); v != nil {
		rev = int64(binary.BigEndian.Uint64(v)) + 1
	}
	if err := meta.Put(keyRevision, u64(uint64(rev))); err != nil {
		return 0, err
	}
	now := time.Now().UTC()
	names := make([]string, len(roles))
	for i, r := range roles {
		r.Revision = rev
		r.UpdatedAt = now
		if err := putJSON(tx.Bucket(bucketRoles), r.NodeName, r); err != nil {
			return 0, err
		}
		names[i] = r.NodeName
	}
	s.changed(tx, names...)
	return rev, nil
}

// SetStatus stores a node's latest status report.
func (s *Store) SetStatus(st v1.Status) error {
	_, err := s.ReplaceStatus(st)
	return err
}

// ReplaceStatus is SetStatus that returns the report it replaced (zero
// when there was none), read in the same transaction: of two reports at
// once, each sees the other's or none.
func (s *Store) ReplaceStatus(st v1.Status) (v1.Status, error) {
	var prev v1.Status
	err := s.batch.do(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketNodes).Get([]byte(st.NodeName)) == nil {
			return fmt.Errorf("node %q: %w", st.NodeName, ErrNotFound)
		}
		b := tx.Bucket(bucketStatus)
		prev = v1.Status{} // Batch may run this more than once
		if err := getJSON(b, st.NodeName, &prev); err != nil {
			// None, or one this controller cannot read: the report
			// replaces it whole, as it always did.
			prev = v1.Status{}
		}
		return putJSON(b, st.NodeName, st)
	})
	return prev, err
}

// Status returns a node's latest status report.
func (s *Store) Status(name string) (v1.Status, error) {
	var st v1.Status
	err := s.db.View(func(tx *bolt.Tx) error {
		return getJSON(tx.Bucket(bucketStatus), name, &st)
	})
	return st, err
}

func putJSON(b *bolt.Bucket, key string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", key, err)
	}
	return b.Put([]byte(key), data)
}

func getJSON(b *bolt.Bucket, key string, v any) error {
	data := b.Get([]byte(key))
	if data == nil {
		return fmt.Errorf("%q: %w", key, ErrNotFound)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decode %q: %w", key, err)
	}
	return nil
}

func u64(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}
