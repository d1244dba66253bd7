package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// filledStore makes a store with enough nodes and roles to span many
// pages, closes it, and returns its bytes.
func filledStore(t *testing.T) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), FileName)
	s, err := Open(path, Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i := range 200 {
		name := fmt.Sprintf("node-%03d", i)
		n := Node{Name: name, UID: fmt.Sprintf("uid-%03d", i), Cluster: "demo", Role: v1.RoleWorker,
			IPs: []string{"198.18.0.1"}, CreatedAt: now}
		role := v1.Role{APIVersion: v1.APIVersion, Kind: "Role", NodeName: name, Role: v1.RoleWorker,
			Cluster: v1.ClusterSettings{Name: strings.Repeat("c", 40)}}
		tok := Token{ID: fmt.Sprintf("%016x", i), Node: name, NodeUID: n.UID, SecretHash: bytes.Repeat([]byte{1}, 32), ExpiresAt: now.Add(time.Hour)}
		if _, err := s.CreateNode(n, role, tok); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) < 40000 {
		t.Fatalf("store is only %d bytes; the truncation cases need more", len(data))
	}
	return data
}

// The damaged files an operator's bad day makes: each must be an error
// that names the file, never a SIGBUS or a panic (either would kill this
// test binary), and never a fresh empty store.
func TestOpenRefusesDamagedStores(t *testing.T) {
	good := filledStore(t)
	pageSize := int(binary.LittleEndian.Uint32(good[16+8:]))
	cases := map[string]func([]byte) []byte{
		"empty":           func([]byte) []byte { return nil },
		"truncated-12000": func(b []byte) []byte { return b[:12000] },
		"truncated-20000": func(b []byte) []byte { return b[:20000] },
		"one-page":        func(b []byte) []byte { return b[:pageSize] },
		"not-bbolt":       func(b []byte) []byte { return bytes.Repeat([]byte("harmony!"), len(b)/8) },
		"both-metas-zeroed": func(b []byte) []byte {
			clear(b[:2*pageSize])
			return b
		},
		// Every page after the metas overwritten with a page header that
		// names another page: bbolt asserts "Page expected to be".
		"data-pages-corrupted": func(b []byte) []byte {
			for off := 2 * pageSize; off+16 <= len(b); off += pageSize {
				binary.LittleEndian.PutUint64(b[off:], 4)
				binary.LittleEndian.PutUint16(b[off+8:], 0x02) // leaf
				binary.LittleEndian.PutUint16(b[off+10:], 0xffff)
			}
			return b
		},
	}
	for name, damage := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), FileName)
			if err := os.WriteFile(path, damage(bytes.Clone(good)), 0o600); err != nil {
				t.Fatal(err)
			}
			before, _ := os.ReadFile(path)
			s, err := Open(path, Options{Create: true})
			if err == nil {
				s.Close()
				t.Fatal("a damaged store opened")
			}
			var damaged *DamagedError
			if !errors.As(err, &damaged) || !errors.Is(err, ErrDamaged) {
				t.Fatalf("error is not a DamagedError: %v", err)
			}
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error does not name the file: %v", err)
			}
			after, _ := os.ReadFile(path)
			if !bytes.Equal(before, after) {
				t.Fatal("opening a damaged store changed the file")
			}
		})
	}
}

func TestOpenGoodStoreAndMissingFile(t *testing.T) {
	good := filledStore(t)
	path := filepath.Join(t.TempDir(), FileName)
	if err := os.WriteFile(path, good, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("a good store: %v", err)
	}
	nodes, err := s.Nodes()
	s.Close()
	if err != nil || len(nodes) != 200 {
		t.Fatalf("nodes %d, %v", len(nodes), err)
	}

	missing := filepath.Join(t.TempDir(), FileName)
	if _, err := Open(missing, Options{}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file without Create: %v", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("Open without Create made a file")
	}
}

func TestSecondOpenIsLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	s, err := Open(path, Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, ro := range []bool{false, true} {
		_, err := Open(path, Options{ReadOnly: ro, LockTimeout: 100 * time.Millisecond})
		if !errors.Is(err, ErrLocked) {
			t.Fatalf("read-only %v: %v, want ErrLocked", ro, err)
		}
	}
}

// Role watchers are told after the commit, so what they read is the new
// role, and not at all when the transaction rolls back.
func TestNodesChangedRunsAfterCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	var s *Store
	type seen struct {
		node string
		rev  int64
	}
	var got []seen
	s, err := Open(path, Options{Create: true, NodesChanged: func(nodes ...string) {
		for _, n := range nodes {
			r, err := s.Role(n)
			if err != nil {
				got = append(got, seen{n, -1})
				continue
			}
			got = append(got, seen{n, r.Revision})
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	for _, name := range []string{"a", "b"} {
		n := Node{Name: name, UID: "u-" + name, Role: v1.RoleWorker, CreatedAt: now}
		if _, err := s.CreateNode(n, v1.Role{NodeName: name, Role: v1.RoleWorker}, Token{ID: "t" + name, Node: name, NodeUID: n.UID}); err != nil {
			t.Fatal(err)
		}
	}
	got = nil
	var rev int64
	err = s.Update(func(tx *Tx) error {
		var err error
		rev, err = tx.PutRoles([]v1.Role{testRole("a", v1.RoleWorker), testRole("b", v1.RoleWorker)})
		if len(got) != 0 {
			t.Error("watchers were told before the commit")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != (seen{"a", rev}) || got[1] != (seen{"b", rev}) {
		t.Fatalf("after the commit the watchers read %v, want both at revision %d", got, rev)
	}

	got = nil
	_ = s.Update(func(tx *Tx) error {
		changed := testRole("a", v1.RoleWorker)
		changed.Cluster.VIP = "198.18.0.100"
		if _, err := tx.PutRoles([]v1.Role{changed}); err != nil {
			return err
		}
		return errors.New("roll back")
	})
	if len(got) != 0 {
		t.Fatalf("a rolled-back change told its watchers: %v", got)
	}

	got = nil
	if err := s.Update(func(tx *Tx) error { return tx.DeleteNode("b") }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != (seen{"b", -1}) {
		t.Fatalf("a deleted node's watchers: %v, want b told, with no role left", got)
	}
}
