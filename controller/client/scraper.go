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
	"net/url"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// Credential is a key made here, the certificate the controller issued
// for it, and the CA that verifies the controller and the agents, all PEM.
type Credential struct {
	Key, Certificate, CABundle []byte
}

// IssueScraperCert makes a key here, has the controller sign it as a
// metrics scraper named name, and returns the credential. The key never
// leaves this process.
func (c *Client) IssueScraperCert(ctx context.Context, name string) (*Credential, error) {
	return c.issue(ctx, name, func(csr string) (string, any) {
		return v1.PathScraperCert, v1.ScraperCertRequest{Name: name, CSR: csr}
	})
}

// RenewAdminCert makes a new key here and has the controller issue the
// caller a new admin certificate for it, under the caller's name.
func (c *Client) RenewAdminCert(ctx context.Context) (*Credential, error) {
	return c.issue(ctx, "admin", func(csr string) (string, any) {
		return v1.PathAdminCert, v1.AdminCertRequest{CSR: csr}
	})
}

// Certificates lists the admin and scraper certificates.
func (c *Client) Certificates(ctx context.Context) (*v1.CertificateList, error) {
	var list v1.CertificateList
	return &list, c.Do(ctx, "GET", v1.PathCertificates, nil, &list)
}

// RevokeCert revokes an admin or scraper certificate by serial.
func (c *Client) RevokeCert(ctx context.Context, serial string) (*v1.Certificate, error) {
	var cert v1.Certificate
	return &cert, c.Do(ctx, "POST", v1.PathCertificates+"/"+url.PathEscape(serial)+"/revoke", nil, &cert)
}

func (c *Client) issue(ctx context.Context, cn string, request func(csr string) (path string, body any)) (*Credential, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn}}, key)
	if err != nil {
		return nil, fmt.Errorf("CSR: %w", err)
	}
	path, body := request(v1.EncodeCSR(der))
	var res v1.CertificateResponse
	if err := c.Do(ctx, "POST", path, body, &res); err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &Credential{
		Key:         pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		Certificate: []byte(res.Certificate),
		CABundle:    []byte(res.CABundle),
	}, nil
}
