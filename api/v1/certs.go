package v1

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/harmonykaas/harmony/internal/lazyregexp"
)

// OrgControllers marks the controller's serving certificate. Agents and
// harmonyctl accept a server only with it: every certificate from the CA
// (a node's too) chains to the same root, so the chain alone does not say
// "this is the controller".
const OrgControllers = "harmony:controllers"

// Paths of the certificate API.
const (
	// PathCertificates lists admin and scraper certificates (GET);
	// PathCertificates/{serial}/revoke revokes one (POST).
	PathCertificates = "/api/v1/certificates"
	// PathAdminCert renews the caller's admin certificate for a CSR.
	PathAdminCert = "/api/v1/certificates/admin"
)

// Certificate is an admin or scraper certificate as the controller records
// it. Requests with a revoked one, or one it has no record of, are refused.
type Certificate struct {
	// Serial is the certificate's serial number in lower-case hex.
	Serial    string    `json:"serial"`
	Kind      string    `json:"kind"`
	Name      string    `json:"name"`
	IssuedAt  time.Time `json:"issuedAt"`
	NotAfter  time.Time `json:"notAfter"`
	IssuedBy  string    `json:"issuedBy,omitempty"`
	RevokedAt time.Time `json:"revokedAt,omitzero"`
	RevokedBy string    `json:"revokedBy,omitempty"`
	// Current marks the certificate the request was made with.
	Current bool `json:"current,omitempty"`
}

// CertificateList answers GET PathCertificates.
type CertificateList struct {
	Items []Certificate `json:"items"`
}

// AdminCertRequest renews the caller's admin certificate: a new key, made
// where the admin runs harmonyctl, and its CSR.
type AdminCertRequest struct {
	CSR string `json:"csr"`
}

// DecodeAdminCertRequest reads and validates an admin renewal body.
func DecodeAdminCertRequest(r io.Reader) (*AdminCertRequest, *x509.CertificateRequest, error) {
	var req AdminCertRequest
	if err := decodeStrict(r, MaxEnrollBytes, &req); err != nil {
		return nil, nil, err
	}
	csr, err := ParseCSR(req.CSR)
	if err != nil {
		return nil, nil, err
	}
	return &req, csr, nil
}

var serialPattern = lazyregexp.New(`^[0-9a-f]{1,40}$`)

// ValidateSerial checks a certificate serial as the API spells it.
func ValidateSerial(s string) error {
	if !serialPattern.MatchString(s) {
		return fieldErr("serial", "%q is not a certificate serial (lower-case hex, at most 40 digits)", s)
	}
	return nil
}

// ErrNotController is VerifyController's refusal.
var ErrNotController = errors.New("the server is not a Harmony controller")

// VerifyController is a tls.Config.VerifyConnection for clients of the
// controller: after the chain is verified, the server's certificate must
// be the controller's (organization OrgControllers).
func VerifyController(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return fmt.Errorf("%w: it sent no certificate", ErrNotController)
	}
	leaf := cs.PeerCertificates[0]
	if !slices.Equal(leaf.Subject.Organization, []string{OrgControllers}) {
		return fmt.Errorf("%w: its certificate (%q, organization %q) is not of organization %s",
			ErrNotController, leaf.Subject.CommonName, leaf.Subject.Organization, OrgControllers)
	}
	return nil
}
