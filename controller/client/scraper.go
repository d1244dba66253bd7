package client

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// ScraperCredential is a metrics scraper's key, certificate and the CA
// that verifies agents and the controller, all PEM.
type ScraperCredential struct {
	Key, Certificate, CABundle []byte
}

// IssueScraperCert makes a key here, has the controller sign it as a
// metrics scraper named name, and returns the credential. The key never
// leaves this process.
func (c *Client) IssueScraperCert(ctx context.Context, name string) (*ScraperCredential, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: name}}, key)
	if err != nil {
		return nil, fmt.Errorf("scraper CSR: %w", err)
	}
	var res v1.CertificateResponse
	if err := c.Do(ctx, "POST", v1.PathScraperCert, v1.ScraperCertRequest{Name: name, CSR: v1.EncodeCSR(der)}, &res); err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &ScraperCredential{
		Key:         pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		Certificate: []byte(res.Certificate),
		CABundle:    []byte(res.CABundle),
	}, nil
}
