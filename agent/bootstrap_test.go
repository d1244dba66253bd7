package agent

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/agent/bootstrap"
	"github.com/harmonykaas/harmony/agent/identity"
	"github.com/harmonykaas/harmony/agent/pki"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// enrolledAgent is an agent holding an identity for w1 from a CA of its
// own, enrolled with controllers; it returns the CA's certificate.
func enrolledAgent(t *testing.T, controllers []string) (*Agent, *x509.Certificate) {
	t.Helper()
	kp, err := pki.NewCA("harmony-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(kp)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "w1.crt"), filepath.Join(dir, "w1.key")
	if _, err := ca.Ensure(certPath, keyPath, pki.Leaf{CommonName: "w1", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatal(err)
	}
	certPEM, _ := os.ReadFile(certPath)
	keyPEM, _ := os.ReadFile(keyPath)
	block, _ := pem.Decode(keyPEM)
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	id, err := identity.New(identity.Enrollment{NodeName: "w1", Controllers: controllers, TokenID: "0123456789abcdef"},
		key.(*ecdsa.PrivateKey), certPEM, []byte(kp.Certificate))
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{StateDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	a.current.Store(id)
	return a, ca.Cert
}

// A token-less bootstrap document moves the agent to new controller URLs
// only when it trusts the CA the agent enrolled with, by its bundle or by
// its pin: a document of another CA would point the agent at servers it
// cannot trust.
func TestNewControllerURLsOnlyFromADocumentOfTheSameCA(t *testing.T) {
	old, moved := []string{"https://198.18.0.2:9443"}, []string{"https://198.18.0.3:9443"}
	other, err := pki.NewCA("another-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	otherCerts, err := v1.ParseCertificatesPEM([]byte(other.Certificate))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		doc   func(ca *x509.Certificate, caPEM string) v1.Bootstrap
		moves bool
	}{
		{"the same bundle", func(_ *x509.Certificate, caPEM string) v1.Bootstrap { return v1.Bootstrap{CABundle: caPEM} }, true},
		{"the same CA's pin", func(ca *x509.Certificate, _ string) v1.Bootstrap { return v1.Bootstrap{CAPin: v1.CAPin(ca)} }, true},
		{"another bundle", func(*x509.Certificate, string) v1.Bootstrap { return v1.Bootstrap{CABundle: other.Certificate} }, false},
		{"another CA's pin", func(*x509.Certificate, string) v1.Bootstrap { return v1.Bootstrap{CAPin: v1.CAPin(otherCerts[0])} }, false},
	} {
		a, ca := enrolledAgent(t, old)
		doc := c.doc(ca, string(a.current.Load().CAPEM))
		doc.APIVersion, doc.Kind, doc.NodeName, doc.Controllers = v1.APIVersion, "Bootstrap", "w1", moved
		a.adoptControllers(a.current.Load(), &doc)
		want := old
		if c.moves {
			want = moved
		}
		if got := a.current.Load().Controllers; !slices.Equal(got, want) {
			t.Errorf("%s: controllers %v, want %v", c.name, got, want)
		}
		saved, err := os.ReadFile(filepath.Join(a.cfg.StateDir, identity.EnrollmentFile))
		var e identity.Enrollment
		switch {
		case !c.moves && err == nil:
			t.Errorf("%s: the enrollment record was rewritten: %s", c.name, saved)
		case c.moves && (err != nil || json.Unmarshal(saved, &e) != nil || !slices.Equal(e.Controllers, moved)):
			t.Errorf("%s: saved enrollment %s, %v", c.name, strings.TrimSpace(string(saved)), err)
		}
	}
}

// rewrittenWhileRead is the bootstrap file as an operator rewrites it
// just after the agent has read it.
type rewrittenWhileRead struct {
	bootstrap.File
	next []byte
}

func (s rewrittenWhileRead) Read(ctx context.Context) ([]byte, error) {
	data, err := s.File.Read(ctx)
	if werr := os.WriteFile(s.Path, s.next, 0o600); werr != nil {
		return nil, werr
	}
	return data, err
}

// A bootstrap file rewritten while the agent reads it is a change the
// agent sees, not a document it takes as read.
func TestBootstrapFileRewrittenWhileReadIsSeenAsAChange(t *testing.T) {
	kp, err := pki.NewCA("harmony-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	doc := func(token string) []byte {
		data, err := json.Marshal(v1.Bootstrap{APIVersion: v1.APIVersion, Kind: "Bootstrap", NodeName: "w1",
			Controllers: []string{"https://198.18.0.2:9443"}, CABundle: kp.Certificate, Token: token})
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	first, second := doc("0123456789abcdef.0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"),
		doc("fedcba9876543210.0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
	path := filepath.Join(t.TempDir(), "bootstrap.json")
	if err := os.WriteFile(path, first, 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{StateDir: t.TempDir(), BootstrapFile: path, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	a.sources = []bootstrap.Source{rewrittenWhileRead{File: bootstrap.File{Path: path}, next: second}}
	found, err := a.loadBootstrap(context.Background())
	if err != nil || !strings.HasPrefix(found.Doc.Token, "0123456789abcdef.") {
		t.Fatalf("loaded %+v, %v; want the first document", found, err)
	}
	if !a.bootstrapFileChanged() {
		t.Error("the document written during the read is taken as seen")
	}
}
