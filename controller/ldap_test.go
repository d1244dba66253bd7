package controller

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"slices"
	"strings"
	"testing"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/testutil"
)

// Directory users through the API: settings applied and never shown with
// their password, a sign-in, a group's grant, the groups in the cluster
// certificate (prefixed, so that a directory group cannot be one of the
// cluster's own), and a cluster admin ending a user's sessions.
func TestDirectoryUsersThroughTheAPI(t *testing.T) {
	slapd, err := testutil.StartSlapd(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(slapd.Close)
	e := newClusterEnv(t)
	e.do("POST", v1.PathClusters, e.spec("dir", 1, 0))
	url := e.tc.url

	plain := slapd.Settings(slapd.StartTLSURL)
	plain.StartTLS = false
	if r := doJSON(t, e.tc.admin, "PUT", url+v1.PathLDAP, plain); r.status != http.StatusBadRequest || r.err.Field != "url" {
		t.Errorf("ldap:// without StartTLS: %d %s, want 400 on url", r.status, r.body)
	}
	if r := doJSON(t, e.tc.admin, "PUT", url+v1.PathLDAP, slapd.Settings(slapd.URL)); r.status != http.StatusCreated {
		t.Fatalf("apply ldap: %d %s", r.status, r.body)
	}
	got := doJSON(t, e.tc.admin, "GET", url+v1.PathLDAP, nil)
	if got.status != http.StatusOK || bytes.Contains(got.body, []byte(testutil.SlapdServicePassword)) {
		t.Errorf("ldap settings: %d %s; want them without the bind password", got.status, got.body)
	}
	var info v1.LDAPUserInfo
	doJSON(t, e.tc.admin, "POST", url+v1.PathLDAP+"/lookup", v1.LDAPLookupRequest{Username: "eve"}).decode(t, &info)
	if info.DN != testutil.SlapdUserDN("eve") || info.Role != v1.UserRoleUser {
		t.Errorf("test eve: %+v", info)
	}

	if r := doJSON(t, e.tc.admin, "POST", url+v1.PathClusters+"/dir/grants", v1.GrantRequest{Group: "harmony-users", Role: v1.GrantView}); r.status != http.StatusCreated {
		t.Fatalf("grant: %d %s", r.status, r.body)
	}
	eve := e.tc.loginClient("Eve", testutil.SlapdPassword("eve"))
	var list v1.ClusterList
	doJSON(t, eve, "GET", url+v1.PathClusters, nil).decode(t, &list)
	if len(list.Items) != 1 || list.Items[0].Spec.Name != "dir" {
		t.Errorf("eve's clusters: %+v", list.Items)
	}
	csr, _ := makeCSR(t, csrOptions{cn: "eve"})
	r := doJSON(t, eve, "POST", url+v1.PathClusters+"/dir/credential", v1.CredentialRequest{CSR: csr})
	if r.status != http.StatusOK {
		t.Fatalf("eve's credential: %d %s", r.status, r.body)
	}
	var cred v1.Credential
	r.decode(t, &cred)
	block, _ := pem.Decode([]byte(cred.Certificate))
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"harmony:grant:view", "harmony:ldap:harmony-users", "harmony:ldap:system:masters"}
	if cert.Subject.CommonName != "harmony:eve" || !slices.Equal(cert.Subject.Organization, want) {
		t.Errorf("eve's certificate: %v, want CN harmony:eve and O %v", cert.Subject, want)
	}
	if slices.Contains(cert.Subject.Organization, "system:masters") {
		t.Error("a directory group named system:masters became the cluster's system:masters")
	}

	// A cluster admin ends eve's sessions on their cluster; a user with
	// no grant there cannot be reached that way.
	owner := e.tc.userClient("owner", v1.UserRoleUser)
	if r := doJSON(t, e.tc.admin, "POST", url+v1.PathClusters+"/dir/grants", v1.GrantRequest{User: "owner", Role: v1.GrantAdmin}); r.status != http.StatusCreated {
		t.Fatalf("grant owner: %d %s", r.status, r.body)
	}
	e.tc.userClient("outsider", v1.UserRoleUser)
	if r := doJSON(t, owner, "POST", url+v1.PathClusters+"/dir/revoke-sessions", v1.RevokeSessionsRequest{User: "outsider"}); r.status != http.StatusNotFound {
		t.Errorf("revoke-sessions of a user without a grant: %d %s, want 404", r.status, r.body)
	}
	var ended v1.SessionsEnded
	doJSON(t, owner, "POST", url+v1.PathClusters+"/dir/revoke-sessions", v1.RevokeSessionsRequest{User: "eve"}).decode(t, &ended)
	if ended.Ended != 1 {
		t.Errorf("ended %d sessions of eve's, want 1", ended.Ended)
	}
	if r := doJSON(t, eve, "POST", url+v1.PathClusters+"/dir/credential", v1.CredentialRequest{CSR: csr}); r.status != http.StatusUnauthorized {
		t.Errorf("eve's credential after revoke-sessions: %d %s, want 401", r.status, r.body)
	}
	// The directory down: a sign-in gets 503, not "wrong password".
	slapd.Close()
	r = doJSON(t, e.tc.anonClient(), "POST", url+v1.PathLogin, v1.LoginRequest{Username: "eve", Password: testutil.SlapdPassword("eve")})
	if r.status != http.StatusServiceUnavailable || r.err.Code != v1.CodeLDAPUnreachable {
		t.Errorf("sign-in with the directory down: %d %s, want 503 %s", r.status, r.body, v1.CodeLDAPUnreachable)
	}
	// Nothing of the directory's settings reaches a caller who has not
	// signed in.
	for _, secret := range []string{slapd.URL, strings.TrimPrefix(slapd.URL, "ldaps://"), testutil.SlapdServiceDN, "dc="} {
		if strings.Contains(string(r.body), secret) {
			t.Errorf("an anonymous sign-in's refusal tells %q: %s", secret, r.body)
		}
	}
}
