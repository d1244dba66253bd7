// Package ca is the controller's issuing certificate authority: an ECDSA
// P-256 CA created on first start, or an imported intermediate.
package ca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/atomicfile"
)

// File names inside the data directory.
const (
	CertFile = "ca.crt"
	KeyFile  = "ca.key"
)

// Lifetime of a CA the controller creates itself.
const selfSignedLifetime = 10 * 365 * 24 * time.Hour

// clockSkew backdates NotBefore so that a node whose clock is a little
// behind still accepts a fresh certificate.
const clockSkew = time.Minute

// CA signs node, admin, scraper and controller certificates.
type CA struct {
	cert    *x509.Certificate
	parents []*x509.Certificate
	key     crypto.Signer
	pool    *x509.CertPool
}

// ErrNoCA means the data directory holds no CA yet.
var ErrNoCA = errors.New("no CA in the data directory")

// Load reads the CA from dir.
func Load(dir string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CertFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNoCA
	}
	if err != nil {
		return nil, fmt.Errorf("read CA certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, KeyFile))
	if err != nil {
		return nil, fmt.Errorf("read CA key: %w", err)
	}
	if err := checkSecretMode(filepath.Join(dir, KeyFile)); err != nil {
		return nil, err
	}
	return parse(certPEM, keyPEM, time.Now())
}

// Create makes a new self-signed ECDSA P-256 CA in dir.
func Create(dir, commonName string, now time.Time) (*CA, error) {
	certPEM, keyPEM, err := selfSigned(commonName, []string{"Harmony"}, selfSignedLifetime, now, true)
	if err != nil {
		return nil, err
	}
	return save(dir, certPEM, keyPEM, now)
}

// NewKeyPair makes a self-signed ECDSA P-256 CA that lives only as PEM,
// such as the cluster CAs the controller keeps for each cluster.
func NewKeyPair(commonName string, lifetime time.Duration, now time.Time) (*v1.KeyPair, error) {
	certPEM, keyPEM, err := selfSigned(commonName, nil, lifetime, now, false)
	if err != nil {
		return nil, err
	}
	return &v1.KeyPair{Certificate: string(certPEM), Key: string(keyPEM)}, nil
}

// NewKey makes an ECDSA P-256 private key as PEM PKCS#8, such as a
// cluster's service account signing key.
func NewKey() (string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", fmt.Errorf("generate key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", fmt.Errorf("encode key: %w", err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), nil
}

// selfSigned makes a CA; leafOnly forbids it to sign other CAs.
func selfSigned(commonName string, org []string, lifetime time.Duration, now time.Time, leafOnly bool) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate CA key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName, Organization: org},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(lifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	if leafOnly {
		tmpl.MaxPathLen, tmpl.MaxPathLenZero = 0, true
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("self-sign CA %s: %w", commonName, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode CA key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// Import installs an existing CA (typically an intermediate of the
// customer's PKI) into dir. certPEM may carry the CA's parents after it.
func Import(dir string, certPEM, keyPEM []byte, now time.Time) (*CA, error) {
	return save(dir, certPEM, keyPEM, now)
}

func save(dir string, certPEM, keyPEM []byte, now time.Time) (*CA, error) {
	c, err := parse(certPEM, keyPEM, now)
	if err != nil {
		return nil, err
	}
	// Key first: a crash between the two leaves no certificate, so the
	// next start does the whole step again.
	if err := atomicfile.Write(filepath.Join(dir, KeyFile), keyPEM, 0o600); err != nil {
		return nil, err
	}
	if err := atomicfile.Write(filepath.Join(dir, CertFile), certPEM, 0o644); err != nil {
		return nil, err
	}
	return c, nil
}

// Parse checks a CA certificate and key as Load does, without a data
// directory (a restore checks the CA in a backup this way).
func Parse(certPEM, keyPEM []byte, now time.Time) (*CA, error) { return parse(certPEM, keyPEM, now) }

func parse(certPEM, keyPEM []byte, now time.Time) (*CA, error) {
	certs, err := v1.ParseCertificatesPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	cert := certs[0]
	if !cert.BasicConstraintsValid || !cert.IsCA {
		return nil, fmt.Errorf("CA certificate %q: basic constraints do not allow it to act as a CA", cert.Subject)
	}
	if cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("CA certificate %q: key usage lacks certificate signing", cert.Subject)
	}
	if now.After(cert.NotAfter) || now.Before(cert.NotBefore.Add(-clockSkew)) {
		return nil, fmt.Errorf("CA certificate %q: valid only from %s to %s", cert.Subject, cert.NotBefore, cert.NotAfter)
	}
	if err := CheckKeyStrength(cert.PublicKey); err != nil {
		return nil, fmt.Errorf("CA certificate %q: %w", cert.Subject, err)
	}
	key, err := v1.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("CA key: unsupported type %T", key)
	}
	if pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("CA key does not match the CA certificate %q", cert.Subject)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{cert: cert, parents: certs[1:], key: signer, pool: pool}, nil
}

func checkSecretMode(path string) error {
	info, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	if info.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%s is readable by others (mode %04o); chmod 600 it", path, info.Mode().Perm())
	}
	return nil
}

