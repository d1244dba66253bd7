package controller

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

func TestEnrollIssuesShortLivedNodeCertificate(t *testing.T) {
	tc := startController(t, t.TempDir())
	b := tc.addNode("w1", v1.NodeSpec{IPs: []string{"198.18.0.11"}, DNSNames: []string{"w1.demo.example"}})
	if b.NodeName != "w1" || len(b.Controllers) != 1 || b.Controllers[0] != tc.url || b.CAPin != tc.c.CA().Pin() {
		t.Fatalf("bootstrap document %+v", b)
	}
	if err := b.Validate(); err != nil {
		t.Fatalf("bootstrap document does not validate: %v", err)
	}
	csr, key := makeCSR(t, csrOptions{cn: "w1", dnsNames: []string{"w1", "w1.demo.example"}, ips: []net.IP{net.ParseIP("198.18.0.11")}})
	r, cert := tc.enroll(b.Token, csr, key)
	if r.status != http.StatusOK {
		t.Fatalf("enroll: %d %s", r.status, r.body)
	}
	leaf := cert.Leaf
	if leaf.Subject.CommonName != "w1" || len(leaf.Subject.Organization) != 1 || leaf.Subject.Organization[0] != v1.OrgNodes {
		t.Fatalf("subject %v", leaf.Subject)
	}
	if life := leaf.NotAfter.Sub(time.Now()); life > DefaultCertLifetime || life < DefaultCertLifetime-time.Minute {
		t.Fatalf("lifetime %s, want about %s", life, DefaultCertLifetime)
	}
	hasEKU := map[x509.ExtKeyUsage]bool{}
	for _, u := range leaf.ExtKeyUsage {
		hasEKU[u] = true
	}
	if !hasEKU[x509.ExtKeyUsageClientAuth] || !hasEKU[x509.ExtKeyUsageServerAuth] {
		t.Fatalf("extended key usages %v, want client and server auth", leaf.ExtKeyUsage)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: tc.c.CA().Pool(), DNSName: "w1.demo.example"}); err != nil {
		t.Fatalf("issued certificate does not verify for its SAN: %v", err)
	}
	if got := testutil.ToFloat64(tc.c.metrics.enrollments.WithLabelValues("issued")); got != 1 {
		t.Fatalf("enrollments{issued} = %v, want 1", got)
	}
	var n v1.Node
	doJSON(t, tc.admin, "GET", tc.url+v1.PathNodes+"/w1", nil).decode(t, &n)
	if n.EnrolledAt.IsZero() || n.CertificateSerial != leaf.SerialNumber.Text(16) {
		t.Fatalf("node record after enrollment: %+v", n)
	}
}

func TestEnrollRefusesReplayedToken(t *testing.T) {
	tc := startController(t, t.TempDir())
	b := tc.addNode("w1", v1.NodeSpec{})
	csr, key := makeCSR(t, csrOptions{cn: "w1"})
	if r, _ := tc.enroll(b.Token, csr, key); r.status != http.StatusOK {
		t.Fatalf("first use: %d %s", r.status, r.body)
	}
	r, _ := tc.enroll(b.Token, csr, key)
	r.wantStatus(t, http.StatusUnauthorized, v1.CodeTokenUsed)
	if !strings.Contains(r.err.Message, "already used") {
		t.Fatalf("message %q does not say the token was used", r.err.Message)
	}
	tc.logContains(t, "enrollment refused", "reason=token_used", "node=w1")
	if got := testutil.ToFloat64(tc.c.metrics.enrollments.WithLabelValues(v1.CodeTokenUsed)); got != 1 {
		t.Fatalf("enrollments{token_used} = %v, want 1", got)
	}
}

func TestEnrollConcurrentUsesOfOneTokenIssueOneCertificate(t *testing.T) {
	tc := startController(t, t.TempDir())
	b := tc.addNode("w1", v1.NodeSpec{})
	const attempts = 8
	var wg sync.WaitGroup
	statuses := make(chan int, attempts)
	for range attempts {
		csr, key := makeCSR(t, csrOptions{cn: "w1"})
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, _ := tc.enroll(b.Token, csr, key)
			statuses <- r.status
		}()
	}
	wg.Wait()
	close(statuses)
	ok := 0
	for s := range statuses {
		if s == http.StatusOK {
			ok++
		} else if s != http.StatusUnauthorized {
			t.Errorf("unexpected status %d", s)
		}
	}
	if ok != 1 {
		t.Fatalf("%d of %d concurrent uses of one token succeeded, want exactly 1", ok, attempts)
	}
}

