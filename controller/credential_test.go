package controller

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"slices"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// A user's cluster credential: a certificate for their own key, signed by
// the cluster CA, naming them and their grant's group, for five minutes;
// none without a grant, none once the grant is revoked.
func TestUserCredential(t *testing.T) {
	e := newClusterEnv(t)
	viewer, stranger, master := e.viewedCluster("cred")
	path := e.tc.url + v1.PathClusters + "/cred/credential"

	credential := func(client *http.Client, body any) (response, *x509.Certificate) {
		t.Helper()
		r := doJSON(t, client, "POST", path, body)
		if r.status != http.StatusOK {
			return r, nil
		}
		var cred v1.Credential
		r.decode(t, &cred)
		if cred.CertificateAuthority != master.PKI.ClusterCA.Certificate || cred.Server != "https://198.18.10.79:8443" {
			t.Errorf("credential's CA or server: %q", cred.Server)
		}
		block, _ := pem.Decode([]byte(cred.Certificate))
		if block == nil {
			t.Fatal("no certificate PEM")
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM([]byte(cred.CertificateAuthority))
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("the certificate does not verify against the cluster CA: %v", err)
		}
		if !cert.NotAfter.Equal(cred.ExpiresAt) || time.Until(cert.NotAfter) > v1.DefaultCredentialLifetime+time.Second {
			t.Errorf("certificate until %s (answer says %s), want at most %s", cert.NotAfter, cred.ExpiresAt, v1.DefaultCredentialLifetime)
		}
		return r, cert
	}

	csr, key := makeCSR(t, csrOptions{cn: "ignored"})
	r, cert := credential(viewer, v1.CredentialRequest{CSR: csr})
	if cert == nil {
		t.Fatalf("viewer: %d %s", r.status, r.body)
	}
	if cert.Subject.CommonName != "harmony:viewer" || !slices.Equal(cert.Subject.Organization, []string{"harmony:grant:view"}) {
		t.Errorf("viewer's certificate subject %v", cert.Subject)
	}
	if pub, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(key.Public()) {
		t.Error("the certificate is not for the key of the CSR")
	}
	if r, _ := credential(e.tc.admin, v1.CredentialRequest{CSR: csr}); r.status != http.StatusOK {
		t.Errorf("admin: %d %s", r.status, r.body)
	} else if _, cert := credential(e.tc.admin, v1.CredentialRequest{CSR: csr}); !slices.Equal(cert.Subject.Organization, []string{"harmony:grant:admin"}) {
		t.Errorf("an admin's certificate groups %v", cert.Subject.Organization)
	}
	if r, _ := credential(stranger, v1.CredentialRequest{CSR: csr}); r.status != http.StatusNotFound {
		t.Errorf("a user without a grant: %d %s", r.status, r.body)
	}
	other, _ := makeCSR(t, csrOptions{cn: "other"})
	forged := csr[:len(csr)-80] + other[len(other)-80:]
	if r, _ := credential(viewer, v1.CredentialRequest{CSR: forged}); r.status != http.StatusBadRequest || r.err.Field != "csr" {
		t.Errorf("a CSR whose signature does not verify: %d %s", r.status, r.body)
	}
	if r := doJSON(t, e.tc.admin, "DELETE", e.tc.url+v1.PathClusters+"/cred/grants/user/viewer", nil); r.status != http.StatusNoContent {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	if r, _ := credential(viewer, v1.CredentialRequest{CSR: csr}); r.status != http.StatusNotFound {
		t.Errorf("after the grant was revoked: %d %s", r.status, r.body)
	}
}

// viewedCluster creates a 1+0 cluster with a user "viewer" granted view
// on it and a user "stranger" granted nothing; it returns their clients
// and the master's role (which holds the cluster CA).
func (e *clusterEnv) viewedCluster(name string) (viewer, stranger *http.Client, master v1.Role) {
	e.t.Helper()
	e.do("POST", v1.PathClusters, e.spec(name, 1, 0))
	viewer = e.tc.userClient("viewer", v1.UserRoleUser)
	stranger = e.tc.userClient("stranger", v1.UserRoleUser)
	if r := doJSON(e.t, e.tc.admin, "POST", e.tc.url+v1.PathClusters+"/"+name+"/grants", v1.GrantRequest{User: "viewer", Role: v1.GrantView}); r.status != http.StatusCreated {
		e.t.Fatalf("grant: %d %s", r.status, r.body)
	}
	doJSON(e.t, e.tc.admin, "GET", e.tc.url+v1.PathNodes+"/"+name+"-m1/role", nil).decode(e.t, &master)
	return viewer, stranger, master
}
