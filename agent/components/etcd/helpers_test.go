package etcd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/agent/pki"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// newCA makes an etcd CA as the controller would put it in a role.
func newCA(t *testing.T, cn string) *v1.KeyPair {
	t.Helper()
	kp, err := pki.NewCA(cn, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// testRole is a valid master role for node among masters (name to
// address), with one worker.
func testRole(t *testing.T, node string, masters map[string]string, ca *v1.KeyPair) *v1.Role {
	t.Helper()
	r := &v1.Role{
		APIVersion: v1.APIVersion, Kind: "Role", NodeName: node, Revision: 1, Role: v1.RoleMaster,
		Cluster: v1.ClusterSettings{Name: "lab"},
		Peers:   []v1.Peer{{Name: "w1", Role: v1.RoleWorker, Address: "198.18.31.21"}},
		PKI:     &v1.ClusterPKI{EtcdCA: ca},
		// Snapshots have their own tests (snapshot_test.go); here a pass
		// of a healthy member must not act.
		Etcd: &v1.EtcdSettings{Snapshots: &v1.EtcdSnapshots{Disabled: true}},
	}
	for name, addr := range masters {
		r.Peers = append(r.Peers, v1.Peer{Name: name, Role: v1.RoleMaster, Address: addr})
	}
	if err := r.Validate(); err != nil {
		t.Fatalf("test role is not valid: %v", err)
	}
	return r
}

// noNetwork is a DialContext for tests without members to reach: it fails
// at once, as a refused connection would.
func noNetwork(context.Context, string, string) (net.Conn, error) {
	return nil, errors.New("no network in this test")
}

func cloneRole(r *v1.Role) *v1.Role {
	c := *r
	c.Peers = append([]v1.Peer(nil), r.Peers...)
	if r.PKI != nil {
		p := *r.PKI
		if p.EtcdCA != nil {
			kp := *p.EtcdCA
			p.EtcdCA = &kp
		}
		c.PKI = &p
	}
	if r.Etcd != nil {
		e := *r.Etcd
		if e.Snapshots != nil {
			snaps := *e.Snapshots
			e.Snapshots = &snaps
		}
		c.Etcd = &e
	}
	return &c
}

func hexID(id uint64) string { return fmt.Sprintf("%x", id) }
