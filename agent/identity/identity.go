// Package identity keeps the node's key and certificate in the state
// directory and makes the CSRs that enrollment and renewal send.
package identity

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/atomicfile"
)

// Files in the state directory. The key and its certificate chain share one
// file, written atomically, so a crash can never pair a new key with an
// old certificate.
const (
	IdentityFile   = "node.pem"
	CAFile         = "ca.pem"
	EnrollmentFile = "enrollment.json"
)

// ErrNone means the state directory holds no identity yet.
var ErrNone = errors.New("no identity in the state directory")

// Enrollment records where and how the node enrolled.
type Enrollment struct {
	NodeName    string    `json:"nodeName"`
	Controllers []string  `json:"controllers"`
	TokenID     string    `json:"tokenID"`
	EnrolledAt  time.Time `json:"enrolledAt"`
}

// Identity is the node's credential and the trust it enrolled with.
type Identity struct {
	Enrollment
	Cert   tls.Certificate
	CAPEM  []byte
	CAPool *x509.CertPool
}

// Leaf is the node certificate.
func (id *Identity) Leaf() *x509.Certificate { return id.Cert.Leaf }

// ValidAt reports whether the certificate is usable at t.
func (id *Identity) ValidAt(t time.Time) bool {
	return !t.Before(id.Leaf().NotBefore) && t.Before(id.Leaf().NotAfter)
}

// RenewAt is when to renew: about two thirds into the certificate's life,
// moved earlier by up to a tenth of it (jitter in [0,1)), so that a fleet
// enrolled together does not renew together.
func (id *Identity) RenewAt(jitter float64) time.Time {
	nb, na := id.Leaf().NotBefore, id.Leaf().NotAfter
	life := na.Sub(nb)
	return nb.Add(life*2/3 - time.Duration(jitter*float64(life)/10))
}

// Store is the state directory.
type Store struct{ Dir string }

// Load reads the identity. ErrNone if there is none; another error if it is
// damaged.
func (s Store) Load() (*Identity, error) {
	pemData, err := os.ReadFile(filepath.Join(s.Dir, IdentityFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNone
	}
	if err != nil {
		return nil, fmt.Errorf("read identity: %w", err)
	}
	if info, err := os.Stat(filepath.Join(s.Dir, IdentityFile)); err == nil && info.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s is readable by others (mode %04o)", filepath.Join(s.Dir, IdentityFile), info.Mode().Perm())
	}
	cert, err := tls.X509KeyPair(pemData, pemData)
	if err != nil {
		return nil, fmt.Errorf("identity %s: %w", IdentityFile, err)
	}
	caPEM, err := os.ReadFile(filepath.Join(s.Dir, CAFile))
	if err != nil {
		return nil, fmt.Errorf("read CA: %w", err)
	}
	pool, err := PoolFromPEM(caPEM)
	if err != nil {
		return nil, fmt.Errorf("CA %s: %w", CAFile, err)
	}
	var e Enrollment
	data, err := os.ReadFile(filepath.Join(s.Dir, EnrollmentFile))
	if err != nil {
		return nil, fmt.Errorf("read enrollment: %w", err)
	}
	if err := json.Unmarshal(data, &e); err != nil {
		return nil, fmt.Errorf("enrollment %s: %w", EnrollmentFile, err)
	}
	// Without one the agent would have no controller to talk to.
	if err := v1.ValidateControllers(e.Controllers); err != nil {
		return nil, fmt.Errorf("enrollment %s: %w", EnrollmentFile, err)
	}
	if e.NodeName != cert.Leaf.Subject.CommonName {
		return nil, fmt.Errorf("enrollment is for %q but the certificate is for %q", e.NodeName, cert.Leaf.Subject.CommonName)
	}
	return &Identity{Enrollment: e, Cert: cert, CAPEM: caPEM, CAPool: pool}, nil
}

// Save writes the CA and enrollment record first and the key and chain
// last: the identity file is what Load keys on.
func (s Store) Save(id *Identity, key *ecdsa.PrivateKey, chainPEM []byte) error {
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(s.Dir, CAFile), id.CAPEM, 0o644); err != nil {
		return err
	}
	if err := s.SaveEnrollment(id.Enrollment); err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("encode key: %w", err)
	}
	data := append(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), chainPEM...)
	return atomicfile.Write(filepath.Join(s.Dir, IdentityFile), data, 0o600)
}

// SaveEnrollment rewrites only the enrollment record (new controller URLs).
func (s Store) SaveEnrollment(e Enrollment) error {
	data, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return fmt.Errorf("encode enrollment: %w", err)
	}
	return atomicfile.Write(filepath.Join(s.Dir, EnrollmentFile), data, 0o644)
}

// New assembles an identity from a fresh key and the controller's answer.
func New(e Enrollment, key *ecdsa.PrivateKey, chainPEM, caPEM []byte) (*Identity, error) {
	certs, err := v1.ParseCertificatesPEM(chainPEM)
	if err != nil {
		return nil, fmt.Errorf("issued certificate: %w", err)
	}
	leaf := certs[0]
	if !key.PublicKey.Equal(leaf.PublicKey) {
		return nil, errors.New("issued certificate does not carry this node's key")
	}
	if leaf.Subject.CommonName != e.NodeName {
		return nil, fmt.Errorf("issued certificate is for %q, not %q", leaf.Subject.CommonName, e.NodeName)
	}
	pool, err := PoolFromPEM(caPEM)
	if err != nil {
		return nil, fmt.Errorf("CA bundle: %w", err)
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil, fmt.Errorf("issued certificate does not verify against the CA: %w", err)
	}
	raw := make([][]byte, len(certs))
	for i, c := range certs {
		raw[i] = c.Raw
	}
	return &Identity{
		Enrollment: e,
		Cert:       tls.Certificate{Certificate: raw, PrivateKey: key, Leaf: leaf},
		CAPEM:      caPEM,
		CAPool:     pool,
	}, nil
}

// NewKey makes the node's key. It never leaves the node.
func NewKey() (*ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	return key, nil
}

// CSR makes a PEM certificate request for the node: CN is its name, and
// the SANs its name, extra DNS names and addresses.
func CSR(key *ecdsa.PrivateKey, nodeName string, dnsNames []string, ips []net.IP) (string, error) {
	names := append([]string{nodeName}, dnsNames...)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:     pkix.Name{CommonName: nodeName},
		DNSNames:    names,
		IPAddresses: ips,
	}, key)
	if err != nil {
		return "", fmt.Errorf("create CSR: %w", err)
	}
	return v1.EncodeCSR(der), nil
}

// PoolFromPEM parses a CA bundle into a pool.
func PoolFromPEM(caPEM []byte) (*x509.CertPool, error) {
	certs, err := v1.ParseCertificatesPEM(caPEM)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, nil
}
