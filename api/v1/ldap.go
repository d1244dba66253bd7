package v1

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/harmonykaas/harmony/internal/lazyregexp"
)

// PathLDAP is the controller's one LDAP or Active Directory source of users.
const PathLDAP = "/api/v1/ldap"

// UserSourceLDAP marks a user who signs in with a directory password; the
// controller keeps their record only as a cache of the directory's answer.
const UserSourceLDAP = "ldap"

// Placeholders in the search filters, replaced by escaped values.
const (
	LDAPUsernamePlaceholder = "{username}"
	LDAPDNPlaceholder       = "{dn}"
)

// LDAP limits.
const (
	// MaxLDAPGroupDepth bounds how deep nested groups are followed.
	MaxLDAPGroupDepth = 10
	// MaxLDAPGroups bounds the groups one user is taken to be in.
	MaxLDAPGroups = 1000
	// DefaultLDAPTimeout bounds each directory operation.
	DefaultLDAPTimeout = 10 * time.Second
)

// CodeLDAPUnreachable: the directory did not answer, or refused the
// service account's bind, when the settings were applied or a user
// refreshed their session.
const CodeLDAPUnreachable = "ldap_unreachable"

// LDAP is how the controller finds directory users and their groups. The
// bind password is write only: kept as a secret, never returned.
type LDAP struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// URL is ldaps://host[:port], or ldap://host[:port] with StartTLS:
	// a directory password never crosses the network in clear.
	URL      string `json:"url"`
	StartTLS bool   `json:"startTLS,omitempty"`
	// CA is the PEM of the CAs that sign the directory's certificate;
	// without it the system roots must.
	CA string `json:"ca,omitempty"`
	// BindDN and BindPassword are the service account that searches.
	BindDN       string          `json:"bindDN"`
	BindPassword string          `json:"bindPassword,omitempty"`
	UserSearch   LDAPUserSearch  `json:"userSearch"`
	GroupSearch  LDAPGroupSearch `json:"groupSearch"`
	// GroupRoles maps directory groups to Harmony roles. A member of an
	// admin group is an admin. When any user group is mapped, only members
	// of a mapped group may sign in; otherwise every user the user filter
	// finds may, as a user.
	GroupRoles []LDAPGroupRole `json:"groupRoles,omitempty"`
	// TimeoutSeconds bounds each directory operation; default 10.
	TimeoutSeconds int `json:"timeoutSeconds,omitempty"`

	UpdatedAt time.Time `json:"updatedAt,omitzero"`
}

// LDAPUserSearch finds a user's entry by the name they sign in with.
type LDAPUserSearch struct {
	BaseDN string `json:"baseDN"`
	// Filter holds {username}. It is where disabled accounts are left
	// out, as in Active Directory's
	// (&(objectClass=user)(sAMAccountName={username})(!(userAccountControl:1.2.840.113556.1.4.803:=2))).
	Filter string `json:"filter"`
}

// LDAPGroupSearch finds the groups an entry is a direct member of; the
// controller follows it up to MaxLDAPGroupDepth levels for nested groups.
type LDAPGroupSearch struct {
	BaseDN string `json:"baseDN"`
	// Filter holds {dn}; default (member={dn}).
	Filter string `json:"filter,omitempty"`
	// NameAttribute names a group in grants and credentials; default cn.
	NameAttribute string `json:"nameAttribute,omitempty"`
}

// LDAPGroupRole gives the members of a directory group a Harmony role.
type LDAPGroupRole struct {
	Group string   `json:"group"`
	Role  UserRole `json:"role"`
}

// Redacted returns the settings as the API shows them.
func (l LDAP) Redacted() LDAP {
	l.BindPassword = ""
	return l
}

// OperationTimeout is the bound on each directory operation.
func (l *LDAP) OperationTimeout() time.Duration {
	if l.TimeoutSeconds > 0 {
		return time.Duration(l.TimeoutSeconds) * time.Second
	}
	return DefaultLDAPTimeout
}

// LDAPLookupRequest is the body of POST PathLDAP/lookup: look a user up as a
// sign-in would, without their password and without signing them in.
type LDAPLookupRequest struct {
	Username string `json:"username"`
}

// LDAPUserInfo answers a lookup: what the directory says of them.
type LDAPUserInfo struct {
	Username string   `json:"username"`
	DN       string   `json:"dn"`
	Groups   []string `json:"groups"`
	// Role is what they would sign in as; "" when no mapped group lets
	// them sign in.
	Role UserRole `json:"role,omitempty"`
}

// DecodeLDAP reads and validates LDAP settings.
func DecodeLDAP(r io.Reader) (*LDAP, error) {
	var l LDAP
	if err := decodeStrict(r, MaxAdminBytes, &l); err != nil {
		return nil, err
	}
	l.applyDefaults()
	return &l, l.Validate()
}

func (l *LDAP) applyDefaults() {
	if l.GroupSearch.Filter == "" {
		l.GroupSearch.Filter = "(member=" + LDAPDNPlaceholder + ")"
	}
	if l.GroupSearch.NameAttribute == "" {
		l.GroupSearch.NameAttribute = "cn"
	}
}

