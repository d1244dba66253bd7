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
	"github.com/harmonykaas/harmony/controller/store"
)

// routeAccess is each route's permission, as the README's security model
// says: enrollment, the CA bundle, /healthz and the session routes are
// open; a node reads its role, reports status and renews; /metrics and
// the agents' metrics targets take a scraper or an admin; a user sees the
// cluster list, the API document and themselves, and a cluster's routes
// by their grant on it; renewing an admin certificate takes that
// certificate; everything else is the admins'.
func routeAccess(pattern string) string {
	switch pattern {
	case "GET " + v1.PathHealthz, "GET " + v1.PathCA, "POST " + v1.PathEnroll,
		"POST " + v1.PathSetup, "POST " + v1.PathLogin, "POST " + v1.PathRefresh, "POST " + v1.PathLogout:
		return "public"
	case "POST " + v1.PathRenew, "GET " + v1.PathNodeRole, "POST " + v1.PathNodeStatus,
		"GET " + v1.PathNodeEtcdSnapshots, "PUT " + v1.PathNodeEtcdSnapshots + "/{takenAt}", "GET " + v1.PathNodeEtcdSnapshots + "/{takenAt}":
		return "node"
	case "GET " + v1.PathMetrics, "GET " + v1.PathMetricsTargets:
		return "metrics"
	case "POST " + v1.PathAdminCert:
		return "admin-certificate"
	case "GET " + v1.PathClusters, "GET " + v1.PathOpenAPI, "GET " + v1.PathWhoAmI:
		return "signed-in"
	case "GET " + v1.PathClusters + "/{name}", "GET " + v1.PathClusters + "/{name}/grants", "GET " + v1.PathOperations + "/{id}",
		"POST " + v1.PathClusters + "/{name}/credential", "GET " + v1.PathClusters + "/{name}/kubeconfig":
		return "cluster:view"
	case "POST " + v1.PathClusters + "/{name}/scale", "POST " + v1.PathClusters + "/{name}/retry", "POST " + v1.PathClusters + "/{name}/upgrade", "POST " + v1.PathClusters + "/{name}/restore", "POST " + v1.PathClusters + "/{name}/etcd-snapshot",
		"DELETE " + v1.PathClusters + "/{name}/nodes/{node}", "POST " + v1.PathClusters + "/{name}/nodes/{node}/replace", "POST " + v1.PathClusters + "/{name}/kubeconfig",
		"POST " + v1.PathClusters + "/{name}/grants", "DELETE " + v1.PathClusters + "/{name}/grants/{kind}/{subject}",
		"POST " + v1.PathClusters + "/{name}/revoke-sessions":
		return "cluster:admin"
	}
	return "admin"
}

// callerState is what is wrong, if anything, with a caller's credential
// beyond what it is.
type callerState int

const (
	callerGood     callerState = iota
	callerNoCert               // presents no credential
	callerOtherCA              // signed by a CA the controller never saw
	callerRevoked              // admin or scraper certificate revoked, or never recorded
	callerNodeGone             // node certificate of a deleted node
	callerBadToken             // a bearer token that is no session's
)

type caller struct {
	name   string
	client *http.Client
	// kind is a certificate's organization, or kindUser.
	kind  string
	state callerState
	// A user's role, and their grant on cluster "x".
	role  v1.UserRole
	grant v1.GrantRole
}

// accessAnswer is what a route must say to a caller: admitted means anything
// but 401 and 403 (the handler ran and refused the empty request, found
// nothing at path "x", or served).
type accessAnswer struct {
	admitted bool
	status   int
	code     string
}