func TestEnrollRefusesExpiredToken(t *testing.T) {
	tc := startController(t, t.TempDir())
	b := tc.addNode("w1", v1.NodeSpec{TokenTTL: "10m"})
	tc.clock.Advance(11 * time.Minute)
	csr, key := makeCSR(t, csrOptions{cn: "w1"})
	r, _ := tc.enroll(b.Token, csr, key)
	r.wantStatus(t, http.StatusUnauthorized, v1.CodeTokenExpired)
	tc.logContains(t, "enrollment refused", "reason=token_expired")
}

func TestEnrollRefusesUnknownOrForgedToken(t *testing.T) {
	tc := startController(t, t.TempDir())
	b := tc.addNode("w1", v1.NodeSpec{})
	id, secret, _ := v1.SplitToken(b.Token)
	forged := id + "." + strings.Repeat("0", len(secret)) // right id, wrong secret
	unknown := strings.Repeat("a", 16) + "." + secret
	for _, tok := range []string{forged, unknown} {
		csr, key := makeCSR(t, csrOptions{cn: "w1"})
		r, _ := tc.enroll(tok, csr, key)
		r.wantStatus(t, http.StatusUnauthorized, v1.CodeTokenUnknown)
	}
	csr, key := makeCSR(t, csrOptions{cn: "w1"})
	r, _ := tc.enroll("not-a-token", csr, key)
	r.wantStatus(t, http.StatusBadRequest, v1.CodeTokenMalformed)
	// The forged attempts did not burn the real token.
	if r, _ := tc.enroll(b.Token, csr, key); r.status != http.StatusOK {
		t.Fatalf("real token after forgeries: %d %s", r.status, r.body)
	}
}

func TestEnrollRefusesCommonNameOfAnotherNode(t *testing.T) {
	tc := startController(t, t.TempDir())
	b := tc.addNode("w1", v1.NodeSpec{})
	tc.addNode("w2", v1.NodeSpec{})
	csr, key := makeCSR(t, csrOptions{cn: "w2"})
	r, _ := tc.enroll(b.Token, csr, key)
	r.wantStatus(t, http.StatusForbidden, v1.CodeCNMismatch)
	tc.logContains(t, "enrollment refused", "reason=cn_mismatch")
	// A refused CSR does not consume the token: the real node can still enroll.
	good, key := makeCSR(t, csrOptions{cn: "w1"})
	if r, _ := tc.enroll(b.Token, good, key); r.status != http.StatusOK {
		t.Fatalf("enroll after a refused CSR: %d %s", r.status, r.body)
	}
}

func TestEnrollRefusesSANsOutsideInventory(t *testing.T) {
	tc := startController(t, t.TempDir())
	b := tc.addNode("w1", v1.NodeSpec{IPs: []string{"198.18.0.11"}, DNSNames: []string{"w1.demo.example"}})
	u, _ := url.Parse("spiffe://demo/w1")
	cases := map[string]csrOptions{
		"foreign IP":       {cn: "w1", ips: []net.IP{net.ParseIP("198.18.0.12")}},
		"foreign DNS name": {cn: "w1", dnsNames: []string{"kubernetes.default"}},
		"other node name":  {cn: "w1", dnsNames: []string{"w2"}},
	}
	for name, opts := range cases {
		t.Run(name, func(t *testing.T) {
			csr, key := makeCSR(t, opts)
			r, _ := tc.enroll(b.Token, csr, key)
			r.wantStatus(t, http.StatusForbidden, v1.CodeSANNotInventory)
		})
	}
	t.Run("URI SAN", func(t *testing.T) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "w1"}, URIs: []*url.URL{u}}, key)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := tc.enroll(b.Token, v1.EncodeCSR(der), key)
		r.wantStatus(t, http.StatusForbidden, v1.CodeSANNotInventory)
	})
	tc.logContains(t, "enrollment refused", "reason=san_not_in_inventory")
}

