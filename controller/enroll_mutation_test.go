package controller

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/store"
)

// storedToken reads a bootstrap's token record from the controller's store.
func (tc *testController) storedToken(b v1.Bootstrap) store.Token {
	tc.t.Helper()
	id, _, err := v1.SplitToken(b.Token)
	if err != nil {
		tc.t.Fatal(err)
	}
	tok, err := tc.c.store.Token(id)
	if err != nil {
		tc.t.Fatalf("token %s: %v", id, err)
	}
	return tok
}

// TestEnrollReplayIsRefusedBeforeAnyCertificateIsIssued: the handler
// itself refuses a used token, before it looks at the CSR or issues a
// certificate, and says when the token was used. (The store's check in
// ConsumeToken is the second line, for concurrent uses; it knows no time
// and runs only after a certificate was issued.)
func TestEnrollReplayIsRefusedBeforeAnyCertificateIsIssued(t *testing.T) {
	tc := startController(t, t.TempDir())
	b := tc.addNode("w1", v1.NodeSpec{})
	tc.addNode("w2", v1.NodeSpec{})
	csr, key := makeCSR(t, csrOptions{cn: "w1"})
	r, cert := tc.enroll(b.Token, csr, key)
	if r.status != http.StatusOK {
		t.Fatalf("first use: %d %s", r.status, r.body)
	}
	tok := tc.storedToken(b)
	if tok.UsedAt.IsZero() {
		t.Fatal("the token is not marked used after enrollment")
	}
	usedAt := tok.UsedAt.UTC().Format(timeFormat)

	// A replay with a good CSR: the answer names the time of the first use.
	csr2, key2 := makeCSR(t, csrOptions{cn: "w1"})
	r, _ = tc.enroll(b.Token, csr2, key2)
	r.wantStatus(t, http.StatusUnauthorized, v1.CodeTokenUsed)
	if !strings.Contains(r.err.Message, "already used at "+usedAt) {
		t.Fatalf("replay message %q does not say the token was used at %s", r.err.Message, usedAt)
	}
	// A replay with a CSR for another node: still token_used, the CSR is
	// not even looked at (a used token must not probe the CSR rules).
	other, otherKey := makeCSR(t, csrOptions{cn: "w2"})
	r, _ = tc.enroll(b.Token, other, otherKey)
	r.wantStatus(t, http.StatusUnauthorized, v1.CodeTokenUsed)

	if got := testutil.ToFloat64(tc.c.metrics.enrollments.WithLabelValues(v1.CodeTokenUsed)); got != 2 {
		t.Fatalf("enrollments{token_used} = %v, want 2", got)
	}
	if got := testutil.ToFloat64(tc.c.metrics.enrollments.WithLabelValues(v1.CodeCNMismatch)); got != 0 {
		t.Fatalf("enrollments{cn_mismatch} = %v, want 0: a used token's CSR was checked", got)
	}
	if got := testutil.ToFloat64(tc.c.metrics.enrollments.WithLabelValues("issued")); got != 1 {
		t.Fatalf("enrollments{issued} = %v, want 1", got)
	}
	// The node keeps its first certificate and enrollment time.
	n, err := tc.c.store.Node("w1")
	if err != nil {
		t.Fatal(err)
	}
	if n.CertSerial != serialOf(cert.Leaf) || !n.EnrolledAt.Equal(tok.UsedAt) {
		t.Fatalf("node after replays: serial %s enrolled %v, want %s and %v", n.CertSerial, n.EnrolledAt, serialOf(cert.Leaf), tok.UsedAt)
	}
	if got := tc.storedToken(b); !got.UsedAt.Equal(tok.UsedAt) {
		t.Fatalf("a replay moved the token's use from %v to %v", tok.UsedAt, got.UsedAt)
	}
	tc.logContains(t, "enrollment refused", "reason=token_used", "node=w1", "already used at "+usedAt)
}

// TestEnrollExpiredTokenIsRefusedBeforeAnyCertificateIsIssued: the
// handler refuses an expired token itself, saying when it expired, before
// the CSR is checked; the token stays unused and the node unenrolled.
func TestEnrollExpiredTokenIsRefusedBeforeAnyCertificateIsIssued(t *testing.T) {
	tc := startController(t, t.TempDir())
	b := tc.addNode("w1", v1.NodeSpec{TokenTTL: "10m"})
	tc.addNode("w2", v1.NodeSpec{})
	tok := tc.storedToken(b)
	expiresAt := tok.ExpiresAt.UTC().Format(timeFormat)

	tc.clock.Advance(11 * time.Minute)
	csr, key := makeCSR(t, csrOptions{cn: "w1"})
	r, _ := tc.enroll(b.Token, csr, key)
	r.wantStatus(t, http.StatusUnauthorized, v1.CodeTokenExpired)
	if !strings.Contains(r.err.Message, "expired at "+expiresAt) {
		t.Fatalf("message %q does not say the token expired at %s", r.err.Message, expiresAt)
	}
	other, otherKey := makeCSR(t, csrOptions{cn: "w2"})
	r, _ = tc.enroll(b.Token, other, otherKey)
	r.wantStatus(t, http.StatusUnauthorized, v1.CodeTokenExpired)

	if got := testutil.ToFloat64(tc.c.metrics.enrollments.WithLabelValues(v1.CodeTokenExpired)); got != 2 {
		t.Fatalf("enrollments{token_expired} = %v, want 2", got)
	}
	if got := testutil.ToFloat64(tc.c.metrics.enrollments.WithLabelValues(v1.CodeCNMismatch)); got != 0 {
		t.Fatalf("enrollments{cn_mismatch} = %v, want 0: an expired token's CSR was checked", got)
	}
	if got := tc.storedToken(b); !got.UsedAt.IsZero() {
		t.Fatalf("an expired token was marked used: %+v", got)
	}
	n, err := tc.c.store.Node("w1")
	if err != nil {
		t.Fatal(err)
	}
	if !n.EnrolledAt.IsZero() || n.CertSerial != "" {
		t.Fatalf("an expired token enrolled the node: %+v", n)
	}
	tc.logContains(t, "enrollment refused", "reason=token_expired", "expired at "+expiresAt)
}

