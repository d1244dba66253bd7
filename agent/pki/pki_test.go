package pki_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/agent/pki"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

func newTestCA(t *testing.T, name string) *v1.KeyPair {
	t.Helper()
	kp, err := pki.NewCA(name, 10*365*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

func TestEnsureIssuesKeepsAndReplaces(t *testing.T) {
	kp := newTestCA(t, "etcd-ca")
	ca, err := pki.LoadCA(kp)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "pki", "server.crt"), filepath.Join(dir, "pki", "server.key")
	leaf := pki.Leaf{CommonName: "m1", DNSNames: []string{"m1", "localhost"},
		IPs:    []net.IP{net.ParseIP("198.18.0.11").To4(), net.ParseIP("127.0.0.1").To4()},
		Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}

	changed, err := ca.Ensure(certPath, keyPath, leaf)
	if err != nil || !changed {
		t.Fatalf("first Ensure: changed=%v err=%v", changed, err)
	}
	info, err := os.Stat(keyPath)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("key mode %v (%v), want 0600", info.Mode().Perm(), err)
	}
	cert := readCert(t, certPath)
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "m1", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Fatalf("leaf does not verify against its CA: %v", err)
	}
	if _, err := tlsPair(certPath, keyPath); err != nil {
		t.Fatalf("cert and key do not pair: %v", err)
	}

	// The same request again keeps the pair byte for byte.
	before, _ := os.ReadFile(certPath)
	if changed, err := ca.Ensure(certPath, keyPath, leaf); err != nil || changed {
		t.Fatalf("second Ensure: changed=%v err=%v, want a kept pair", changed, err)
	}
	if after, _ := os.ReadFile(certPath); string(after) != string(before) {
		t.Fatal("an unchanged request rewrote the certificate")
	}

	// Each of these must replace the pair.
	replacers := map[string]func() (*pki.CA, pki.Leaf){
		"new SAN": func() (*pki.CA, pki.Leaf) {
			l := leaf
			l.IPs = append(l.IPs[:1:1], net.ParseIP("198.18.0.99").To4())
			return ca, l
		},
		"new CN":      func() (*pki.CA, pki.Leaf) { l := leaf; l.CommonName = "m2"; return ca, l },
		"client only": func() (*pki.CA, pki.Leaf) { l := leaf; l.Usages = l.Usages[1:]; return ca, l },
		"another CA":  func() (*pki.CA, pki.Leaf) { c, _ := pki.LoadCA(newTestCA(t, "other")); return c, leaf },
	}
	for _, name := range []string{"new SAN", "new CN", "client only", "another CA"} {
		c, l := replacers[name]()
		if changed, err := c.Ensure(certPath, keyPath, l); err != nil || !changed {
			t.Fatalf("%s: changed=%v err=%v, want a new pair", name, changed, err)
		}
	}
	if changed, err := ca.Ensure(certPath, keyPath, leaf); err != nil || !changed {
		t.Fatalf("back to the first CA: changed=%v err=%v", changed, err)
	}

	// A certificate with less than a third of its life left is renewed.
	// Certificates are backdated five minutes for clock skew, so a
	// one-minute certificate is always in its last third.
	short := leaf
	short.Validity = time.Minute
	shortCert, shortKey := filepath.Join(dir, "short.crt"), filepath.Join(dir, "short.key")
	if _, err := ca.Ensure(shortCert, shortKey, short); err != nil {
		t.Fatal(err)
	}
	if changed, err := ca.Ensure(shortCert, shortKey, short); err != nil || !changed {
		t.Fatalf("certificate near expiry kept: changed=%v err=%v", changed, err)
	}

	// A key that no longer matches the certificate is replaced.
	other := filepath.Join(dir, "other.key")
	if _, err := ca.Ensure(filepath.Join(dir, "other.crt"), other, leaf); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(other)
	if err := os.WriteFile(keyPath, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if changed, err := ca.Ensure(certPath, keyPath, leaf); err != nil || !changed {
		t.Fatalf("mismatched key kept: changed=%v err=%v", changed, err)
	}
}

func TestLoadCARefusesCertificateAlone(t *testing.T) {
	kp := newTestCA(t, "ca")
	kp.Key = ""
	if _, err := pki.LoadCA(kp); err == nil {
		t.Fatal("a CA without its key was accepted for signing")
	}
	if _, err := pki.LoadCA(nil); err == nil {
		t.Fatal("a missing CA was accepted")
	}
}

func tlsPair(certPath, keyPath string) (tls.Certificate, error) {
	return tls.LoadX509KeyPair(certPath, keyPath)
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := v1.ParseCertificatesPEM(data)
	if err != nil {
		t.Fatal(err)
	}
	return certs[0]
}

// A pair a running program reads at start is owed a reload before it
// changes: owe runs while the old pair is still in place, only when the
// pair changes, and a failing owe changes nothing.
func TestEnsureOwingOwesBeforeThePairChanges(t *testing.T) {
	ca, err := pki.LoadCA(newTestCA(t, "cni-ca"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	leaf := pki.Leaf{CommonName: "netplugin", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	owed := 0
	owe := func() error {
		owed++
		if _, err := os.Stat(keyPath); !os.IsNotExist(err) {
			t.Errorf("owe ran after the key was written: %v", err)
		}
		return nil
	}
	if changed, err := ca.EnsureOwing(certPath, keyPath, leaf, owe); err != nil || !changed || owed != 1 {
		t.Fatalf("first EnsureOwing: changed=%v err=%v owed=%d", changed, err, owed)
	}
	if changed, err := ca.EnsureOwing(certPath, keyPath, leaf, owe); err != nil || changed || owed != 1 {
		t.Fatalf("a kept pair: changed=%v err=%v owed=%d, want no new debt", changed, err, owed)
	}
	before, _ := os.ReadFile(certPath)
	leaf.CommonName = "netplugin-2"
	failing := func() error { return errors.New("marker not written") }
	if changed, err := ca.EnsureOwing(certPath, keyPath, leaf, failing); err == nil || changed {
		t.Fatalf("a failing owe: changed=%v err=%v, want an error", changed, err)
	}
	if after, _ := os.ReadFile(certPath); string(after) != string(before) {
		t.Error("the pair changed although its reload could not be owed")
	}
}