func TestEnrollRefusesWeakKeys(t *testing.T) {
	tc := startController(t, t.TempDir())
	b := tc.addNode("w1", v1.NodeSpec{})
	rsaKey, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	p224, _ := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	for name, key := range map[string]crypto.Signer{"RSA 1024": rsaKey, "P-224": p224} {
		t.Run(name, func(t *testing.T) {
			csr, signer := makeCSR(t, csrOptions{cn: "w1", key: key})
			r, _ := tc.enroll(b.Token, csr, signer)
			r.wantStatus(t, http.StatusBadRequest, v1.CodeWeakKey)
		})
	}
}

func TestEnrollRefusesTamperedCSR(t *testing.T) {
	tc := startController(t, t.TempDir())
	b := tc.addNode("w1", v1.NodeSpec{})
	tc.addNode("w9", v1.NodeSpec{})
	csr, key := makeCSR(t, csrOptions{cn: "w1"})
	block, _ := pem.Decode([]byte(csr))
	// Rewrite the CN "w1" into "w9" after signing: still parses, no longer verifies.
	i := bytes.Index(block.Bytes, []byte("w1"))
	if i < 0 {
		t.Fatal("CN not found in CSR")
	}
	block.Bytes[i+1] = '9'
	tampered := string(pem.EncodeToMemory(block))
	r, _ := tc.enroll(b.Token, tampered, key)
	r.wantStatus(t, http.StatusBadRequest, v1.CodeCSRSignature)
	tc.logContains(t, "enrollment refused", "reason=csr_bad_signature")
}

