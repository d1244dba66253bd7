package v1

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
)

// EnrollRequest is posted, over server-authenticated TLS, to PathEnroll.
type EnrollRequest struct {
	Token string `json:"token"`
	// CSR is a PEM "CERTIFICATE REQUEST" made with a key that never left
	// the node.
	CSR string `json:"csr"`
}

// RenewRequest is posted, over mutual TLS with the current certificate, to
// PathRenew. The identity is the client certificate's.
type RenewRequest struct {
	CSR string `json:"csr"`
}

// CertificateResponse answers enrollment, renewal and scraper issuance.
type CertificateResponse struct {
	// Certificate is the PEM chain: the leaf first, then the issuing CA and
	// any parents.
	Certificate string `json:"certificate"`
	// CABundle is the PEM trust anchor for the controller and for peers.
	CABundle string `json:"caBundle"`
}

// DecodeEnrollRequest reads and validates an enrollment body. It checks the
// shapes only; the token and CSR are judged by the controller.
func DecodeEnrollRequest(r io.Reader) (*EnrollRequest, *x509.CertificateRequest, error) {
	var req EnrollRequest
	if err := decodeStrict(r, MaxEnrollBytes, &req); err != nil {
		return nil, nil, err
	}
	if req.Token == "" {
		return nil, nil, fieldErr("token", "is required")
	}
	csr, err := ParseCSR(req.CSR)
	if err != nil {
		return nil, nil, err
	}
	return &req, csr, nil
}

// DecodeRenewRequest reads and validates a renewal body.
func DecodeRenewRequest(r io.Reader) (*x509.CertificateRequest, error) {
	var req RenewRequest
	if err := decodeStrict(r, MaxEnrollBytes, &req); err != nil {
		return nil, err
	}
	return ParseCSR(req.CSR)
}

// ParseCSR parses one PEM certificate request. It does not check the
// signature; the controller does, so that it can name the failure.
func ParseCSR(text string) (*x509.CertificateRequest, error) {
	if text == "" {
		return nil, fieldErr("csr", "is required")
	}
	block, rest := pem.Decode([]byte(text))
	if block == nil {
		return nil, fieldErr("csr", "is not PEM")
	}
	if block.Type != "CERTIFICATE REQUEST" {
		return nil, fieldErr("csr", "PEM block is %q, want \"CERTIFICATE REQUEST\"", block.Type)
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, fieldErr("csr", "holds more than one PEM block")
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fieldErr("csr", "cannot be parsed: %v", err)
	}
	return csr, nil
}

// EncodeCSR returns the PEM of a DER certificate request.
func EncodeCSR(der []byte) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

// ScraperCertRequest asks the controller for a metrics scraper certificate.
type ScraperCertRequest struct {
	// Name becomes the certificate's CN, such as "prometheus".
	Name string `json:"name"`
	CSR  string `json:"csr"`
}

// DecodeScraperCertRequest reads and validates a scraper certificate body.
func DecodeScraperCertRequest(r io.Reader) (*ScraperCertRequest, *x509.CertificateRequest, error) {
	var req ScraperCertRequest
	if err := decodeStrict(r, MaxEnrollBytes, &req); err != nil {
		return nil, nil, err
	}
	if err := ValidateNodeName(req.Name); err != nil {
		return nil, nil, fieldErr("name", "%v", err)
	}
	csr, err := ParseCSR(req.CSR)
	if err != nil {
		return nil, nil, err
	}
	return &req, csr, nil
}

// String makes request logs useful without printing the token.
func (r *EnrollRequest) String() string {
	id, _, err := SplitToken(r.Token)
	if err != nil {
		return "EnrollRequest{token: malformed}"
	}
	return fmt.Sprintf("EnrollRequest{token id: %s}", id)
}