// Certificate returns the issuing CA certificate.
func (c *CA) Certificate() *x509.Certificate { return c.cert }

// Pool holds the issuing CA as the only trust anchor.
func (c *CA) Pool() *x509.CertPool { return c.pool }

// BundlePEM is the trust anchor handed to nodes and clients.
func (c *CA) BundlePEM() []byte { return v1.EncodeCertificatesPEM(c.cert) }

// Pin is the CA's "sha256:" public key pin.
func (c *CA) Pin() string { return v1.CAPin(c.cert) }

// ChainPEM is the leaf followed by the issuing CA and its parents.
func (c *CA) ChainPEM(leaf *x509.Certificate) []byte {
	return v1.EncodeCertificatesPEM(append([]*x509.Certificate{leaf, c.cert}, c.parents...)...)
}

// Leaf describes a certificate to issue. The subject is built here from
// these fields only; nothing is copied from a CSR but its public key and
// the SANs the caller has already checked.
type Leaf struct {
	CommonName   string
	Organization string
	// MoreOrganizations follow Organization: a user's directory groups.
	MoreOrganizations []string
	// SubjectSerial carries the node record's UID, so that a certificate
	// of a deleted node does not authenticate a new node of the same name.
	SubjectSerial string
	DNSNames      []string
	IPs           []net.IP
	PublicKey     crypto.PublicKey
	Lifetime      time.Duration
	ServerAuth    bool
}

// Issue signs a leaf certificate. Its lifetime never outlasts the CA.
func (c *CA) Issue(l Leaf, now time.Time) (*x509.Certificate, error) {
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(l.Lifetime)
	if notAfter.After(c.cert.NotAfter) {
		notAfter = c.cert.NotAfter
	}
	usage := x509.KeyUsageDigitalSignature
	if _, isRSA := l.PublicKey.(*rsa.PublicKey); isRSA {
		usage |= x509.KeyUsageKeyEncipherment
	}
	ext := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if l.ServerAuth {
		ext = append(ext, x509.ExtKeyUsageServerAuth)
	}
	// Short-lived certificates get a proportionally small backdate, so
	// that "two thirds of the lifetime" still lies in the future.
	skew := min(clockSkew, l.Lifetime/10)
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject: pkix.Name{
			CommonName:   l.CommonName,
			Organization: append([]string{l.Organization}, l.MoreOrganizations...),
			SerialNumber: l.SubjectSerial,
		},
		NotBefore:             now.Add(-skew),
		NotAfter:              notAfter,
		KeyUsage:              usage,
		ExtKeyUsage:           ext,
		BasicConstraintsValid: true,
		DNSNames:              l.DNSNames,
		IPAddresses:           l.IPs,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, l.PublicKey, c.key)
	if err != nil {
		return nil, fmt.Errorf("sign certificate for %s: %w", l.CommonName, err)
	}
	return x509.ParseCertificate(der)
}

// Verify checks that cert was issued by this CA, is valid now, and allows
// client authentication.
func (c *CA) Verify(cert *x509.Certificate, now time.Time) error {
	_, err := cert.Verify(x509.VerifyOptions{
		Roots:       c.pool,
		CurrentTime: now,
		KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	return err
}

// CheckKeyStrength refuses keys too weak to trust: RSA under 2048 bits and
// elliptic curves under 256 bits.
func CheckKeyStrength(pub crypto.PublicKey) error {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve.Params().BitSize < 256 {
			return fmt.Errorf("ECDSA curve %s is weaker than P-256", k.Curve.Params().Name)
		}
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return fmt.Errorf("RSA key of %d bits is shorter than 2048", k.N.BitLen())
		}
	case ed25519.PublicKey:
	default:
		return fmt.Errorf("key type %T is not ECDSA, RSA or Ed25519", pub)
	}
	return nil
}

func randomSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("random serial: %w", err)
	}
	return serial.Add(serial, big.NewInt(1)), nil
}
