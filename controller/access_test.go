package controller

import (
	"crypto/tls"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/ca"
)

// routeAccess is who may call a route, as the README's security model
// says: enrollment, the CA bundle and /healthz are open; a node reads its
// role, reports status and renews; /metrics takes a scraper or an admin;
// everything else is the admin API.
func routeAccess(pattern string) []string {
	switch pattern {
	case "GET " + v1.PathHealthz, "GET " + v1.PathCA, "POST " + v1.PathEnroll:
		return nil
	case "POST " + v1.PathRenew, "GET " + v1.PathNodeRole, "POST " + v1.PathNodeStatus:
		return []string{v1.OrgNodes}
	case "GET " + v1.PathMetrics:
		return []string{v1.OrgAdmins, v1.OrgScrapers}
	}
	return []string{v1.OrgAdmins}
}

// callerState is what is wrong, if anything, with a caller's certificate
// beyond its organization.
type callerState int

const (
	callerGood     callerState = iota
	callerNoCert               // presents no certificate
	callerOtherCA              // signed by a CA the controller never saw
	callerRevoked              // admin or scraper certificate revoked, or never recorded
	callerNodeGone             // node certificate of a deleted node
)

type caller struct {
	name   string
	client *http.Client
	org    string
	state  callerState
}

// accessAnswer is what a route must say to a caller: admitted means anything
// but 401 and 403 (the handler ran and refused the empty request, found
// nothing at path "x", or served).
type accessAnswer struct {
	admitted bool
	status   int
	code     string
}

func (c caller) expect(allowed []string) accessAnswer {
	if len(allowed) == 0 {
		return accessAnswer{admitted: true}
	}
	switch c.state {
	case callerNoCert:
		return accessAnswer{status: http.StatusUnauthorized, code: v1.CodeNoClientCert}
	case callerOtherCA:
		return accessAnswer{status: http.StatusUnauthorized, code: v1.CodeBadClientCert}
	}
	if !slices.Contains(allowed, c.org) {
		return accessAnswer{status: http.StatusForbidden, code: v1.CodeForbidden}
	}
	switch c.state {
	case callerRevoked:
		return accessAnswer{status: http.StatusUnauthorized, code: v1.CodeCertRevoked}
	case callerNodeGone:
		return accessAnswer{status: http.StatusForbidden, code: v1.CodeNodeGone}
	}
	return accessAnswer{admitted: true}
}

// chainCert turns an issued chain in PEM into a client certificate.
func chainCert(t *testing.T, chainPEM string, key any) tls.Certificate {
	t.Helper()
	certs, err := v1.ParseCertificatesPEM([]byte(chainPEM))
	if err != nil {
		t.Fatal(err)
	}
	cert := tls.Certificate{PrivateKey: key, Leaf: certs[0]}
	for _, c := range certs {
		cert.Certificate = append(cert.Certificate, c.Raw)
	}
	return cert
}

// scraperCert asks the admin API for a scraper certificate.
func (tc *testController) scraperCert(name string) tls.Certificate {
	tc.t.Helper()
	csr, key := makeCSR(tc.t, csrOptions{cn: name})
	r := doJSON(tc.t, tc.admin, "POST", tc.url+v1.PathScraperCert, v1.ScraperCertRequest{Name: name, CSR: csr})
	if r.status != http.StatusOK {
		tc.t.Fatalf("scraper certificate: %d %s", r.status, r.body)
	}
	var resp v1.CertificateResponse
	r.decode(tc.t, &resp)
	cert := chainCert(tc.t, resp.Certificate, key)
	if org := cert.Leaf.Subject.Organization; len(org) != 1 || org[0] != v1.OrgScrapers {
		tc.t.Fatalf("scraper certificate organization %v", org)
	}
	return cert
}

// unrecordedCert is signed by the controller's CA but never recorded in
// its store, as one issued before a restore would be.
func (tc *testController) unrecordedCert(org, name string) tls.Certificate {
	tc.t.Helper()
	_, key := makeCSR(tc.t, csrOptions{cn: name})
	leaf, err := tc.c.ca.Issue(ca.Leaf{CommonName: name, Organization: org, PublicKey: key.Public(), Lifetime: time.Hour}, tc.c.now())
	if err != nil {
		tc.t.Fatal(err)
	}
	return chainCert(tc.t, string(tc.c.ca.ChainPEM(leaf)), key)
}