func TestEnrollBoundsAndRejectsBadBodies(t *testing.T) {
	tc := startController(t, t.TempDir())
	b := tc.addNode("w1", v1.NodeSpec{})
	csr, _ := makeCSR(t, csrOptions{cn: "w1"})
	huge := []byte(`{"token":"` + strings.Repeat("a", 10<<20) + `"}`)
	cases := []struct {
		name   string
		body   []byte
		status int
		code   string
	}{
		{"oversized", huge, http.StatusRequestEntityTooLarge, v1.CodeBodyTooLarge},
		{"not JSON", []byte("\x00\xff garbage"), http.StatusBadRequest, v1.CodeBadRequest},
		{"truncated", []byte(`{"token":"`), http.StatusBadRequest, v1.CodeBadRequest},
		{"empty", nil, http.StatusBadRequest, v1.CodeBadRequest},
		{"unknown field", []byte(`{"token":"x","csr":"y","admin":true}`), http.StatusBadRequest, v1.CodeBadRequest},
		{"CSR not PEM", mustJSON(t, v1.EnrollRequest{Token: b.Token, CSR: "hello"}), http.StatusBadRequest, v1.CodeCSRInvalid},
		{"CSR bad DER", mustJSON(t, v1.EnrollRequest{Token: b.Token, CSR: "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"}), http.StatusBadRequest, v1.CodeCSRInvalid},
		{"two CSRs", mustJSON(t, v1.EnrollRequest{Token: b.Token, CSR: csr + csr}), http.StatusBadRequest, v1.CodeCSRInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := doJSON(t, tc.anonClient(), "POST", tc.url+v1.PathEnroll, c.body)
			r.wantStatus(t, c.status, c.code)
		})
	}
	// The same bounds hold on the admin API.
	r := doJSON(t, tc.admin, "POST", tc.url+v1.PathNodes, bytes.Repeat([]byte(" "), 2<<20))
	r.wantStatus(t, http.StatusRequestEntityTooLarge, v1.CodeBodyTooLarge)
	// And the controller is still serving.
	if r := doJSON(t, tc.anonClient(), "GET", tc.url+v1.PathHealthz, nil); r.status != http.StatusOK {
		t.Fatalf("healthz after bad bodies: %d", r.status)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestRenewRotatesKeyAndIsRefusedForDeletedNode(t *testing.T) {
	tc := startController(t, t.TempDir())
	cert := tc.enrolledNode("w1")
	client := tc.certClient(cert)
	csr, key := makeCSR(t, csrOptions{cn: "w1"})
	r := doJSON(t, client, "POST", tc.url+v1.PathRenew, v1.RenewRequest{CSR: csr})
	if r.status != http.StatusOK {
		t.Fatalf("renew: %d %s", r.status, r.body)
	}
	var resp v1.CertificateResponse
	r.decode(t, &resp)
	certs, _ := v1.ParseCertificatesPEM([]byte(resp.Certificate))
	if !certs[0].PublicKey.(*ecdsa.PublicKey).Equal(key.Public()) || certs[0].SerialNumber.Cmp(cert.Leaf.SerialNumber) == 0 {
		t.Fatal("renewal did not issue a new certificate for the new key")
	}
	if got := testutil.ToFloat64(tc.c.metrics.renewals.WithLabelValues("issued")); got != 1 {
		t.Fatalf("renewals{issued} = %v", got)
	}
	// Renewal cannot change the node's name.
	other, _ := makeCSR(t, csrOptions{cn: "w2"})
	doJSON(t, client, "POST", tc.url+v1.PathRenew, v1.RenewRequest{CSR: other}).wantStatus(t, http.StatusForbidden, v1.CodeCNMismatch)

	if r := doJSON(t, tc.admin, "DELETE", tc.url+v1.PathNodes+"/w1", nil); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	csr, _ = makeCSR(t, csrOptions{cn: "w1"})
	doJSON(t, tc.certClient(cert), "POST", tc.url+v1.PathRenew, v1.RenewRequest{CSR: csr}).wantStatus(t, http.StatusForbidden, v1.CodeNodeGone)

	// A new node of the same name is a different node: the old certificate
	// still grants nothing.
	tc.addNode("w1", v1.NodeSpec{})
	doJSON(t, tc.certClient(cert), "GET", tc.url+v1.PathNodeRole, nil).wantStatus(t, http.StatusForbidden, v1.CodeNodeGone)
}

func TestNodeEndpointsRequireClientCertificate(t *testing.T) {
	tc := startController(t, t.TempDir())
	tc.enrolledNode("w1")
	for _, ep := range []struct{ method, path string }{
		{"GET", v1.PathNodeRole}, {"POST", v1.PathNodeStatus}, {"POST", v1.PathRenew},
	} {
		doJSON(t, tc.anonClient(), ep.method, tc.url+ep.path, []byte("{}")).wantStatus(t, http.StatusUnauthorized, v1.CodeNoClientCert)
	}
	tc.logContains(t, "request refused", "reason=client_certificate_required")
}

func TestNodeReadsOnlyItsOwnRole(t *testing.T) {
	tc := startController(t, t.TempDir())
	certA := tc.enrolledNode("node-a")
	tc.enrolledNode("node-b")
	client := tc.certClient(certA)
	// Whatever the URL says, the certificate decides.
	for _, u := range []string{v1.PathNodeRole + "?node=node-b", v1.PathNodeRole + "?name=node-b&after=0"} {
		r := doJSON(t, client, "GET", tc.url+u, nil)
		var role v1.Role
		r.decode(t, &role)
		if role.NodeName != "node-a" {
			t.Fatalf("%s returned the role of %q", u, role.NodeName)
		}
	}
	doJSON(t, client, "GET", tc.url+v1.PathNodes+"/node-b/role", nil).wantStatus(t, http.StatusForbidden, v1.CodeForbidden)
	// A status report cannot speak for another node either.
	st := v1.Status{APIVersion: v1.APIVersion, Kind: "Status", NodeName: "node-b", Phase: v1.PhaseReady}
	doJSON(t, client, "POST", tc.url+v1.PathNodeStatus, st).wantStatus(t, http.StatusForbidden, v1.CodeForbidden)
}

// otherCA makes a certificate that claims to be a node (or admin) but was
// signed by a CA the controller never saw.
func otherCACert(t *testing.T, cn, org string) tls.Certificate {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "Harmony CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, _ := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: cn, Organization: []string{org}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, leafTmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der, caDER}, PrivateKey: key}
}

func TestCertificateFromAnotherCAIsRefused(t *testing.T) {
	tc := startController(t, t.TempDir())
	tc.enrolledNode("w1")
	nodeImpostor := tc.certClient(otherCACert(t, "w1", v1.OrgNodes))
	doJSON(t, nodeImpostor, "GET", tc.url+v1.PathNodeRole, nil).wantStatus(t, http.StatusUnauthorized, v1.CodeBadClientCert)
	adminImpostor := tc.certClient(otherCACert(t, "admin", v1.OrgAdmins))
	doJSON(t, adminImpostor, "GET", tc.url+v1.PathNodes, nil).wantStatus(t, http.StatusUnauthorized, v1.CodeBadClientCert)
	tc.logContains(t, "request refused", "reason=client_certificate_invalid")
}

func TestAdminAPIRefusesEveryoneButAdmins(t *testing.T) {
	tc := startController(t, t.TempDir())
	node := tc.certClient(tc.enrolledNode("w1"))
	admin := []struct{ method, path string }{
		{"GET", v1.PathNodes}, {"POST", v1.PathNodes}, {"GET", v1.PathNodes + "/w1"},
		{"DELETE", v1.PathNodes + "/w1"}, {"POST", v1.PathNodes + "/w1/token"},
		{"GET", v1.PathNodes + "/w1/role"}, {"PUT", v1.PathNodes + "/w1/role"},
		{"PUT", v1.PathRoles}, {"POST", v1.PathScraperCert},
	}
	for _, ep := range admin {
		doJSON(t, tc.anonClient(), ep.method, tc.url+ep.path, []byte("{}")).wantStatus(t, http.StatusUnauthorized, v1.CodeNoClientCert)
		doJSON(t, node, ep.method, tc.url+ep.path, []byte("{}")).wantStatus(t, http.StatusForbidden, v1.CodeForbidden)
	}
	// The node record survived all of that.
	if r := doJSON(t, tc.admin, "GET", tc.url+v1.PathNodes+"/w1", nil); r.status != http.StatusOK {
		t.Fatalf("node after refused deletes: %d", r.status)
	}
}

func TestMetricsNeedScraperOrAdminCertificate(t *testing.T) {
	tc := startController(t, t.TempDir())
	node := tc.certClient(tc.enrolledNode("w1"))
	doJSON(t, tc.anonClient(), "GET", tc.url+v1.PathMetrics, nil).wantStatus(t, http.StatusUnauthorized, v1.CodeNoClientCert)
	doJSON(t, node, "GET", tc.url+v1.PathMetrics, nil).wantStatus(t, http.StatusForbidden, v1.CodeForbidden)

	csr, key := makeCSR(t, csrOptions{cn: "prometheus"})
	r := doJSON(t, tc.admin, "POST", tc.url+v1.PathScraperCert, v1.ScraperCertRequest{Name: "prometheus", CSR: csr})
	if r.status != http.StatusOK {
		t.Fatalf("scraper cert: %d %s", r.status, r.body)
	}
	var resp v1.CertificateResponse
	r.decode(t, &resp)
	certs, _ := v1.ParseCertificatesPEM([]byte(resp.Certificate))
	if certs[0].Subject.Organization[0] != v1.OrgScrapers {
		t.Fatalf("scraper certificate organization %v", certs[0].Subject.Organization)
	}
	scraper := tc.certClient(tls.Certificate{Certificate: [][]byte{certs[0].Raw}, PrivateKey: key})
	m := doJSON(t, scraper, "GET", tc.url+v1.PathMetrics, nil)
	for _, want := range []string{"harmony_controller_enrollments_total{result=\"issued\"} 1", "harmony_controller_role_watches_active", "harmony_controller_http_request_duration_seconds_bucket", "harmony_controller_renewals_total", "harmony_controller_build_info"} {
		if !strings.Contains(string(m.body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// A scraper certificate is not an admin credential.
	doJSON(t, scraper, "GET", tc.url+v1.PathNodes, nil).wantStatus(t, http.StatusForbidden, v1.CodeForbidden)
}
