package v1

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/harmonykaas/harmony/internal/lazyregexp"
)

// GuestinfoKey is the VMware guestinfo key the controller writes a VM's
// bootstrap document into, as base64 JSON.
const GuestinfoKey = "guestinfo.harmony.bootstrap"

// OVFPropertyKey is the OVF environment property that may carry the same
// document (base64 JSON) when a VM is deployed from an OVA with vApp options.
const OVFPropertyKey = "harmony.bootstrap"

// Bootstrap is the one-time document a VM starts from: where the controller
// is, how to trust it, who the node is, and a single-use token. Nothing
// else: the role arrives later, over mutual TLS.
type Bootstrap struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Controllers are the controller's https URLs, tried in order.
	Controllers []string `json:"controllers"`
	// CABundle is the PEM of the CA that issues the controller's and the
	// node's certificates. Either it or CAPin must be set.
	CABundle string `json:"caBundle,omitempty"`
	// CAPin is "sha256:" and the hex SHA-256 of a CA certificate's
	// SubjectPublicKeyInfo, as kubeadm's discovery hash.
	CAPin    string `json:"caPin,omitempty"`
	NodeName string `json:"nodeName"`
	// Token is "<id>.<secret>". The agent removes it once it has enrolled.
	Token string `json:"token,omitempty"`
}

const maxControllers = 16

var (
	tokenPattern   = lazyregexp.New(`^([0-9a-f]{16})\.([0-9a-f]{64})$`)
	pinPattern     = lazyregexp.New(`^sha256:[0-9a-f]{64}$`)
	dnsLabel       = `[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?`
	nodeNameRegexp = lazyregexp.New(`^` + dnsLabel + `(\.` + dnsLabel + `)*$`)
)

// DecodeBootstrap parses a bootstrap document given either as JSON or as
// base64 JSON (the guestinfo form), and validates it.
func DecodeBootstrap(data []byte) (*Bootstrap, error) {
	if len(data) > MaxBootstrapBytes {
		return nil, &FieldError{Problem: fmt.Sprintf("bootstrap document is larger than %d bytes", MaxBootstrapBytes)}
	}
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] != '{' {
		decoded, err := base64.StdEncoding.DecodeString(string(data))
		if err != nil {
			return nil, &FieldError{Problem: "bootstrap document is neither JSON nor base64 JSON"}
		}
		data = decoded
	}
	var b Bootstrap
	if err := unmarshalStrict(data, &b); err != nil {
		return nil, fmt.Errorf("bootstrap document: %w", err)
	}
	if err := b.Validate(); err != nil {
		return nil, fmt.Errorf("bootstrap document: %w", err)
	}
	return &b, nil
}

// Validate checks every field. The token may be absent (already used).
func (b *Bootstrap) Validate() error {
	if b.APIVersion != APIVersion {
		return fieldErr("apiVersion", "must be %q, got %q", APIVersion, b.APIVersion)
	}
	if b.Kind != "Bootstrap" {
		return fieldErr("kind", "must be \"Bootstrap\", got %q", b.Kind)
	}
	if err := ValidateControllers(b.Controllers); err != nil {
		return err
	}
	if b.CABundle == "" && b.CAPin == "" {
		return fieldErr("caBundle", "either caBundle or caPin is required")
	}
	if b.CABundle != "" {
		certs, err := ParseCertificatesPEM([]byte(b.CABundle))
		if err != nil {
			return fieldErr("caBundle", "%v", err)
		}
		if b.CAPin != "" && !PinMatchesAny(b.CAPin, certs) {
			return fieldErr("caPin", "matches no certificate in caBundle")
		}
	}
	if b.CAPin != "" && !pinPattern.MatchString(b.CAPin) {
		return fieldErr("caPin", "must be \"sha256:\" and 64 lowercase hex digits")
	}
	if err := ValidateNodeName(b.NodeName); err != nil {
		return fieldErr("nodeName", "%v", err)
	}
	if b.Token != "" {
		if _, _, err := SplitToken(b.Token); err != nil {
			return fieldErr("token", "%v", err)
		}
	}
	return nil
}