// renewRequest is a renewal request as the route would pass it on.
func renewRequest(t *testing.T, cn string) *http.Request {
	t.Helper()
	csr, _ := makeCSR(t, csrOptions{cn: cn})
	return httptest.NewRequest("POST", v1.PathRenew, bytes.NewReader(mustJSON(t, v1.RenewRequest{CSR: csr})))
}

// TestRenewOfNodeDeletedAfterAuthentication: a node deleted between the
// certificate check and the renewal gets node_gone, and nothing is
// recorded. authenticate() catches the usual case, so the handler is
// called directly, as the route would after authenticating.
func TestRenewOfNodeDeletedAfterAuthentication(t *testing.T) {
	tc := startController(t, t.TempDir())
	cert := tc.enrolledNode("w1")
	who := principal{kind: v1.OrgNodes, name: "w1", uid: cert.Leaf.Subject.SerialNumber, serial: serialOf(cert.Leaf)}
	if who.uid == "" {
		t.Fatal("node certificate carries no UID")
	}
	// The principal is what authenticate makes of this certificate: with
	// the node there, the same call renews.
	if resp, e := tc.c.renew(renewRequest(t, "w1"), who); e != nil || resp == nil {
		t.Fatalf("renewal before the delete: %v", e)
	}
	if r := doJSON(t, tc.admin, "DELETE", tc.url+v1.PathNodes+"/w1", nil); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}

	before := testutil.ToFloat64(tc.c.metrics.renewals.WithLabelValues("issued"))
	e := tc.c.handleRenew(httptest.NewRecorder(), renewRequest(t, "w1"), who)
	if e == nil {
		t.Fatal("a deleted node renewed its certificate")
	}
	if e.status != http.StatusForbidden || e.code != v1.CodeNodeGone {
		t.Fatalf("renewal of a deleted node: %d %s (%s), want 403 %s", e.status, e.code, e.message, v1.CodeNodeGone)
	}
	if got := testutil.ToFloat64(tc.c.metrics.renewals.WithLabelValues(v1.CodeNodeGone)); got != 1 {
		t.Fatalf("renewals{node_gone} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(tc.c.metrics.renewals.WithLabelValues("issued")); got != before {
		t.Fatalf("renewals{issued} went from %v to %v", before, got)
	}
	if _, err := tc.c.store.Node("w1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("node record after a refused renewal: %v", err)
	}
	tc.logContains(t, "renewal refused", "reason=node_gone", "node=w1")
}

// TestRenewOfNodeRecreatedAfterAuthentication: a node deleted and created
// again under its name between the certificate check and the renewal: the
// old node's certificate must not renew into the new node's, and the new
// node's record must not change.
func TestRenewOfNodeRecreatedAfterAuthentication(t *testing.T) {
	tc := startController(t, t.TempDir())
	cert := tc.enrolledNode("w1")
	who := principal{kind: v1.OrgNodes, name: "w1", uid: cert.Leaf.Subject.SerialNumber, serial: serialOf(cert.Leaf)}
	if r := doJSON(t, tc.admin, "DELETE", tc.url+v1.PathNodes+"/w1", nil); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	tc.addNode("w1", v1.NodeSpec{})
	fresh, err := tc.c.store.Node("w1")
	if err != nil {
		t.Fatal(err)
	}
	if fresh.UID == who.uid {
		t.Fatal("the re-created node has the old UID")
	}
	resp, e := tc.c.renew(renewRequest(t, "w1"), who)
	if e == nil {
		t.Fatalf("the old node's certificate renewed for the new node (%d bytes of chain)", len(resp.Certificate))
	}
	if e.status != http.StatusForbidden || e.code != v1.CodeNodeGone {
		t.Fatalf("renewal for a re-created node: %d %s (%s), want 403 %s", e.status, e.code, e.message, v1.CodeNodeGone)
	}
	n, err := tc.c.store.Node("w1")
	if err != nil {
		t.Fatal(err)
	}
	if n.UID != fresh.UID || n.CertSerial != "" || !n.CertNotAfter.IsZero() || !n.EnrolledAt.IsZero() {
		t.Fatalf("the new node's record changed: %+v", n)
	}
}
