package store

import (
	"bytes"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// testStore is a fresh store in a temporary directory that records the
// nodes its NodesChanged hook was called with.
type testStore struct {
	*Store
	mu      sync.Mutex
	changed [][]string
}

func openTestStore(t *testing.T) *testStore {
	t.Helper()
	ts := &testStore{}
	s, err := Open(filepath.Join(t.TempDir(), FileName), Options{Create: true, NodesChanged: func(nodes ...string) {
		ts.mu.Lock()
		ts.changed = append(ts.changed, slices.Clone(nodes))
		ts.mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ts.Store = s
	return ts
}

// takeChanged returns the NodesChanged calls since the last take.
func (ts *testStore) takeChanged() [][]string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	out := ts.changed
	ts.changed = nil
	return out
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func testNode(name, uid string, role v1.NodeRole) Node {
	return Node{Name: name, UID: uid, Cluster: "demo", Role: role, IPs: []string{"198.18.0.11"}, CreatedAt: t0}
}

func testRole(name string, role v1.NodeRole) v1.Role {
	return v1.Role{APIVersion: v1.APIVersion, Kind: "Role", NodeName: name, Role: role, Cluster: v1.ClusterSettings{Name: "demo"}}
}

func testToken(id string, n Node) Token {
	return Token{ID: id, Node: n.Name, NodeUID: n.UID, SecretHash: bytes.Repeat([]byte{0xab}, 32), CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
}

// addNode creates a worker with one token and returns both.
func (ts *testStore) addNode(t *testing.T, name, uid, tokenID string) (Node, Token) {
	t.Helper()
	n := testNode(name, uid, v1.RoleWorker)
	tok := testToken(tokenID, n)
	if _, err := ts.CreateNode(n, testRole(name, v1.RoleWorker), tok); err != nil {
		t.Fatalf("create node %s: %v", name, err)
	}
	return n, tok
}

func (ts *testStore) mustNode(t *testing.T, name string) Node {
	t.Helper()
	n, err := ts.Node(name)
	if err != nil {
		t.Fatalf("node %s: %v", name, err)
	}
	return n
}

func (ts *testStore) mustToken(t *testing.T, id string) Token {
	t.Helper()
	tok, err := ts.Token(id)
	if err != nil {
		t.Fatalf("token %s: %v", id, err)
	}
	return tok
}

// putNodeRecord overwrites a node record behind the store's API: a node
// re-created under the same name while a token or certificate of the old
// one is still in flight.
func (ts *testStore) putNodeRecord(t *testing.T, n Node) {
	t.Helper()
	if err := ts.db.Update(func(tx *bolt.Tx) error { return putJSON(tx.Bucket(bucketNodes), n.Name, n) }); err != nil {
		t.Fatal(err)
	}
}

func TestCreateNodeStoresNodeRoleAndTokenAndRefusesDuplicates(t *testing.T) {
	ts := openTestStore(t)
	n := testNode("w1", "uid-1", v1.RoleWorker)
	tok := testToken("tok1", n)
	rev, err := ts.CreateNode(n, testRole("w1", v1.RoleWorker), tok)
	if err != nil {
		t.Fatal(err)
	}
	if rev != 1 {
		t.Fatalf("first revision %d, want 1", rev)
	}
	if got := ts.mustNode(t, "w1"); got.UID != "uid-1" || got.Role != v1.RoleWorker || !got.EnrolledAt.IsZero() || got.CertSerial != "" {
		t.Fatalf("node record %+v", got)
	}
	if got := ts.mustToken(t, "tok1"); got.Node != "w1" || got.NodeUID != "uid-1" || !bytes.Equal(got.SecretHash, tok.SecretHash) || !got.UsedAt.IsZero() || !got.ExpiresAt.Equal(tok.ExpiresAt) {
		t.Fatalf("token record %+v", got)
	}
	role, err := ts.Role("w1")
	if err != nil || role.Revision != 1 || role.NodeName != "w1" || role.UpdatedAt.IsZero() {
		t.Fatalf("role %+v, %v", role, err)
	}
	if got := ts.takeChanged(); !slices.EqualFunc(got, [][]string{{"w1"}}, slices.Equal) {
		t.Fatalf("NodesChanged calls %v, want [[w1]]", got)
	}

	// A second node of the same name is refused and changes nothing.
	dup := testNode("w1", "uid-2", v1.RoleMaster)
	if _, err := ts.CreateNode(dup, testRole("w1", v1.RoleMaster), testToken("tok2", dup)); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate: %v, want ErrExists", err)
	}
	if got := ts.mustNode(t, "w1"); got.UID != "uid-1" || got.Role != v1.RoleWorker {
		t.Fatalf("node record after a refused duplicate: %+v", got)
	}
	if _, err := ts.Token("tok2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the refused duplicate's token was stored: %v", err)
	}
	if role, _ := ts.Role("w1"); role.Revision != 1 || role.Role != v1.RoleWorker {
		t.Fatalf("role after a refused duplicate: %+v", role)
	}
	if got := ts.takeChanged(); len(got) != 0 {
		t.Fatalf("a refused duplicate woke %v", got)
	}
	nodes, err := ts.Nodes()
	if err != nil || len(nodes) != 1 {
		t.Fatalf("nodes %+v, %v", nodes, err)
	}
}

func TestReplaceTokenRevokesUnusedTokensAndKeepsUsedOnes(t *testing.T) {
	ts := openTestStore(t)
	w1, _ := ts.addNode(t, "w1", "uid-1", "used")
	ts.addNode(t, "w2", "uid-2", "other")
	if err := ts.ConsumeToken("used", Issued{Node: "w1", NodeUID: "uid-1", Serial: "a1", NotAfter: t0.Add(24 * time.Hour)}, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	// An unused token of w1, then its replacement.
	if err := ts.ReplaceToken(testToken("unused", w1)); err != nil {
		t.Fatal(err)
	}
	if err := ts.ReplaceToken(testToken("new", w1)); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.Token("unused"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the unused token survived its replacement: %v", err)
	}
	if got := ts.mustToken(t, "used"); got.UsedAt.IsZero() {
		t.Fatalf("the used token lost its use: %+v", got)
	}
	if got := ts.mustToken(t, "new"); got.Node != "w1" || !got.UsedAt.IsZero() {
		t.Fatalf("the new token %+v", got)
	}
	// Another node's unused token is not touched.
	if got := ts.mustToken(t, "other"); got.Node != "w2" || !got.UsedAt.IsZero() {
		t.Fatalf("another node's token %+v", got)
	}

	// A token for a node record that was re-created is refused.
	if err := ts.DeleteNode("w1"); err != nil {
		t.Fatal(err)
	}
	ts.addNode(t, "w1", "uid-1b", "recreated")
	if err := ts.ReplaceToken(testToken("stale", w1)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("token for the old w1: %v, want ErrNotFound", err)
	}
	if _, err := ts.Token("stale"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the refused token was stored: %v", err)
	}
	if got := ts.mustToken(t, "recreated"); !got.UsedAt.IsZero() || got.NodeUID != "uid-1b" {
		t.Fatalf("the refused replacement touched the new node's token: %+v", got)
	}
	// And so is a token for no node at all.
	if err := ts.ReplaceToken(testToken("nobody", testNode("ghost", "uid-g", v1.RoleWorker))); !errors.Is(err, ErrNotFound) {
		t.Fatalf("token for an unknown node: %v, want ErrNotFound", err)
	}
	if _, err := ts.Token("nobody"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the token for an unknown node was stored: %v", err)
	}
}

func TestConsumeTokenRecordsEnrollmentOnce(t *testing.T) {
	ts := openTestStore(t)
	ts.addNode(t, "w1", "uid-1", "tok1")
	at := t0.Add(5 * time.Minute)
	notAfter := at.Add(24 * time.Hour)
	if err := ts.ConsumeToken("tok1", Issued{Node: "w1", NodeUID: "uid-1", Serial: "a1", NotAfter: notAfter}, at); err != nil {
		t.Fatal(err)
	}
	if got := ts.mustToken(t, "tok1"); !got.UsedAt.Equal(at) {
		t.Fatalf("token used at %v, want %v", got.UsedAt, at)
	}
	n := ts.mustNode(t, "w1")
	if !n.EnrolledAt.Equal(at) || n.CertSerial != "a1" || !n.CertNotAfter.Equal(notAfter) {
		t.Fatalf("node after enrollment %+v", n)
	}

	// A second use, however early, is ErrUsed and changes nothing.
	later := at.Add(time.Minute)
	err := ts.ConsumeToken("tok1", Issued{Node: "w1", NodeUID: "uid-1", Serial: "b2", NotAfter: later.Add(24 * time.Hour)}, later)
	if !errors.Is(err, ErrUsed) {
		t.Fatalf("second use: %v, want ErrUsed", err)
	}
	if got := ts.mustToken(t, "tok1"); !got.UsedAt.Equal(at) {
		t.Fatalf("a refused second use moved UsedAt to %v", got.UsedAt)
	}
	if got := ts.mustNode(t, "w1"); !got.EnrolledAt.Equal(at) || got.CertSerial != "a1" || !got.CertNotAfter.Equal(notAfter) {
		t.Fatalf("a refused second use changed the node: %+v", got)
	}

	// An unknown token is ErrNotFound.
	if err := ts.ConsumeToken("nope", Issued{Node: "w1", NodeUID: "uid-1", Serial: "c3"}, later); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown token: %v, want ErrNotFound", err)
	}
}

func TestConsumeTokenRefusesExpiredToken(t *testing.T) {
	ts := openTestStore(t)
	_, tok := ts.addNode(t, "w1", "uid-1", "tok1")
	// The token is good until just before ExpiresAt: at that instant it
	// has expired.
	for _, now := range []time.Time{tok.ExpiresAt, tok.ExpiresAt.Add(time.Hour)} {
		err := ts.ConsumeToken("tok1", Issued{Node: "w1", NodeUID: "uid-1", Serial: "a1", NotAfter: now.Add(24 * time.Hour)}, now)
		if !errors.Is(err, ErrExpired) {
			t.Fatalf("consume at %v (expires %v): %v, want ErrExpired", now, tok.ExpiresAt, err)
		}
		if got := ts.mustToken(t, "tok1"); !got.UsedAt.IsZero() {
			t.Fatalf("an expired token was marked used: %+v", got)
		}
		if got := ts.mustNode(t, "w1"); !got.EnrolledAt.IsZero() || got.CertSerial != "" {
			t.Fatalf("an expired token enrolled the node: %+v", got)
		}
	}
	// A nanosecond before, it still works.
	if err := ts.ConsumeToken("tok1", Issued{Node: "w1", NodeUID: "uid-1", Serial: "a1"}, tok.ExpiresAt.Add(-time.Nanosecond)); err != nil {
		t.Fatalf("consume just before expiry: %v", err)
	}
}

func TestConsumeTokenRefusesTokenOfAnotherNode(t *testing.T) {
	ts := openTestStore(t)
	ts.addNode(t, "w1", "uid-1", "tok1")
	ts.addNode(t, "w2", "uid-2", "tok2")
	for name, issued := range map[string]Issued{
		"other name":      {Node: "w2", NodeUID: "uid-2", Serial: "a1"},
		"other UID":       {Node: "w1", NodeUID: "uid-2", Serial: "a1"},
		"other name only": {Node: "w2", NodeUID: "uid-1", Serial: "a1"},
	} {
		err := ts.ConsumeToken("tok1", issued, t0.Add(time.Minute))
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: %v, want ErrNotFound", name, err)
		}
		if got := ts.mustToken(t, "tok1"); !got.UsedAt.IsZero() {
			t.Fatalf("%s: the token was marked used: %+v", name, got)
		}
		for _, n := range []string{"w1", "w2"} {
			if got := ts.mustNode(t, n); !got.EnrolledAt.IsZero() || got.CertSerial != "" {
				t.Fatalf("%s: node %s was enrolled: %+v", name, n, got)
			}
		}
	}

	// A token of w1's old record cannot enroll a new w1 (re-created under
	// a new UID while the token is still in flight).
	fresh := testNode("w1", "uid-1b", v1.RoleWorker)
	ts.putNodeRecord(t, fresh)
	err := ts.ConsumeToken("tok1", Issued{Node: "w1", NodeUID: fresh.UID, Serial: "a2"}, t0.Add(time.Minute))
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("old node's token for the new node: %v, want ErrNotFound", err)
	}
	if got := ts.mustToken(t, "tok1"); !got.UsedAt.IsZero() {
		t.Fatalf("the old node's token was marked used: %+v", got)
	}
	if got := ts.mustNode(t, "w1"); !got.EnrolledAt.IsZero() || got.CertSerial != "" {
		t.Fatalf("the old node's token enrolled the new node: %+v", got)
	}
}

// TestRecordCertRefusesRecreatedNode: a certificate issued for a node
// record that has since been replaced by another of the same name is
// recorded for neither; the new node's certificate stays.
func TestRecordCertRefusesRecreatedNode(t *testing.T) {
	ts := openTestStore(t)
	old, _ := ts.addNode(t, "w1", "uid-old", "tok1")
	// The node is re-created under a new UID while its token is still in
	// flight (the store's API would have removed the token; a stale
	// transaction might not).
	renewed := testNode("w1", "uid-new", v1.RoleWorker)
	renewed.CertSerial, renewed.CertNotAfter, renewed.EnrolledAt = "new1", t0.Add(48*time.Hour), t0.Add(time.Second)
	ts.putNodeRecord(t, renewed)

	at := t0.Add(time.Minute)
	err := ts.ConsumeToken("tok1", Issued{Node: "w1", NodeUID: old.UID, Serial: "old2", NotAfter: at.Add(24 * time.Hour)}, at)
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("consume for the old node: %v, want ErrNotFound", err)
	}
	// The transaction rolled back: the token is still unused.
	if got := ts.mustToken(t, "tok1"); !got.UsedAt.IsZero() {
		t.Fatalf("token used by a refused enrollment: %+v", got)
	}
	err = ts.RecordRenewal(Issued{Node: "w1", NodeUID: old.UID, Serial: "old3", NotAfter: at.Add(24 * time.Hour)}, at)
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("renewal for the old node: %v, want ErrNotFound", err)
	}
	got := ts.mustNode(t, "w1")
	if got.UID != "uid-new" || got.CertSerial != "new1" || !got.CertNotAfter.Equal(renewed.CertNotAfter) || !got.EnrolledAt.Equal(renewed.EnrolledAt) {
		t.Fatalf("the new node's record changed: %+v", got)
	}
}