func (c caller) expect(pattern, perm string) accessAnswer {
	if perm == "public" {
		return accessAnswer{admitted: true}
	}
	switch c.state {
	case callerNoCert:
		return accessAnswer{status: http.StatusUnauthorized, code: v1.CodeNoClientCert}
	case callerOtherCA:
		return accessAnswer{status: http.StatusUnauthorized, code: v1.CodeBadClientCert}
	case callerBadToken:
		return accessAnswer{status: http.StatusUnauthorized, code: v1.CodeSessionInvalid}
	case callerRevoked:
		return accessAnswer{status: http.StatusUnauthorized, code: v1.CodeCertRevoked}
	case callerNodeGone:
		return accessAnswer{status: http.StatusForbidden, code: v1.CodeNodeGone}
	}
	forbidden := accessAnswer{status: http.StatusForbidden, code: v1.CodeForbidden}
	admin := c.kind == v1.OrgAdmins || c.kind == kindUser && c.role == v1.UserRoleAdmin
	switch perm {
	case "node":
		if c.kind == v1.OrgNodes {
			return accessAnswer{admitted: true}
		}
		return forbidden
	case "metrics":
		if admin || c.kind == v1.OrgScrapers {
			return accessAnswer{admitted: true}
		}
		return forbidden
	case "admin-certificate":
		if c.kind == v1.OrgAdmins {
			return accessAnswer{admitted: true}
		}
		return forbidden
	}
	if c.kind != v1.OrgAdmins && c.kind != kindUser {
		return forbidden
	}
	switch {
	case admin:
		return accessAnswer{admitted: true}
	case perm == "admin":
		return forbidden
	case perm == "signed-in":
		return accessAnswer{admitted: true}
	case strings.HasPrefix(pattern, "GET "+v1.PathOperations):
		// Operation "x" does not exist, so it belongs to no cluster the
		// user may see.
		return accessAnswer{status: http.StatusNotFound, code: v1.CodeNotFound}
	case c.grant == "":
		return accessAnswer{status: http.StatusNotFound, code: v1.CodeNotFound}
	case perm == "cluster:admin" && c.grant != v1.GrantAdmin:
		return forbidden
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

// TestEveryRouteAdmitsExactlyItsCallers calls every registered route with
// every kind of caller and checks the answer of the permission check,
// which comes before the handler: 401 without a credential, with a
// certificate of another CA or a token that is no session's; 401 for a
// revoked or unrecorded admin or scraper certificate; 403 node_gone for a
// deleted node; 403 for a caller the route is not for; 404 for a user on
// a cluster not granted to them; and neither 401 nor 403 for the callers
// the route is for.
func TestEveryRouteAdmitsExactlyItsCallers(t *testing.T) {
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
	// Cluster "x" is the path value every route is called with; users
	// hold grants on it. It is a bare record: the handlers may fail on
	// it, but only after the permission check.
	tc.putClusterRecord("x")
	users := map[string]*http.Client{}
	for _, u := range []struct {
		name  string
		role  v1.UserRole
		grant v1.GrantRole
	}{{"root", v1.UserRoleAdmin, ""}, {"viewer", v1.UserRoleUser, v1.GrantView}, {"owner", v1.UserRoleUser, v1.GrantAdmin}, {"stranger", v1.UserRoleUser, ""}} {
		users[u.name] = tc.userClient(u.name, u.role)
		if u.grant != "" {
			if r := doJSON(t, tc.admin, "POST", tc.url+v1.PathClusters+"/x/grants", v1.GrantRequest{User: u.name, Role: u.grant}); r.status != http.StatusCreated {
				t.Fatalf("grant %s: %d %s", u.name, r.status, r.body)
			}
		}
	}
	callers := []caller{
		{name: "nobody", client: tc.anonClient(), state: callerNoCert},
		{name: "a token of no session", client: bearerClient(tc.anonClient(), "eyJhbGciOiJFUzI1NiJ9.e30.c2ln"), state: callerBadToken},
		{name: "node", client: tc.certClient(node), kind: v1.OrgNodes},
		{name: "scraper", client: tc.certClient(scraper), kind: v1.OrgScrapers},
		{name: "admin certificate", client: tc.admin, kind: v1.OrgAdmins},
		{name: "admin user", client: users["root"], kind: kindUser, role: v1.UserRoleAdmin},
		{name: "user with a view grant", client: users["viewer"], kind: kindUser, role: v1.UserRoleUser, grant: v1.GrantView},
		{name: "user with an admin grant", client: users["owner"], kind: kindUser, role: v1.UserRoleUser, grant: v1.GrantAdmin},
		{name: "user without a grant", client: users["stranger"], kind: kindUser, role: v1.UserRoleUser},
		{name: "deleted node", client: tc.certClient(gone), kind: v1.OrgNodes, state: callerNodeGone},
		{name: "revoked scraper", client: tc.certClient(revoked), kind: v1.OrgScrapers, state: callerRevoked},
		{name: "unrecorded admin", client: tc.certClient(tc.unrecordedCert(v1.OrgAdmins, "stray")), kind: v1.OrgAdmins, state: callerRevoked},
		{name: "unrecorded scraper", client: tc.certClient(tc.unrecordedCert(v1.OrgScrapers, "stray")), kind: v1.OrgScrapers, state: callerRevoked},
		{name: "other CA's node", client: tc.certClient(otherCACert(t, "w1", v1.OrgNodes)), kind: v1.OrgNodes, state: callerOtherCA},
		{name: "other CA's scraper", client: tc.certClient(otherCACert(t, "prometheus", v1.OrgScrapers)), kind: v1.OrgScrapers, state: callerOtherCA},
		{name: "other CA's admin", client: tc.certClient(otherCACert(t, "admin", v1.OrgAdmins)), kind: v1.OrgAdmins, state: callerOtherCA},
	}

	doc, _ := loadOpenAPI(t)
	routes := slices.Clone(tc.c.patterns)
	// Deleting cluster x goes last: the other routes need it.
	deleteCluster := "DELETE " + v1.PathClusters + "/{name}"
	routes = append(slices.DeleteFunc(routes, func(p string) bool { return p == deleteCluster }), deleteCluster)
	if len(routes) < 45 {
		t.Fatalf("only %d routes registered", len(routes))
	}
	kinds := map[string]int{}
	for _, pattern := range routes {
		perm := routeAccess(pattern)
		kinds[perm]++
		method, path, _ := strings.Cut(pattern, " ")
		// The API document states the same permission.
		if op, ok := doc.Paths[path][strings.ToLower(method)]; !ok {
			t.Errorf("%s is not in the API document", pattern)
		} else if op.Permission != perm {
			t.Errorf("%s is documented as %q, want %q", pattern, op.Permission, perm)
		}
		url := tc.url + templateSegment.ReplaceAllString(path, "x")
		for _, c := range callers {
			got := doJSON(t, c.client, method, url, nil)
			want := c.expect(pattern, perm)
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
	for _, perm := range permissionNames {
		if kinds[perm] == 0 {
			t.Errorf("no route with permission %q", perm)
		}
	}
	if kinds["public"] != 7 || kinds["node"] != 6 || kinds["metrics"] != 2 || kinds["admin-certificate"] != 1 {
		t.Errorf("routes by permission %v: want 7 public, 6 for nodes, 2 for metrics, 1 for an admin certificate", kinds)
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

// putClusterRecord stores a bare cluster record, enough for grants and
// the permission checks; no workflow has anything to do for it.
func (tc *testController) putClusterRecord(name string) {
	tc.t.Helper()
	rec := map[string]any{"spec": map[string]any{"name": name}, "uid": "test-" + name, "generation": 1, "observedGeneration": 1}
	if err := tc.c.store.Update(func(tx *store.Tx) error { return tx.Put(store.Clusters, name, rec) }); err != nil {
		tc.t.Fatal(err)
	}
}

// userClient creates a user through the API, logs in, and returns a
// client that sends the session's access token.
func (tc *testController) userClient(name string, role v1.UserRole) *http.Client {
	tc.t.Helper()
	const password = "a test user's password"
	if r := doJSON(tc.t, tc.admin, "POST", tc.url+v1.PathUsers, v1.UserCreate{Name: name, Role: role, Password: password}); r.status != http.StatusCreated {
		tc.t.Fatalf("create user %s: %d %s", name, r.status, r.body)
	}
	return tc.loginClient(name, password)
}

// loginClient logs a user in and returns a client that sends the
// session's access token.
func (tc *testController) loginClient(name, password string) *http.Client {
	tc.t.Helper()
	r := doJSON(tc.t, tc.anonClient(), "POST", tc.url+v1.PathLogin, v1.LoginRequest{Username: name, Password: password})
	if r.status != http.StatusOK {
		tc.t.Fatalf("login %s: %d %s", name, r.status, r.body)
	}
	var sess v1.Session
	r.decode(tc.t, &sess)
	return bearerClient(tc.anonClient(), sess.AccessToken)
}

// bearerClient sends token in every request's Authorization header.
func bearerClient(base *http.Client, token string) *http.Client {
	return &http.Client{Timeout: base.Timeout, Transport: bearer{token: token, next: base.Transport}}
}

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// Each cluster in an answer says what the caller may do there, for the
// console to offer only those actions.
func TestClusterAnswersSayTheCallersAccess(t *testing.T) {
	tc := startController(t, t.TempDir())
	tc.putClusterRecord("a")
	tc.putClusterRecord("b")
	viewer := tc.userClient("vera", v1.UserRoleUser)
	for cluster, role := range map[string]v1.GrantRole{"a": v1.GrantView, "b": v1.GrantAdmin} {
		if r := doJSON(t, tc.admin, "POST", tc.url+v1.PathClusters+"/"+cluster+"/grants", v1.GrantRequest{User: "vera", Role: role}); r.status != http.StatusCreated {
			t.Fatalf("grant %s: %d %s", cluster, r.status, r.body)
		}
	}
	access := func(client *http.Client) map[string]v1.GrantRole {
		var list v1.ClusterList
		doJSON(t, client, "GET", tc.url+v1.PathClusters, nil).decode(t, &list)
		got := map[string]v1.GrantRole{}
		for _, c := range list.Items {
			got[c.Spec.Name] = c.Access
			var one v1.Cluster
			doJSON(t, client, "GET", tc.url+v1.PathClusters+"/"+c.Spec.Name, nil).decode(t, &one)
			if one.Access != c.Access {
				t.Errorf("%s: the list says %q, the cluster %q", c.Spec.Name, c.Access, one.Access)
			}
		}
		return got
	}
	if got := access(tc.admin); got["a"] != v1.GrantAdmin || got["b"] != v1.GrantAdmin {
		t.Errorf("the admin's access: %v", got)
	}
	if got := access(viewer); len(got) != 2 || got["a"] != v1.GrantView || got["b"] != v1.GrantAdmin {
		t.Errorf("vera's access: %v, want a: view, b: admin", got)
	}
}

// A cluster admin ends the sessions of their cluster's users only:
// sessions are controller-wide, so someone they granted a role to a
// moment ago, a controller admin or a user of another cluster too, is a
// controller admin's to log out.
func TestClusterAdminEndsOnlyTheirClustersUsersSessions(t *testing.T) {
	tc := startController(t, t.TempDir())
	tc.putClusterRecord("x")
	tc.putClusterRecord("y")
	root := tc.userClient("root", v1.UserRoleAdmin)
	bob := tc.userClient("bob", v1.UserRoleUser)
	carol := tc.userClient("carol", v1.UserRoleUser)
	dave := tc.userClient("dave", v1.UserRoleUser)
	grant := func(by *http.Client, cluster, user string, role v1.GrantRole) {
		t.Helper()
		if r := doJSON(t, by, "POST", tc.url+v1.PathClusters+"/"+cluster+"/grants", v1.GrantRequest{User: user, Role: role}); r.status != http.StatusCreated {
			t.Fatalf("grant %s %s on %s: %d %s", user, role, cluster, r.status, r.body)
		}
	}
	grant(tc.admin, "x", "bob", v1.GrantAdmin)
	grant(tc.admin, "y", "carol", v1.GrantView)
	grant(bob, "x", "root", v1.GrantView)
	grant(bob, "x", "carol", v1.GrantView)
	grant(bob, "x", "dave", v1.GrantView)
	for user, client := range map[string]*http.Client{"root": root, "carol": carol} {
		r := doJSON(t, bob, "POST", tc.url+v1.PathClusters+"/x/revoke-sessions", v1.RevokeSessionsRequest{User: user})
		if r.status != http.StatusForbidden || r.err.Code != v1.CodeForbidden {
			t.Errorf("a cluster admin ends %s's sessions: %d %s, want 403", user, r.status, r.body)
		}
		if r := doJSON(t, client, "GET", tc.url+v1.PathClusters, nil); r.status != http.StatusOK {
			t.Errorf("%s after the refused revoke-sessions: %d %s", user, r.status, r.body)
		}
	}
	var ended v1.SessionsEnded
	doJSON(t, bob, "POST", tc.url+v1.PathClusters+"/x/revoke-sessions", v1.RevokeSessionsRequest{User: "dave"}).decode(t, &ended)
	if ended.Ended != 1 {
		t.Errorf("dave, a user of x alone: %d sessions ended, want 1", ended.Ended)
	}
	if r := doJSON(t, dave, "GET", tc.url+v1.PathClusters, nil); r.status != http.StatusUnauthorized {
		t.Errorf("dave after revoke-sessions: %d %s, want 401", r.status, r.body)
	}
}
