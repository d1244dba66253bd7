package v1

import (
	"crypto/x509"
	"io"
	"time"
)

// GrantRole is what a grant lets a user do on one cluster. In Harmony:
// view and edit see the cluster and get a kubeconfig; admin also scales,
// retries, removes nodes, grants and revokes. In the cluster, each maps
// to the Kubernetes ClusterRole of the same name (admin to cluster-admin).
type GrantRole string

// Grant roles, weakest first.
const (
	GrantView  GrantRole = "view"
	GrantEdit  GrantRole = "edit"
	GrantAdmin GrantRole = "admin"
)

// Grant subject kinds, as in PathClusters/{name}/grants/{kind}/{subject}.
const (
	GrantKindUser  = "user"
	GrantKindGroup = "group"
)

func (r GrantRole) rank() int {
	switch r {
	case GrantView:
		return 1
	case GrantEdit:
		return 2
	case GrantAdmin:
		return 3
	}
	return 0
}

// AtLeast reports whether r allows what o does.
func (r GrantRole) AtLeast(o GrantRole) bool { return r.rank() > 0 && r.rank() >= o.rank() }

// Grant is one user's or group's role on a cluster.
type Grant struct {
	Cluster   string    `json:"cluster"`
	Kind      string    `json:"kind"`
	Subject   string    `json:"subject"`
	Role      GrantRole `json:"role"`
	CreatedAt time.Time `json:"createdAt"`
	By        string    `json:"by"`
}

// GrantList answers GET PathClusters/{name}/grants.
type GrantList struct {
	Items []Grant `json:"items"`
}

// GrantRequest is the body of POST PathClusters/{name}/grants: exactly one
// of user and group. A second grant to the same subject replaces the
// first.
type GrantRequest struct {
	User  string    `json:"user,omitempty"`
	Group string    `json:"group,omitempty"`
	Role  GrantRole `json:"role"`
}

// RevokeSessionsRequest is the body of POST
// PathClusters/{name}/revoke-sessions.
type RevokeSessionsRequest struct {
	User string `json:"user"`
}

// DecodeRevokeSessionsRequest reads and validates a revoke-sessions body.
func DecodeRevokeSessionsRequest(r io.Reader) (*RevokeSessionsRequest, error) {
	var q RevokeSessionsRequest
	if err := decodeStrict(r, MaxAuthBytes, &q); err != nil {
		return nil, err
	}
	if err := ValidateUserName("user", q.User); err != nil {
		return nil, err
	}
	return &q, nil
}

// maxGroupName bounds a group name: an LDAP group's DN or name.
const maxGroupName = 512

// DecodeGrantRequest reads and validates a grant.
func DecodeGrantRequest(r io.Reader) (*GrantRequest, error) {
	var g GrantRequest
	if err := decodeStrict(r, MaxAuthBytes, &g); err != nil {
		return nil, err
	}
	switch {
	case g.User == "" && g.Group == "":
		return nil, fieldErr("user", "set user or group")
	case g.User != "" && g.Group != "":
		return nil, fieldErr("group", "set user or group, not both")
	case g.User != "":
		if err := ValidateUserName("user", g.User); err != nil {
			return nil, err
		}
	default:
		if err := ValidateGroupName("group", g.Group); err != nil {
			return nil, err
		}
	}
	if g.Role.rank() == 0 {
		return nil, fieldErr("role", "%q is not a grant role: view, edit or admin", g.Role)
	}
	return &g, nil
}

// ValidateGroupName checks a group name for field: printable, no '/'
// (it is a path segment), at most 512 bytes.
func ValidateGroupName(field, group string) error {
	if group == "" || len(group) > maxGroupName {
		return fieldErr(field, "must be 1 to %d bytes", maxGroupName)
	}
	for _, r := range group {
		if r < 0x20 || r == 0x7f || r == '/' {
			return fieldErr(field, "%q has a control character or '/'", group)
		}
	}
	return nil
}

// KubernetesGroup is the group a user's short-lived cluster certificate
// names for this grant; the first master binds it to
// KubernetesClusterRole, so the cluster's own RBAC applies.
func (r GrantRole) KubernetesGroup() string { return "harmony:grant:" + string(r) }

// KubernetesClusterRole is the ClusterRole a grant's group is bound to.
func (r GrantRole) KubernetesClusterRole() string {
	if r == GrantAdmin {
		return "cluster-admin"
	}
	return string(r)
}

// GrantRoles are the grant roles, weakest first.
var GrantRoles = []GrantRole{GrantView, GrantEdit, GrantAdmin}

// KubernetesDirectoryGroup is the group a user's cluster certificate
// names for one of their directory groups: prefixed, so that a directory
// group called "system:masters" is not the cluster's.
func KubernetesDirectoryGroup(group string) string { return "harmony:ldap:" + group }

// MaxCredentialGroups bounds the directory groups one cluster certificate
// names; a user in more has the rest left out (grants still count them).
const MaxCredentialGroups = 100

// KubernetesUser is the user name in a Harmony user's cluster certificate:
// prefixed, so that no Harmony name is taken for one of the cluster's own.
func KubernetesUser(name string) string { return "harmony:" + name }

// DefaultCredentialLifetime is how long a user's cluster certificate
// lives: revoking a grant ends access within it, with no CA rotated.
const DefaultCredentialLifetime = 5 * time.Minute

// CredentialRequest is the body of POST PathClusters/{name}/credential:
// a CSR for a key made on the user's machine, which never leaves it.
type CredentialRequest struct {
	CSR string `json:"csr"`
}

// Credential answers a credential request: a client certificate for the
// cluster's apiserver, signed by the cluster's CA.
type Credential struct {
	Cluster string `json:"cluster"`
	// Server is the cluster's API through its VIP.
	Server string `json:"server"`
	// CertificateAuthority is the cluster CA, PEM, to trust the server.
	CertificateAuthority string    `json:"certificateAuthority"`
	Certificate          string    `json:"certificate"`
	ExpiresAt            time.Time `json:"expiresAt"`
	// User and Groups are what the certificate names.
	User   string   `json:"user"`
	Groups []string `json:"groups"`
}

// DecodeCredentialRequest reads a credential request and its CSR.
func DecodeCredentialRequest(r io.Reader) (*x509.CertificateRequest, error) {
	var req CredentialRequest
	if err := decodeStrict(r, MaxEnrollBytes, &req); err != nil {
		return nil, err
	}
	return ParseCSR(req.CSR)
}