func TestRecordRenewalUpdatesCertificateOnly(t *testing.T) {
	ts := openTestStore(t)
	ts.addNode(t, "w1", "uid-1", "tok1")
	enrolled := t0.Add(time.Minute)
	if err := ts.ConsumeToken("tok1", Issued{Node: "w1", NodeUID: "uid-1", Serial: "a1", NotAfter: enrolled.Add(24 * time.Hour)}, enrolled); err != nil {
		t.Fatal(err)
	}
	renewedAt := enrolled.Add(16 * time.Hour)
	notAfter := renewedAt.Add(24 * time.Hour)
	if err := ts.RecordRenewal(Issued{Node: "w1", NodeUID: "uid-1", Serial: "b2", NotAfter: notAfter}, renewedAt); err != nil {
		t.Fatal(err)
	}
	n := ts.mustNode(t, "w1")
	if n.CertSerial != "b2" || !n.CertNotAfter.Equal(notAfter) || !n.EnrolledAt.Equal(enrolled) {
		t.Fatalf("node after renewal %+v (enrollment time must stay %v)", n, enrolled)
	}
	// A deleted node's renewal is ErrNotFound and creates no record.
	if err := ts.DeleteNode("w1"); err != nil {
		t.Fatal(err)
	}
	if err := ts.RecordRenewal(Issued{Node: "w1", NodeUID: "uid-1", Serial: "c3"}, renewedAt); !errors.Is(err, ErrNotFound) {
		t.Fatalf("renewal of a deleted node: %v, want ErrNotFound", err)
	}
	if _, err := ts.Node("w1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a renewal brought back a deleted node: %v", err)
	}
}

