package v1

import (
	"fmt"
	"io"
	"net/netip"
	"time"
)

// Token lifetimes an admin may ask for.
const (
	DefaultTokenTTL = time.Hour
	MinTokenTTL     = time.Second
	MaxTokenTTL     = 7 * 24 * time.Hour
)

// NodeSpec is the body of POST PathNodes: a node record and its inventory.
type NodeSpec struct {
	Name     string   `json:"name"`
	Cluster  string   `json:"cluster"`
	Role     NodeRole `json:"role"`
	IPs      []string `json:"ips"`
	DNSNames []string `json:"dnsNames,omitempty"`
	// TokenTTL is a Go duration, such as "30m"; default 1h.
	TokenTTL string `json:"tokenTTL,omitempty"`
	// CAPinOnly puts the CA's pin, not its bundle, into the bootstrap
	// document; shorter for guestinfo.
	CAPinOnly bool `json:"caPinOnly,omitempty"`
}

// TokenRequest is the body of POST PathNodes/{name}/token: a new bootstrap
// token for an existing node. It revokes the node's unused tokens.
type TokenRequest struct {
	TokenTTL  string `json:"tokenTTL,omitempty"`
	CAPinOnly bool   `json:"caPinOnly,omitempty"`
}

// Node is a node record as the admin API shows it.
type Node struct {
	Name                string    `json:"name"`
	UID                 string    `json:"uid"`
	Cluster             string    `json:"cluster"`
	Role                NodeRole  `json:"role"`
	IPs                 []string  `json:"ips"`
	DNSNames            []string  `json:"dnsNames,omitempty"`
	CreatedAt           time.Time `json:"createdAt"`
	EnrolledAt          time.Time `json:"enrolledAt,omitzero"`
	CertificateSerial   string    `json:"certificateSerial,omitempty"`
	CertificateNotAfter time.Time `json:"certificateNotAfter,omitzero"`
	RoleRevision        int64     `json:"roleRevision"`
	Status              *Status   `json:"status,omitempty"`
}

// NodeWithBootstrap answers node creation and token issue.
type NodeWithBootstrap struct {
	Node      Node      `json:"node"`
	Bootstrap Bootstrap `json:"bootstrap"`
}

// NodeList answers GET PathNodes.
type NodeList struct {
	Items []Node `json:"items"`
}

// RoleList is the body of PUT PathRoles: several roles changed in one
// transaction, as a cluster-wide change needs.
type RoleList struct {
	Items []Role `json:"items"`
}

// DecodeNodeSpec reads and validates a node record.
func DecodeNodeSpec(r io.Reader) (*NodeSpec, time.Duration, error) {
	var s NodeSpec
	if err := decodeStrict(r, MaxAdminBytes, &s); err != nil {
		return nil, 0, err
	}
	ttl, err := s.Validate()
	return &s, ttl, err
}

// Validate checks a node spec and returns its token lifetime.
func (s *NodeSpec) Validate() (time.Duration, error) {
	if err := ValidateNodeName(s.Name); err != nil {
		return 0, fieldErr("name", "%v", err)
	}
	if !labelPattern.MatchString(s.Cluster) {
		return 0, fieldErr("cluster", "%q is not a lowercase DNS label", s.Cluster)
	}
	if !s.Role.Valid() {
		return 0, fieldErr("role", "must be appliance, master or worker, got %q", s.Role)
	}
	if len(s.IPs) == 0 {
		return 0, fieldErr("ips", "at least one IP address is required")
	}
	if len(s.IPs) > 32 {
		return 0, fieldErr("ips", "at most 32 IP addresses, got %d", len(s.IPs))
	}
	if len(s.DNSNames) > 32 {
		return 0, fieldErr("dnsNames", "at most 32 DNS names, got %d", len(s.DNSNames))
	}
	for i, ip := range s.IPs {
		a, err := netip.ParseAddr(ip)
		if err != nil {
			return 0, fieldErr(fmt.Sprintf("ips[%d]", i), "%q is not an IP address", ip)
		}
		if a.IsUnspecified() || a.IsMulticast() {
			return 0, fieldErr(fmt.Sprintf("ips[%d]", i), "%q is not a unicast address", ip)
		}
		s.IPs[i] = a.String()
	}
	for i, name := range s.DNSNames {
		if err := ValidateNodeName(name); err != nil {
			return 0, fieldErr(fmt.Sprintf("dnsNames[%d]", i), "%v", err)
		}
	}
	return ParseTokenTTL(s.TokenTTL, "tokenTTL")
}

// ParseTokenTTL parses a token lifetime; empty means the default.
func ParseTokenTTL(text, field string) (time.Duration, error) {
	if text == "" {
		return DefaultTokenTTL, nil
	}
	d, err := time.ParseDuration(text)
	if err != nil {
		return 0, fieldErr(field, "%q is not a duration such as 30m or 2h", text)
	}
	if d < MinTokenTTL || d > MaxTokenTTL {
		return 0, fieldErr(field, "must be between %s and %s, got %s", MinTokenTTL, MaxTokenTTL, d)
	}
	return d, nil
}

// DecodeTokenRequest reads and validates a token request. An empty body is
// a request with defaults.
func DecodeTokenRequest(r io.Reader) (*TokenRequest, time.Duration, error) {
	var t TokenRequest
	data, err := readLimited(r, MaxAdminBytes)
	if err != nil {
		return nil, 0, err
	}
	if len(data) > 0 {
		if err := unmarshalStrict(data, &t); err != nil {
			return nil, 0, err
		}
	}
	ttl, err := ParseTokenTTL(t.TokenTTL, "tokenTTL")
	return &t, ttl, err
}

// DecodeRoleList reads and validates a batch of roles.
func DecodeRoleList(r io.Reader) (*RoleList, error) {
	var l RoleList
	if err := decodeStrict(r, 64*MaxRoleBytes, &l); err != nil {
		return nil, err
	}
	if len(l.Items) == 0 {
		return nil, fieldErr("items", "at least one role is required")
	}
	seen := map[string]bool{}
	for i := range l.Items {
		if err := l.Items[i].Validate(); err != nil {
			return nil, prefixField(fmt.Sprintf("items[%d]", i), err)
		}
		if seen[l.Items[i].NodeName] {
			return nil, fieldErr(fmt.Sprintf("items[%d].nodeName", i), "%q appears twice", l.Items[i].NodeName)
		}
		seen[l.Items[i].NodeName] = true
	}
	return &l, nil
}

func prefixField(prefix string, err error) error {
	if fe, ok := err.(*FieldError); ok {
		f := prefix
		if fe.Field != "" {
			f += "." + fe.Field
		}
		return &FieldError{Field: f, Problem: fe.Problem}
	}
	return fmt.Errorf("%s: %w", prefix, err)
}
