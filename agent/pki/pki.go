// Package pki makes the node's leaf certificates from the cluster CAs the
// role delivers (etcd server, peer and client certificates, the
// apiserver's etcd client certificate). A certificate already on disk is
// kept while it still matches what is asked and is far from expiry, so
// that a restarted agent changes nothing.
package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"slices"
	"time"

	"github.com/harmonykaas/harmony/agent/files"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// CA signs leaf certificates.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	key     crypto.Signer
}

// LoadCA parses a CA key pair from the role.
func LoadCA(kp *v1.KeyPair) (*CA, error) {
	if kp == nil {
		return nil, errors.New("no CA in the role")
	}
	certs, err := v1.ParseCertificatesPEM([]byte(kp.Certificate))
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	if kp.Key == "" {
		return nil, errors.New("the role carries the CA certificate without its key")
	}
	key, err := v1.ParsePrivateKeyPEM([]byte(kp.Key))
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("CA key of type %T cannot sign", key)
	}
	return &CA{Cert: certs[0], CertPEM: []byte(kp.Certificate), key: signer}, nil
}

// Leaf says what certificate is wanted.
type Leaf struct {
	CommonName   string
	Organization []string
	DNSNames     []string
	IPs          []net.IP
	// Usages: x509.ExtKeyUsageServerAuth and/or ClientAuth.
	Usages []x509.ExtKeyUsage
	// Validity defaults to one year.
	Validity time.Duration
}

// DefaultValidity of a leaf certificate. The agent re-issues at two thirds
// of it, on any reconcile pass.
const DefaultValidity = 365 * 24 * time.Hour

// Ensure makes certPath and keyPath (0600) hold a certificate for leaf
// signed by ca. An existing pair is kept when it is signed by ca, matches
// leaf, and has more than a third of its life left. changed reports a
// new pair.
func (ca *CA) Ensure(certPath, keyPath string, leaf Leaf) (changed bool, err error) {
	return ca.EnsureOwing(certPath, keyPath, leaf, nil)
}

// EnsureOwing is Ensure for a pair that a running program reads at start:
// before the new pair replaces the old, owe (if not nil) records that the
// program must read it again (reconcile.Host.OweReload). An agent killed
// between the two leaves the debt, not a pair nothing will re-read.
func (ca *CA) EnsureOwing(certPath, keyPath string, leaf Leaf, owe func() error) (changed bool, err error) {
	if ca.current(certPath, keyPath, leaf) {
		return false, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return false, fmt.Errorf("leaf key for %s: %w", leaf.CommonName, err)
	}
	validity := leaf.Validity
	if validity == 0 {
		validity = DefaultValidity
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return false, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: leaf.CommonName, Organization: leaf.Organization},
		DNSNames:     leaf.DNSNames,
		IPAddresses:  leaf.IPs,
		NotBefore:    now.Add(-5 * time.Minute),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  leaf.Usages,
	}
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		return false, fmt.Errorf("sign %s: %w", leaf.CommonName, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return false, err
	}
	if owe != nil {
		if err := owe(); err != nil {
			return false, err
		}
	}
	// Key first: a crash between the two leaves a key that matches no
	// certificate, which the next pass replaces.
	if _, err := files.Write(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600, nil); err != nil {
		return false, err
	}
	if _, err := files.Write(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644, nil); err != nil {
		return false, err
	}
	return true, nil
}

// current reports whether the pair on disk can stay.
func (ca *CA) current(certPath, keyPath string, leaf Leaf) bool {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return false
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return false
	}
	certs, err := v1.ParseCertificatesPEM(certPEM)
	if err != nil {
		return false
	}
	cert := certs[0]
	if cert.CheckSignatureFrom(ca.Cert) != nil || !bytes.Equal(cert.RawIssuer, ca.Cert.RawSubject) {
		return false
	}
	if RenewalDue(cert, time.Now()) {
		return false
	}
	if cert.Subject.CommonName != leaf.CommonName || !slices.Equal(cert.Subject.Organization, leaf.Organization) ||
		!slices.Equal(cert.DNSNames, leaf.DNSNames) || !slices.Equal(cert.ExtKeyUsage, leaf.Usages) ||
		!slices.EqualFunc(cert.IPAddresses, leaf.IPs, net.IP.Equal) {
		return false
	}
	key, err := v1.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return false
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return false
	}
	pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool })
	return ok && pub.Equal(cert.PublicKey)
}

// RenewalDue reports whether cert, at now, is in the last third of its
// life (or past it): when the agent replaces a leaf it keeps, early
// enough that a renewal that fails has a third of the certificate's life
// to be noticed (the expiry metrics) and mended.
func RenewalDue(cert *x509.Certificate, now time.Time) bool {
	life := cert.NotAfter.Sub(cert.NotBefore)
	return cert.NotAfter.Sub(now) < life/3
}

// WriteCACert makes path hold the CA certificate alone (no key), for
// daemons that verify peers; owe, if not nil, records that they must read
// it again before it is replaced (files.WriteOwing).
func (ca *CA) WriteCACert(path string, owe func() error) (changed bool, err error) {
	return files.WriteOwing(path, ca.CertPEM, 0o644, nil, owe)
}

// NewCA makes a self-signed ECDSA P-256 CA, as the role carries it. The
// controller owns the real clusters' CAs; the lab and tests use this.
func NewCA(commonName string, validity time.Duration) (*v1.KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: commonName},
		NotBefore: now.Add(-5 * time.Minute), NotAfter: now.Add(validity),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("self-sign %s: %w", commonName, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &v1.KeyPair{
		Certificate: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		Key:         string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})),
	}, nil
}

// NewKey makes an ECDSA P-256 private key, PEM PKCS#8, such as the
// service account signing key.
func NewKey() (string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", err
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), nil
}
