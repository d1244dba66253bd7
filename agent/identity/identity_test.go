package identity

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testCA signs certificates for a CSR, as the controller would.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (ca *testCA) sign(t *testing.T, pub any, cn string, notBefore, notAfter time.Time) []byte {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: notBefore, NotAfter: notAfter,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), ca.pem...)
}

func TestSaveLoadRoundTripWithSecretMode(t *testing.T) {
	ca := newTestCA(t)
	key, _ := NewKey()
	chain := ca.sign(t, &key.PublicKey, "w1", time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	id, err := New(Enrollment{NodeName: "w1", Controllers: []string{"https://198.18.0.2:9443"}, TokenID: "0123456789abcdef"}, key, chain, ca.pem)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "state")
	s := Store{Dir: dir}
	if _, err := s.Load(); !errors.Is(err, ErrNone) {
		t.Fatalf("empty state: %v", err)
	}
	if err := s.Save(id, key, chain); err != nil {
		t.Fatal(err)
	}
	info, _ := os.Stat(filepath.Join(dir, IdentityFile))
	if info.Mode().Perm() != 0o600 {
		t.Fatalf("identity file mode %04o", info.Mode().Perm())
	}
	got, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if got.NodeName != "w1" || got.TokenID != id.TokenID || !got.Leaf().Equal(id.Leaf()) || len(got.Cert.Certificate) != 2 {
		t.Fatalf("loaded %+v", got.Enrollment)
	}
	// A key readable by others is refused, not silently used.
	os.Chmod(filepath.Join(dir, IdentityFile), 0o644)
	if _, err := s.Load(); err == nil || !strings.Contains(err.Error(), "readable by others") {
		t.Fatalf("world-readable key: %v", err)
	}
}

// An enrollment record without a usable controller URL (damaged, or
// edited by hand) is refused by name: the agent would have nothing to talk
// to, and its loops nothing to back off from.
func TestLoadRefusesAnEnrollmentWithoutControllers(t *testing.T) {
	ca := newTestCA(t)
	key, _ := NewKey()
	chain := ca.sign(t, &key.PublicKey, "w1", time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	for _, c := range []struct {
		controllers []string
		want        string
	}{
		{nil, "controllers: at least one controller URL is required"},
		{[]string{}, "controllers: at least one controller URL is required"},
		{[]string{"https://198.18.0.2:9443", "http://198.18.0.3:9443"}, "controllers[1]"},
	} {
		id, err := New(Enrollment{NodeName: "w1", Controllers: c.controllers, TokenID: "0123456789abcdef"}, key, chain, ca.pem)
		if err != nil {
			t.Fatal(err)
		}
		s := Store{Dir: t.TempDir()}
		if err := s.Save(id, key, chain); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Load(); err == nil || !strings.Contains(err.Error(), EnrollmentFile+": "+c.want) {
			t.Errorf("controllers %q: %v, want an error naming %s", c.controllers, err, c.want)
		}
	}
}

func TestNewRefusesForeignAnswers(t *testing.T) {
	ca, other := newTestCA(t), newTestCA(t)
	key, _ := NewKey()
	otherKey, _ := NewKey()
	now := time.Now()
	e := Enrollment{NodeName: "w1"}
	cases := map[string]struct {
		chain []byte
		want  string
	}{
		"someone else's key": {ca.sign(t, &otherKey.PublicKey, "w1", now, now.Add(time.Hour)), "this node's key"},
		"another name":       {ca.sign(t, &key.PublicKey, "w2", now, now.Add(time.Hour)), "is for \"w2\""},
		"another CA":         {other.sign(t, &key.PublicKey, "w1", now, now.Add(time.Hour)), "does not verify"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := New(e, key, c.chain, ca.pem); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestRenewAtIsAboutTwoThirdsWithJitter(t *testing.T) {
	nb := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	id := &Identity{Cert: tls.Certificate{Leaf: &x509.Certificate{NotBefore: nb, NotAfter: nb.Add(24 * time.Hour)}}}
	if got := id.RenewAt(0); !got.Equal(nb.Add(16 * time.Hour)) {
		t.Fatalf("RenewAt(0) = %s, want two thirds in", got)
	}
	earliest := id.RenewAt(0.999)
	if !earliest.Before(nb.Add(16*time.Hour)) || earliest.Before(nb.Add(16*time.Hour-144*time.Minute)) {
		t.Fatalf("RenewAt(max jitter) = %s, want within a tenth of the lifetime before two thirds", earliest)
	}
}

func TestCSRCarriesNameAndAddresses(t *testing.T) {
	key, _ := NewKey()
	text, err := CSR(key, "w1", []string{"w1.demo.example"}, []net.IP{net.ParseIP("198.18.0.11")})
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode([]byte(text))
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil || csr.CheckSignature() != nil {
		t.Fatalf("CSR: %v", err)
	}
	if csr.Subject.CommonName != "w1" || len(csr.DNSNames) != 2 || csr.DNSNames[0] != "w1" || !csr.IPAddresses[0].Equal(net.ParseIP("198.18.0.11")) {
		t.Fatalf("CSR subject %v DNS %v IPs %v", csr.Subject, csr.DNSNames, csr.IPAddresses)
	}
}