func TestSetRolesGivesAllOneNewRevision(t *testing.T) {
	ts := openTestStore(t)
	ts.addNode(t, "w1", "uid-1", "t1")
	ts.addNode(t, "w2", "uid-2", "t2")
	m := testNode("m1", "uid-m", v1.RoleMaster)
	if _, err := ts.CreateNode(m, testRole("m1", v1.RoleMaster), testToken("t3", m)); err != nil {
		t.Fatal(err)
	}
	ts.takeChanged()
	// Three creations took revisions 1..3.
	w1 := testRole("w1", v1.RoleWorker)
	w1.Cluster.VIP = "198.18.0.100"
	w2 := testRole("w2", v1.RoleWorker)
	w2.Cluster.VIP = "198.18.0.100"
	rev, err := ts.SetRoles([]v1.Role{w1, w2})
	if err != nil {
		t.Fatal(err)
	}
	if rev != 4 {
		t.Fatalf("revision %d, want 4", rev)
	}
	for _, name := range []string{"w1", "w2"} {
		r, err := ts.Role(name)
		if err != nil || r.Revision != 4 || r.Cluster.VIP != "198.18.0.100" {
			t.Fatalf("role %s: %+v, %v", name, r, err)
		}
	}
	if r, _ := ts.Role("m1"); r.Revision != 3 {
		t.Fatalf("an untouched node's role moved to revision %d", r.Revision)
	}
	if got := ts.takeChanged(); !slices.EqualFunc(got, [][]string{{"w1", "w2"}}, slices.Equal) {
		t.Fatalf("NodesChanged calls %v, want one for w1 and w2", got)
	}
	if rev, err := ts.SetRoles([]v1.Role{w1}); err != nil || rev != 5 {
		t.Fatalf("next SetRoles: revision %d, %v; want 5", rev, err)
	}

	// An unknown node or a changed role refuses the whole call: no role
	// changes, the revision does not move, nobody wakes.
	ts.takeChanged()
	w2.Cluster.VIP = "198.18.0.200"
	_, err = ts.SetRoles([]v1.Role{w2, testRole("ghost", v1.RoleWorker)})
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown node: %v, want ErrNotFound", err)
	}
	_, err = ts.SetRoles([]v1.Role{w2, testRole("w1", v1.RoleMaster)})
	var mismatch *RoleMismatchError
	if !errors.As(err, &mismatch) {
		t.Fatalf("changed role: %v, want a *RoleMismatchError", err)
	}
	if mismatch.Index != 1 || mismatch.Node != "w1" || mismatch.Want != v1.RoleWorker || mismatch.Got != v1.RoleMaster {
		t.Fatalf("mismatch %+v, want index 1, node w1, want worker, got master", mismatch)
	}
	if r, _ := ts.Role("w2"); r.Revision != 4 || r.Cluster.VIP != "198.18.0.100" {
		t.Fatalf("a refused SetRoles changed w2's role: %+v", r)
	}
	if r, _ := ts.Role("w1"); r.Revision != 5 || r.Role != v1.RoleWorker {
		t.Fatalf("a refused SetRoles changed w1's role: %+v", r)
	}
	if _, err := ts.Role("ghost"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a refused SetRoles stored a role for an unknown node: %v", err)
	}
	if got := ts.takeChanged(); len(got) != 0 {
		t.Fatalf("refused SetRoles woke %v", got)
	}
	if rev, err := ts.SetRoles([]v1.Role{w1}); err != nil || rev != 6 {
		t.Fatalf("SetRoles after refusals: revision %d, %v; want 6 (refusals take no revision)", rev, err)
	}
}

