package controller

import (
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"slices"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/kubeconfig"
)

func TestClusterKubeconfig(t *testing.T) {
	e := newClusterEnv(t)
	e.do("POST", v1.PathClusters, e.spec("kc", 1, 0))
	path := e.tc.url + v1.PathClusters + "/kc/kubeconfig"

	r := doJSON(t, e.tc.admin, "POST", path, v1.KubeconfigRequest{Lifetime: "1h"})
	if r.status != http.StatusOK {
		t.Fatalf("kubeconfig: %d %s", r.status, r.body)
	}
	var kc v1.Kubeconfig
	r.decode(t, &kc)
	if kc.Server != "https://198.18.10.79:8443" {
		t.Errorf("server %q, want the VIP on 8443", kc.Server)
	}
	doc, err := kubeconfig.Parse([]byte(kc.Kubeconfig))
	if err != nil {
		t.Fatalf("%v\n%s", err, kc.Kubeconfig)
	}
	if len(doc.Clusters) != 1 || len(doc.Users) != 1 || doc.CurrentContext != "kc" || doc.Clusters[0].Cluster.Server != kc.Server {
		t.Fatalf("kubeconfig shape: %+v", doc)
	}
	// The certificate is the cluster CA's, the one the masters' roles carry.
	role := doJSON(t, e.tc.admin, "GET", e.tc.url+v1.PathNodes+"/kc-m1/role", nil)
	var master v1.Role
	role.decode(t, &master)
	if string(doc.Clusters[0].Cluster.CAData) != master.PKI.ClusterCA.Certificate {
		t.Error("the kubeconfig's CA is not the cluster CA of the masters' roles")
	}
	block, _ := pem.Decode(doc.Users[0].User.CertData)
	if block == nil {
		t.Fatal("no client certificate PEM")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(doc.Clusters[0].Cluster.CAData)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate does not verify against the cluster CA: %v", err)
	}
	if !slices.Equal(cert.Subject.Organization, []string{"system:masters"}) || cert.Subject.CommonName != "harmony:admin" {
		t.Errorf("subject %v, want harmony:admin in system:masters", cert.Subject)
	}
	if life := time.Until(cert.NotAfter); life > time.Hour+time.Minute || life < 50*time.Minute {
		t.Errorf("certificate valid for %s, asked for 1h", life)
	}
	if kc.ExpiresAt.Unix() != cert.NotAfter.Unix() {
		t.Errorf("expiresAt %s, certificate %s", kc.ExpiresAt, cert.NotAfter)
	}
	if key, _ := pem.Decode(doc.Users[0].User.KeyData); key == nil {
		t.Error("no client key PEM")
	}

	// Each issue is on the record.
	view := doJSON(t, e.tc.admin, "GET", e.tc.url+v1.PathClusters+"/kc", nil)
	var cl v1.Cluster
	view.decode(t, &cl)
	if !slices.ContainsFunc(cl.Status.Events, func(ev v1.Event) bool { return ev.Reason == "KubeconfigIssued" }) {
		t.Error("no KubeconfigIssued event")
	}

	// The default lifetime with an empty body; refusals name the field.
	if r := doJSON(t, e.tc.admin, "POST", path, nil); r.status != http.StatusOK {
		t.Errorf("empty body: %d %s", r.status, r.body)
	}
	for _, lifetime := range []string{"1s", "169h", "forever"} {
		r := doJSON(t, e.tc.admin, "POST", path, v1.KubeconfigRequest{Lifetime: lifetime})
		if r.status != http.StatusBadRequest || r.err.Field != "lifetime" {
			t.Errorf("lifetime %q: %d %s, want 400 on field lifetime", lifetime, r.status, r.body)
		}
	}
	if r := doJSON(t, e.tc.admin, "POST", e.tc.url+v1.PathClusters+"/nope/kubeconfig", nil); r.status != http.StatusNotFound {
		t.Errorf("missing cluster: %d %s", r.status, r.body)
	}
}

// A user's own kubeconfig names the cluster's server and CA and takes
// its credential from harmonyctl under the user's grant: it carries no
// certificate or key, and only a user with a grant gets one.
func TestUserKubeconfig(t *testing.T) {
	e := newClusterEnv(t)
	viewer, stranger, master := e.viewedCluster("ukc")
	path := e.tc.url + v1.PathClusters + "/ukc/kubeconfig"

	r := doJSON(t, viewer, "GET", path, nil)
	if r.status != http.StatusOK {
		t.Fatalf("viewer: %d %s", r.status, r.body)
	}
	var kc v1.Kubeconfig
	r.decode(t, &kc)
	if kc.Server != "https://198.18.10.79:8443" || kc.User != "harmony:viewer" || !kc.ExpiresAt.IsZero() {
		t.Errorf("answer: server %q, user %q, expires %s", kc.Server, kc.User, kc.ExpiresAt)
	}
	doc, err := kubeconfig.Parse([]byte(kc.Kubeconfig))
	if err != nil {
		t.Fatalf("%v\n%s", err, kc.Kubeconfig)
	}
	if doc.CurrentContext != "ukc" || doc.Clusters[0].Cluster.Server != kc.Server || string(doc.Clusters[0].Cluster.CAData) != master.PKI.ClusterCA.Certificate {
		t.Errorf("cluster in the kubeconfig: %+v", doc.Clusters[0])
	}
	u := doc.Users[0].User
	if len(u.CertData) != 0 || len(u.KeyData) != 0 || u.Exec == nil {
		t.Fatalf("the user's credential: %+v, want only an exec plugin", u)
	}
	if u.Exec.Command != "harmonyctl" || !slices.Equal(u.Exec.Args, []string{"credential", "ukc"}) || u.Exec.APIVersion != kubeconfig.ExecAPIVersion || u.Exec.InstallHint == "" {
		t.Errorf("exec plugin %+v", u.Exec)
	}
	if r := doJSON(t, stranger, "GET", path, nil); r.status != http.StatusNotFound {
		t.Errorf("a user without a grant: %d %s", r.status, r.body)
	}
	if r := doJSON(t, e.tc.admin, "GET", e.tc.url+v1.PathClusters+"/nope/kubeconfig", nil); r.status != http.StatusNotFound {
		t.Errorf("missing cluster: %d %s", r.status, r.body)
	}
}