// Validate checks every field and names the first one that is wrong. A
// missing bind password is allowed: applying again keeps the stored one.
func (l *LDAP) Validate() error {
	if l.APIVersion != APIVersion {
		return fieldErr("apiVersion", "must be %q, got %q", APIVersion, l.APIVersion)
	}
	if l.Kind != "LDAP" {
		return fieldErr("kind", "must be \"LDAP\", got %q", l.Kind)
	}
	u, err := url.Parse(l.URL)
	switch {
	case l.URL == "":
		return fieldErr("url", "is required")
	case err != nil || u.Host == "" || (u.Path != "" && u.Path != "/"):
		return fieldErr("url", "%q is not a directory URL such as ldaps://ad.example.com:636", l.URL)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return fieldErr("url", "must not carry credentials, a query or a fragment")
	case u.Scheme == "ldaps" && l.StartTLS:
		return fieldErr("startTLS", "ldaps:// is TLS already; StartTLS is for ldap://")
	case u.Scheme == "ldap" && !l.StartTLS:
		return fieldErr("url", "ldap:// without startTLS would send passwords in clear: use ldaps:// or set startTLS")
	case u.Scheme != "ldap" && u.Scheme != "ldaps":
		return fieldErr("url", "must be ldaps:// or ldap:// with startTLS, got %q", u.Scheme)
	}
	if l.CA != "" {
		if err := checkCABundle(l.CA); err != nil {
			return fieldErr("ca", "%v", err)
		}
	}
	if err := checkDN("bindDN", l.BindDN); err != nil {
		return err
	}
	if len(l.BindPassword) > 1024 || strings.ContainsRune(l.BindPassword, 0) {
		return fieldErr("bindPassword", "must be at most 1024 characters without NUL")
	}
	if err := checkDN("userSearch.baseDN", l.UserSearch.BaseDN); err != nil {
		return err
	}
	if err := checkFilter("userSearch.filter", l.UserSearch.Filter, LDAPUsernamePlaceholder); err != nil {
		return err
	}
	if err := checkDN("groupSearch.baseDN", l.GroupSearch.BaseDN); err != nil {
		return err
	}
	if err := checkFilter("groupSearch.filter", l.GroupSearch.Filter, LDAPDNPlaceholder); err != nil {
		return err
	}
	if !attributePattern.MatchString(l.GroupSearch.NameAttribute) {
		return fieldErr("groupSearch.nameAttribute", "%q is not an attribute name", l.GroupSearch.NameAttribute)
	}
	seen := map[string]bool{}
	for i, gr := range l.GroupRoles {
		f := fmt.Sprintf("groupRoles[%d]", i)
		if err := ValidateGroupName(f+".group", gr.Group); err != nil {
			return err
		}
		if seen[gr.Group] {
			return fieldErr(f+".group", "%q is mapped twice", gr.Group)
		}
		seen[gr.Group] = true
		if err := gr.Role.validate(f + ".role"); err != nil {
			return err
		}
	}
	if l.TimeoutSeconds < 0 || l.TimeoutSeconds > 60 {
		return fieldErr("timeoutSeconds", "must be between 0 (the default, %d) and 60", int(DefaultLDAPTimeout/time.Second))
	}
	return nil
}

// attributePattern is an LDAP attribute description without options.
var attributePattern = lazyregexp.New(`^[A-Za-z][A-Za-z0-9-]{0,63}$`)

// checkDN refuses an empty, oversized or malformed distinguished name.
func checkDN(field, dn string) error {
	switch {
	case dn == "":
		return fieldErr(field, "is required")
	case len(dn) > 1024 || strings.ContainsAny(dn, "\x00\r\n"):
		return fieldErr(field, "must be at most 1024 characters on one line")
	case !strings.Contains(dn, "="):
		return fieldErr(field, "%q is not a distinguished name such as ou=people,dc=example,dc=com", dn)
	}
	return nil
}

// checkFilter checks the shape of a search filter with its placeholder;
// the directory client compiles it with the placeholder filled.
func checkFilter(field, filter, placeholder string) error {
	switch {
	case filter == "":
		return fieldErr(field, "is required")
	case len(filter) > 2048 || strings.ContainsAny(filter, "\x00\r\n"):
		return fieldErr(field, "must be at most 2048 characters on one line")
	case !strings.HasPrefix(filter, "(") || !strings.HasSuffix(filter, ")"):
		return fieldErr(field, "%q is not an LDAP filter: it must be in parentheses", filter)
	case strings.Count(filter, "(") != strings.Count(filter, ")"):
		return fieldErr(field, "%q has unbalanced parentheses", filter)
	case !strings.Contains(filter, placeholder):
		return fieldErr(field, "must contain %s", placeholder)
	}
	return nil
}

// checkCABundle accepts PEM with at least one certificate and nothing else.
func checkCABundle(bundle string) error {
	rest := []byte(bundle)
	n := 0
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return fmt.Errorf("holds a %q block; only certificates belong here", b.Type)
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return fmt.Errorf("certificate %d: %v", n+1, err)
		}
		n++
	}
	if n == 0 || strings.TrimSpace(string(rest)) != "" {
		return fmt.Errorf("is not a PEM bundle of certificates")
	}
	return nil
}

// DecodeLDAPLookupRequest reads a lookup.
func DecodeLDAPLookupRequest(r io.Reader) (*LDAPLookupRequest, error) {
	var t LDAPLookupRequest
	if err := decodeStrict(r, MaxAuthBytes, &t); err != nil {
		return nil, err
	}
	if t.Username == "" || len(t.Username) > 256 {
		return nil, fieldErr("username", "must be 1 to 256 characters")
	}
	return &t, nil
}