func TestDeleteNodeRemovesTokensRoleAndStatus(t *testing.T) {
	ts := openTestStore(t)
	w1, _ := ts.addNode(t, "w1", "uid-1", "used")
	ts.addNode(t, "w2", "uid-2", "other")
	if err := ts.ConsumeToken("used", Issued{Node: "w1", NodeUID: "uid-1", Serial: "a1"}, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := ts.ReplaceToken(testToken("unused", w1)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"w1", "w2"} {
		if err := ts.SetStatus(v1.Status{APIVersion: v1.APIVersion, Kind: "Status", NodeName: name, Phase: v1.PhaseReady}); err != nil {
			t.Fatal(err)
		}
	}
	ts.takeChanged()
	if err := ts.DeleteNode("w1"); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.Node("w1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("node after delete: %v", err)
	}
	for _, id := range []string{"used", "unused"} {
		if _, err := ts.Token(id); !errors.Is(err, ErrNotFound) {
			t.Fatalf("token %s after delete: %v", id, err)
		}
	}
	if _, err := ts.Role("w1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("role after delete: %v", err)
	}
	if _, err := ts.Status("w1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("status after delete: %v", err)
	}
	if got := ts.takeChanged(); !slices.EqualFunc(got, [][]string{{"w1"}}, slices.Equal) {
		t.Fatalf("NodesChanged calls %v, want [[w1]]: its watches must end", got)
	}
	// The other node is whole.
	ts.mustNode(t, "w2")
	ts.mustToken(t, "other")
	if _, err := ts.Role("w2"); err != nil {
		t.Fatalf("w2's role: %v", err)
	}
	if st, err := ts.Status("w2"); err != nil || st.Phase != v1.PhaseReady {
		t.Fatalf("w2's status: %+v, %v", st, err)
	}
	// Deleting again is ErrNotFound.
	if err := ts.DeleteNode("w1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
	// A node created again under the name starts clean.
	ts.addNode(t, "w1", "uid-1b", "fresh")
	if n := ts.mustNode(t, "w1"); n.UID != "uid-1b" || !n.EnrolledAt.IsZero() || n.CertSerial != "" {
		t.Fatalf("re-created node %+v", n)
	}
	if _, err := ts.Status("w1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the re-created node inherited a status: %v", err)
	}
}

func TestSetStatusNeedsNode(t *testing.T) {
	ts := openTestStore(t)
	ts.addNode(t, "w1", "uid-1", "t1")
	st := v1.Status{APIVersion: v1.APIVersion, Kind: "Status", NodeName: "ghost", Phase: v1.PhaseReady}
	if err := ts.SetStatus(st); !errors.Is(err, ErrNotFound) {
		t.Fatalf("status of an unknown node: %v, want ErrNotFound", err)
	}
	if _, err := ts.Status("ghost"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("status of an unknown node was stored: %v", err)
	}
	st.NodeName, st.ObservedRevision = "w1", 7
	if prev, err := ts.ReplaceStatus(st); err != nil || prev.Phase != "" {
		t.Fatalf("the first report replaced %+v, %v; want nothing", prev, err)
	}
	got, err := ts.Status("w1")
	if err != nil || got.ObservedRevision != 7 || got.Phase != v1.PhaseReady {
		t.Fatalf("status %+v, %v", got, err)
	}
	st.ObservedRevision, st.Phase = 8, v1.PhaseLeaving
	if prev, err := ts.ReplaceStatus(st); err != nil || prev.ObservedRevision != 7 || prev.Phase != v1.PhaseReady {
		t.Fatalf("the second report replaced %+v, %v; want the first", prev, err)
	}
	// A stored report this controller cannot read does not stop the
	// node from reporting.
	if err := ts.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketStatus).Put([]byte("w1"), []byte("{not json")) }); err != nil {
		t.Fatal(err)
	}
	if prev, err := ts.ReplaceStatus(st); err != nil || prev.Phase != "" {
		t.Fatalf("a report over an unreadable one: replaced %+v, %v; want nothing, stored", prev, err)
	}
	if got, err := ts.Status("w1"); err != nil || got.ObservedRevision != 8 {
		t.Fatalf("status after the unreadable one: %+v, %v", got, err)
	}
}

