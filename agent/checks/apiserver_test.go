package checks

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestAPIServerCheck(t *testing.T) {
	haproxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer haproxy.Close()
	ready := true
	apiserver := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" || !ready {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
		}
	}))
	defer apiserver.Close()
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: apiserver.Certificate().Raw}), 0o644)

	check := APIServer{HAProxyURL: haproxy.URL + "/metrics", ReadyzURL: apiserver.URL + "/readyz", CAFile: caFile, Timeout: 5 * time.Second}
	if err := check.Run(context.Background()); err != nil {
		t.Fatalf("healthy pair: %v", err)
	}

	ready = false
	if err := check.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("apiserver not ready: %v", err)
	}
	ready = true

	// A server name replaces the URL's host in verification: httptest's
	// certificate names example.com, not kubernetes.
	named := check
	named.ServerName = "example.com"
	if err := named.Run(context.Background()); err != nil {
		t.Fatalf("server name on the certificate refused: %v", err)
	}
	named.ServerName = "kubernetes"
	if err := named.Run(context.Background()); err == nil {
		t.Fatal("a server name the certificate does not carry passed")
	}

	dead := check
	dead.HAProxyURL = "http://127.0.0.1:1/metrics"
	if err := dead.Run(context.Background()); err == nil {
		t.Fatal("a dead HAProxy passed")
	}

	// With a CA that did not sign the apiserver, the check fails: it
	// verifies when it can.
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	wrongCA := filepath.Join(t.TempDir(), "other.crt")
	os.WriteFile(wrongCA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	untrusted := check
	untrusted.CAFile = wrongCA
	if err := untrusted.Run(context.Background()); err == nil {
		t.Fatal("an apiserver outside the CA passed")
	}
}