// TestEveryRouteAdmitsExactlyItsOrganizations calls every registered
// route with every kind of caller and checks the authentication accessAnswer,
// which comes before the handler: 401 without a certificate or with one of
// another CA, 403 for a wrong organization, 401 for a revoked or
// unrecorded admin or scraper certificate, 403 node_gone for a deleted
// node, and neither 401 nor 403 for the callers the route is for.
func TestEveryRouteAdmitsExactlyItsOrganizations(t *testing.T) {
	tc := startController(t, t.TempDir())
	node := tc.enrolledNode("w1")
	gone := tc.enrolledNode("gone")
	if r := doJSON(t, tc.admin, "DELETE", tc.url+v1.PathNodes+"/gone", nil); r.status != http.StatusNoContent {
		t.Fatalf("delete node: %d %s", r.status, r.body)
	}
	scraper := tc.scraperCert("prometheus")
	revoked := tc.scraperCert("old-prometheus")
	if r := doJSON(t, tc.admin, "POST", tc.url+v1.PathCertificates+"/"+serialOf(revoked.Leaf)+"/revoke", nil); r.status != http.StatusOK {
		t.Fatalf("revoke scraper: %d %s", r.status, r.body)
	}
	callers := []caller{
		{"no certificate", tc.anonClient(), "", callerNoCert},
		{"node", tc.certClient(node), v1.OrgNodes, callerGood},
		{"scraper", tc.certClient(scraper), v1.OrgScrapers, callerGood},
		{"admin", tc.admin, v1.OrgAdmins, callerGood},
		{"deleted node", tc.certClient(gone), v1.OrgNodes, callerNodeGone},
		{"revoked scraper", tc.certClient(revoked), v1.OrgScrapers, callerRevoked},
		{"unrecorded admin", tc.certClient(tc.unrecordedCert(v1.OrgAdmins, "stray")), v1.OrgAdmins, callerRevoked},
		{"unrecorded scraper", tc.certClient(tc.unrecordedCert(v1.OrgScrapers, "stray")), v1.OrgScrapers, callerRevoked},
		{"other CA's node", tc.certClient(otherCACert(t, "w1", v1.OrgNodes)), v1.OrgNodes, callerOtherCA},
		{"other CA's scraper", tc.certClient(otherCACert(t, "prometheus", v1.OrgScrapers)), v1.OrgScrapers, callerOtherCA},
		{"other CA's admin", tc.certClient(otherCACert(t, "admin", v1.OrgAdmins)), v1.OrgAdmins, callerOtherCA},
	}

	doc, _ := loadOpenAPI(t)
	routes := append([]string{"GET " + v1.PathHealthz}, tc.c.patterns...)
	if len(routes) < 30 {
		t.Fatalf("only %d routes registered", len(routes))
	}
	kinds := map[string]int{}
	for _, pattern := range routes {
		allowed := routeAccess(pattern)
		kinds[strings.Join(allowed, ",")]++
		method, path, _ := strings.Cut(pattern, " ")
		// The API document states the same access.
		op, ok := doc.Paths[path][strings.ToLower(method)]
		if !ok {
			t.Errorf("%s is not in the API document", pattern)
		} else if documented := slices.Sorted(slices.Values(op.Organizations)); !slices.Equal(documented, slices.Sorted(slices.Values(allowed))) {
			t.Errorf("%s is documented for %v, want %v", pattern, op.Organizations, allowed)
		}
		url := tc.url + templateSegment.ReplaceAllString(path, "x")
		for _, c := range callers {
			got := doJSON(t, c.client, method, url, nil)
			want := c.expect(allowed)
			if want.admitted {
				if got.status == http.StatusUnauthorized || got.status == http.StatusForbidden {
					t.Errorf("%s by %s: %d %s (%s), want it admitted", pattern, c.name, got.status, got.err.Code, got.err.Message)
				}
				continue
			}
			if got.status != want.status || got.err.Code != want.code {
				t.Errorf("%s by %s: %d %s (%s), want %d %s", pattern, c.name, got.status, got.err.Code, got.err.Message, want.status, want.code)
			}
		}
	}
	// Every kind of route was tried.
	for _, k := range []string{"", v1.OrgNodes, v1.OrgAdmins, v1.OrgAdmins + "," + v1.OrgScrapers} {
		if kinds[k] == 0 {
			t.Errorf("no route with access %q", k)
		}
	}
	if kinds[""] != 3 || kinds[v1.OrgNodes] != 3 || kinds[v1.OrgAdmins+","+v1.OrgScrapers] != 1 {
		t.Errorf("routes by access %v: want 3 open, 3 for nodes, 1 for scrapers", kinds)
	}
	// The calls changed nothing they were refused: the nodes and the
	// scraper still work.
	if r := doJSON(t, tc.certClient(node), "GET", tc.url+v1.PathNodeRole, nil); r.status != http.StatusOK {
		t.Errorf("node after the calls: %d %s", r.status, r.body)
	}
	if r := doJSON(t, tc.certClient(scraper), "GET", tc.url+v1.PathMetrics, nil); r.status != http.StatusOK {
		t.Errorf("scraper after the calls: %d", r.status)
	}
	if r := doJSON(t, tc.admin, "GET", tc.url+v1.PathNodes+"/w1", nil); r.status != http.StatusOK {
		t.Errorf("node w1 after the calls: %d", r.status)
	}
}