// A new operation deletes its cluster's finished operations beyond the
// newest KeepFinishedOperations; running ones and other clusters' stay.
func TestAddOperationKeepsTheNewestFinished(t *testing.T) {
	s := openTestStore(t)
	start := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	add := func(cluster string) string {
		t.Helper()
		op := &v1.Operation{Cluster: cluster, Kind: v1.OperationScale}
		if err := s.Update(func(tx *Tx) error { return tx.AddOperation(op) }); err != nil {
			t.Fatal(err)
		}
		return op.ID
	}
	finish := func(id string, at time.Time) {
		t.Helper()
		err := s.Update(func(tx *Tx) error {
			var op v1.Operation
			if err := tx.Get(Operations, id, &op); err != nil {
				return err
			}
			op.State, op.FinishedAt = v1.OperationSucceeded, at
			return tx.Put(Operations, id, op)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	running := add("a")
	other := add("b")
	finish(other, start)
	var first []string
	for i := range KeepFinishedOperations + 5 {
		id := add("a")
		finish(id, start.Add(time.Duration(i)*time.Minute))
		first = append(first, id)
	}
	last := add("a")
	err := s.View(func(tx *Tx) error {
		ops, err := ListJSON[v1.Operation](tx, Operations, "")
		if err != nil {
			return err
		}
		finished := map[string]bool{}
		for _, op := range ops {
			if op.Cluster == "a" && op.State == v1.OperationSucceeded {
				finished[op.ID] = true
			}
		}
		if len(finished) != KeepFinishedOperations {
			t.Errorf("cluster a keeps %d finished operations, want %d", len(finished), KeepFinishedOperations)
		}
		for i, id := range first {
			if kept := i >= 5; finished[id] != kept {
				t.Errorf("finished operation %d (of %d) kept %v, want %v", i, len(first), finished[id], kept)
			}
		}
		for _, id := range []string{running, other, last} {
			if !tx.Has(Operations, id) {
				t.Errorf("operation %s was deleted: running, or another cluster's", id)
			}
		}
		indexed, err := tx.ClusterOperations("a")
		if want := KeepFinishedOperations + 2; len(indexed) != want || err != nil {
			t.Errorf("cluster a's index reads %d operations (%v), want %d", len(indexed), err, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func addOperation(t *testing.T, s *Store, cluster string) string {
	t.Helper()
	op := &v1.Operation{Cluster: cluster, Kind: v1.OperationScale}
	if err := s.Update(func(tx *Tx) error { return tx.AddOperation(op) }); err != nil {
		t.Fatal(err)
	}
	return op.ID
}

func operationIDs(t *testing.T, tx *Tx, cluster string) []string {
	t.Helper()
	ops, err := tx.ClusterOperations(cluster)
	if err != nil {
		t.Fatalf("operations of %q: %v", cluster, err)
	}
	var ids []string
	for _, op := range ops {
		ids = append(ids, op.ID)
	}
	return ids
}

// A step reads its own cluster's operations through the index: another
// cluster's, even one that no longer decodes, is neither read nor in the
// way. AddOperation used to decode every operation in the store, those
// of every cluster ever deleted too, at each new one.
func TestClusterOperationsReadOnlyTheirCluster(t *testing.T) {
	s := openTestStore(t)
	a1 := addOperation(t, s.Store, "a")
	addOperation(t, s.Store, "a-b")
	addOperation(t, s.Store, "ab")
	image := addOperation(t, s.Store, "")
	damaged := addOperation(t, s.Store, "b")
	if err := s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(Operations)).Put([]byte(damaged), []byte("{not json"))
	}); err != nil {
		t.Fatal(err)
	}
	a2 := addOperation(t, s.Store, "a")
	err := s.View(func(tx *Tx) error {
		if got, want := operationIDs(t, tx, "a"), slices.Sorted(slices.Values([]string{a1, a2})); !slices.Equal(got, want) {
			t.Errorf("cluster a's operations %v, want %v", got, want)
		}
		if got := operationIDs(t, tx, ""); !slices.Equal(got, []string{image}) {
			t.Errorf("the images' operations %v, want [%s]", got, image)
		}
		if _, err := tx.ClusterOperations("b"); err == nil || !strings.Contains(err.Error(), damaged) {
			t.Errorf("cluster b's damaged operation read as %v, want an error naming %s", err, damaged)
		}
		if got, want := tx.OperationClusters(), []string{"", "a-b", "a", "ab", "b"}; !slices.Equal(got, want) {
			t.Errorf("clusters with operations %q, want %q", got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A store an older controller made has no operation index: opening it
// to write builds the index from the operations, leaving out one that
// does not decode (read by its ID, it says so); opened read-only, its
// operations are read without an index.
func TestOpenIndexesTheOperationsOfAnOlderStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	s, err := Open(path, Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Sorted(slices.Values([]string{addOperation(t, s, "a"), addOperation(t, s, "a")}))
	addOperation(t, s, "b")
	damaged := addOperation(t, s, "a")
	if err := s.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket([]byte(Operations)).Put([]byte(damaged), []byte("{not json")); err != nil {
			return err
		}
		return tx.DeleteBucket(bucketOperationIndex)
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	for _, opts := range []Options{{ReadOnly: true}, {}} {
		s, err := Open(path, opts)
		if err != nil {
			t.Fatal(err)
		}
		err = s.View(func(tx *Tx) error {
			if opts.ReadOnly {
				// Without the index every operation is decoded.
				if _, err := tx.ClusterOperations("a"); err == nil || !strings.Contains(err.Error(), damaged) {
					t.Errorf("read-only: the damaged operation read as %v", err)
				}
				return nil
			}
			if got := operationIDs(t, tx, "a"); !slices.Equal(got, want) {
				t.Errorf("cluster a's operations %v, want %v", got, want)
			}
			if err := tx.Get(Operations, damaged, &v1.Operation{}); err == nil {
				t.Errorf("the damaged operation %s reads without an error", damaged)
			}
			return nil
		})
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// A cluster's workflow recomputes every node's role at each step: only
// the roles that changed are written, under a new revision, and only
// their nodes' watchers wake; an invalid one refuses the whole call.
func TestPutRolesWritesOnlyTheChangedOnes(t *testing.T) {
	ts := openTestStore(t)
	ts.addNode(t, "w1", "uid-1", "t1")
	ts.addNode(t, "w2", "uid-2", "t2")
	m := testNode("m1", "uid-m", v1.RoleMaster)
	master := testRole("m1", v1.RoleMaster)
	master.PKI = &v1.ClusterPKI{} // decoded past, not read
	if _, err := ts.CreateNode(m, master, testToken("t3", m)); err != nil {
		t.Fatal(err)
	}
	put := func(roles ...v1.Role) (int64, error) {
		var rev int64
		err := ts.Update(func(tx *Tx) error {
			var err error
			rev, err = tx.PutRoles(roles)
			return err
		})
		return rev, err
	}
	revisionOf := func(name string) int64 {
		r, err := ts.Role(name)
		if err != nil {
			t.Fatal(err)
		}
		return r.Revision
	}
	w1, w2 := testRole("w1", v1.RoleWorker), testRole("w2", v1.RoleWorker)
	ts.takeChanged()
	before := []int64{revisionOf("w1"), revisionOf("w2"), revisionOf("m1")}
	if rev, err := put(w1, w2, master); err != nil || rev != 0 {
		t.Fatalf("the same roles again: revision %d, %v; want 0, nothing written", rev, err)
	}
	if after := []int64{revisionOf("w1"), revisionOf("w2"), revisionOf("m1")}; !slices.Equal(before, after) {
		t.Fatalf("revisions %v after putting the same roles, were %v", after, before)
	}
	if got := ts.takeChanged(); len(got) != 0 {
		t.Fatalf("the same roles woke %v", got)
	}

	w2.ProviderID = "vsphere://4211aaaa-0000-0000-0000-000000000002"
	rev, err := put(w1, w2, master)
	if err != nil || rev == 0 {
		t.Fatalf("one role changed: revision %d, %v", rev, err)
	}
	if r, _ := ts.Role("w2"); r.Revision != rev || r.ProviderID != w2.ProviderID {
		t.Fatalf("w2's role %+v, want revision %d with the provider ID", r, rev)
	}
	if revisionOf("w1") != before[0] || revisionOf("m1") != before[2] {
		t.Fatal("an unchanged role moved to the new revision")
	}
	if got := ts.takeChanged(); !slices.EqualFunc(got, [][]string{{"w2"}}, slices.Equal) {
		t.Fatalf("NodesChanged calls %v, want one for w2", got)
	}

	bad := testRole("w1", v1.RoleWorker)
	bad.APIVersion = "harmony.dev/v0"
	w2.ProviderID = ""
	if _, err := put(w2, bad); err == nil || !strings.Contains(err.Error(), "role of w1") || !strings.Contains(err.Error(), "apiVersion") {
		t.Fatalf("an invalid role: %v, want it refused by node and field", err)
	}
	if r, _ := ts.Role("w2"); r.Revision != rev || r.ProviderID == "" {
		t.Fatalf("a refused call changed w2's role: %+v", r)
	}
}

// Last finds the greatest key under a prefix, never one of a longer
// prefix's neighbours or past it.
func TestLastKeyUnderAPrefix(t *testing.T) {
	ts := openTestStore(t)
	keys := []string{"a-b/9", "a/1", "a/2", "a/2\xff", "a0/0", "b/1", "\xff\xff"}
	err := ts.Update(func(tx *Tx) error {
		for _, k := range keys {
			if err := tx.Put(Events, k, 1); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for prefix, want := range map[string]string{"a/": "a/2\xff", "a-b/": "a-b/9", "b/": "b/1", "c/": "", "\xff": "\xff\xff", "": "\xff\xff"} {
		var got string
		var ok bool
		if err := ts.View(func(tx *Tx) error { got, ok = tx.Last(Events, prefix); return nil }); err != nil {
			t.Fatal(err)
		}
		if got != want || ok != (want != "") {
			t.Errorf("Last(%q) = %q, %v; want %q", prefix, got, ok, want)
		}
	}
}