// EncodeGuestinfo returns the base64 JSON form written into guestinfo.
func (b *Bootstrap) EncodeGuestinfo() (string, error) {
	data, err := json.Marshal(b)
	if err != nil {
		return "", fmt.Errorf("encode bootstrap: %w", err)
	}
	return base64.StdEncoding.EncodeToString(data), nil
}

// ValidateControllers checks a list of controller URLs, as a bootstrap
// document and the agent's enrollment record carry it.
func ValidateControllers(urls []string) error {
	if len(urls) == 0 {
		return fieldErr("controllers", "at least one controller URL is required")
	}
	if len(urls) > maxControllers {
		return fieldErr("controllers", "at most %d URLs, got %d", maxControllers, len(urls))
	}
	for i, raw := range urls {
		if err := ValidateControllerURL(raw); err != nil {
			return fieldErr(fmt.Sprintf("controllers[%d]", i), "%v", err)
		}
	}
	return nil
}

// ValidateControllerURL accepts only https URLs with a host and no
// credentials, path, query or fragment.
func ValidateControllerURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("not a URL: %v", err)
	}
	// Paths are appended to the URL, so even an empty query or fragment
	// ("https://c?") would swallow them.
	if strings.ContainsAny(raw, "?#") {
		return fmt.Errorf("must have no query or fragment")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %q is not between 1 and 65535", p)
		}
	}
	switch {
	case u.Scheme != "https":
		return fmt.Errorf("scheme must be https, got %q", u.Scheme)
	case u.Host == "" || u.Hostname() == "":
		return fmt.Errorf("host is empty")
	case u.User != nil:
		return fmt.Errorf("must not carry credentials")
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "":
		return fmt.Errorf("must have no path, query or fragment")
	}
	return nil
}

// ValidateNodeName accepts a lowercase DNS name (RFC 1123 subdomain), as
// Kubernetes does for node names.
func ValidateNodeName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("is empty")
	case len(name) > 253:
		return fmt.Errorf("is longer than 253 characters")
	case !nodeNameRegexp.MatchString(name):
		return fmt.Errorf("%q is not a lowercase DNS name (a-z, 0-9, '-', '.')", name)
	}
	return nil
}

// SplitToken returns a token's public id and secret, or an error if the
// token is not of the form "<16 hex>.<64 hex>".
func SplitToken(token string) (id, secret string, err error) {
	m := tokenPattern.FindStringSubmatch(token)
	if m == nil {
		return "", "", fmt.Errorf("must be 16 hex digits, a dot and 64 hex digits")
	}
	return m[1], m[2], nil
}

// ParseCertificatesPEM parses every CERTIFICATE block; it needs at least one
// and refuses any other block type.
func ParseCertificatesPEM(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	rest := data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("unexpected PEM block %q", block.Type)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %v", len(certs)+1, err)
		}
		certs = append(certs, cert)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("no PEM certificate found")
	}
	if len(strings.TrimSpace(string(rest))) != 0 {
		return nil, fmt.Errorf("trailing data after the last PEM certificate")
	}
	return certs, nil
}

// EncodeCertificatesPEM is the inverse of ParseCertificatesPEM.
func EncodeCertificatesPEM(certs ...*x509.Certificate) []byte {
	var buf bytes.Buffer
	for _, c := range certs {
		_ = pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return buf.Bytes()
}

// CAPin returns the "sha256:<hex>" pin of a certificate's public key.
func CAPin(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// PinMatchesAny reports whether pin is the pin of one of certs.
func PinMatchesAny(pin string, certs []*x509.Certificate) bool {
	for _, c := range certs {
		if CAPin(c) == pin {
			return true
		}
	}
	return false
}
