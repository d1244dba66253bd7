package kubeconfig

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/harmonykaas/harmony/internal/testutil"
)

func TestRoundTrip(t *testing.T) {
	data, err := New("c1", "https://198.18.10.10:8443", []byte("CA"), "harmony:admin", []byte("CERT"), []byte("KEY")).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	// The fields kubectl reads, by their file names, data base64-encoded.
	for _, want := range []string{"current-context: c1", "server: https://198.18.10.10:8443",
		"certificate-authority-data: Q0E=", "client-certificate-data: Q0VSVA==", "client-key-data: S0VZ", "user: harmony:admin"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("kubeconfig lacks %q:\n%s", want, data)
		}
	}
	c, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if string(c.Clusters[0].Cluster.CAData) != "CA" || string(c.Users[0].User.KeyData) != "KEY" || c.Contexts[0].Context.User != "harmony:admin" {
		t.Errorf("parsed %+v", c)
	}
	for _, bad := range []string{"clusters: [", "apiVersion: v1\nusers: [{name: u}]\n", "clusters: [{name: c}]\n"} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%q) succeeded", bad)
		}
	}
}

// TestTLSConfig: the configuration trusts the file's CA and presents its
// user's certificate; a server of another CA is refused, and a file with
// no usable CA or key is an error.
func TestTLSConfig(t *testing.T) {
	ca := testutil.NewCA(t)
	srvCert, srvKey := ca.Issue(t, "apiserver", x509.ExtKeyUsageServerAuth)
	pair, err := tls.X509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	clients := x509.NewCertPool()
	clients.AddCert(ca.Cert)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: clients, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	defer srv.Close()

	get := func(c *Config) (string, error) {
		conf, err := c.TLSConfig()
		if err != nil {
			return "", err
		}
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: conf}}
		resp, err := hc.Get(srv.URL)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return string(body), err
	}
	userCert, userKey := ca.Issue(t, "harmony:admin", x509.ExtKeyUsageClientAuth)
	if who, err := get(New("c1", srv.URL, ca.PEM, "harmony:admin", userCert, userKey)); err != nil || who != "harmony:admin" {
		t.Fatalf("the server saw %q, %v; want the user's certificate", who, err)
	}
	other := testutil.NewCA(t)
	if _, err := get(New("c1", srv.URL, other.PEM, "harmony:admin", userCert, userKey)); err == nil {
		t.Error("a server whose certificate the file's CA did not sign was trusted")
	}
	if _, err := New("c1", srv.URL, []byte("not PEM"), "u", userCert, userKey).TLSConfig(); err == nil || !strings.Contains(err.Error(), "no CA certificate") {
		t.Errorf("no CA: %v", err)
	}
	_, otherKey := ca.Issue(t, "someone", x509.ExtKeyUsageClientAuth)
	if _, err := New("c1", srv.URL, ca.PEM, "u", userCert, otherKey).TLSConfig(); err == nil {
		t.Error("a certificate with another's key made a configuration")
	}
}
