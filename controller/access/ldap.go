package access

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/go-ldap/ldap/v3"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// DirectoryError is a directory that did not answer or refused the
// service account: not the user's fault, so not a failed login.
type DirectoryError struct{ Err error }

func (e *DirectoryError) Error() string { return "directory: " + e.Err.Error() }
func (e *DirectoryError) Unwrap() error { return e.Err }

// errNotInDirectory: the user filter finds no entry, or more than one.
var errNotInDirectory = errors.New("not found by the user filter")

// directory is one LDAP or Active Directory source of users, as its
// settings say. It holds no connection: each sign-in or refresh dials,
// so nothing goes stale between them.
type directory struct {
	cfg   v1.LDAP
	roots *x509.CertPool // nil: the system roots
}

// directoryUser is what the directory says of a user.
type directoryUser struct {
	Name   string
	DN     string
	Groups []string
	// Role is what the group mappings give; "" when they let the user
	// not sign in.
	Role v1.UserRole
}

func newDirectory(cfg v1.LDAP) (*directory, error) {
	d := &directory{cfg: cfg}
	if cfg.CA != "" {
		d.roots = x509.NewCertPool()
		if !d.roots.AppendCertsFromPEM([]byte(cfg.CA)) {
			return nil, fmt.Errorf("ca: no certificate in the bundle")
		}
	}
	return d, nil
}

// dial connects with TLS (LDAPS or StartTLS) and binds as the service
// account. The connection is closed when ctx ends, which is how ctx
// reaches a library that takes none.
func (d *directory) dial(ctx context.Context) (*ldap.Conn, func(), error) {
	u, err := url.Parse(d.cfg.URL)
	if err != nil {
		return nil, nil, fmt.Errorf("url: %w", err)
	}
	timeout := d.cfg.OperationTimeout()
	tlsConfig := &tls.Config{RootCAs: d.roots, ServerName: u.Hostname(), MinVersion: tls.VersionTLS12}
	dialer := &net.Dialer{Timeout: timeout}
	conn, err := ldap.DialURL(d.cfg.URL, ldap.DialWithTLSDialer(tlsConfig, dialer))
	if err != nil {
		return nil, nil, &DirectoryError{fmt.Errorf("connect %s: %w", d.cfg.URL, err)}
	}
	conn.SetTimeout(timeout)
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	closeConn := func() { stop(); conn.Close() }
	if d.cfg.StartTLS {
		if err := conn.StartTLS(tlsConfig); err != nil {
			closeConn()
			return nil, nil, &DirectoryError{fmt.Errorf("StartTLS with %s: %w", d.cfg.URL, ctxErr(ctx, err))}
		}
	}
	if err := conn.Bind(d.cfg.BindDN, d.cfg.BindPassword); err != nil {
		closeConn()
		return nil, nil, &DirectoryError{fmt.Errorf("bind as %s: %w", d.cfg.BindDN, ctxErr(ctx, err))}
	}
	return conn, closeConn, nil
}

// ctxErr prefers the context's error to the closed connection's.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// check binds as the service account and searches the two bases: what
// applying the settings proves before they are stored.
func (d *directory) check(ctx context.Context) error {
	conn, done, err := d.dial(ctx)
	if err != nil {
		return err
	}
	defer done()
	for _, base := range []struct{ field, dn string }{{"userSearch.baseDN", d.cfg.UserSearch.BaseDN}, {"groupSearch.baseDN", d.cfg.GroupSearch.BaseDN}} {
		_, err := conn.Search(ldap.NewSearchRequest(base.dn, ldap.ScopeBaseObject, ldap.NeverDerefAliases, 1, d.timeLimit(), false,
			"(objectClass=*)", []string{"1.1"}, nil))
		if err != nil {
			return &v1.FieldError{Field: base.field, Problem: fmt.Sprintf("%q cannot be read by %s: %v", base.dn, d.cfg.BindDN, ctxErr(ctx, err))}
		}
	}
	return nil
}

func (d *directory) timeLimit() int { return int(d.cfg.OperationTimeout() / time.Second) }

// absentDN is bound to, with the password given, when no entry has the
// name: a name that exists and a wrong password then cost the directory
// the same conversation (the service account's bind, the user search, a
// refused bind), so that neither the answer nor its time says which names
// exist. No entry is expected at this DN; if one were, its answer would
// be ignored all the same.
const absentDN = "cn=harmony-no-such-user"

// authenticate finds the user and checks their password by binding as
// them; then, as the service account again, it reads their groups. A
// missing user and a wrong password are one error, reached the same way.
func (d *directory) authenticate(ctx context.Context, name, password string) (directoryUser, error) {
	if password == "" {
		// An empty password is an unauthenticated bind, which succeeds.
		return directoryUser{}, ErrBadCredentials
	}
	conn, done, err := d.dial(ctx)
	if err != nil {
		return directoryUser{}, err
	}
	defer done()
	dn, err := d.findUser(ctx, conn, name)
	if errors.Is(err, errNotInDirectory) {
		_ = conn.Bind(absentDN+","+d.cfg.UserSearch.BaseDN, password)
		return directoryUser{}, ErrBadCredentials
	}
	if err != nil {
		return directoryUser{}, err
	}
	if err := conn.Bind(dn, password); err != nil {
		if ldap.IsErrorWithCode(err, ldap.LDAPResultInvalidCredentials) {
			return directoryUser{}, ErrBadCredentials
		}
		return directoryUser{}, &DirectoryError{fmt.Errorf("bind as %s: %w", dn, ctxErr(ctx, err))}
	}
	// The groups are read as the service account, whose reach the
	// settings were checked with, not as the user.
	if err := conn.Bind(d.cfg.BindDN, d.cfg.BindPassword); err != nil {
		return directoryUser{}, &DirectoryError{fmt.Errorf("bind as %s: %w", d.cfg.BindDN, ctxErr(ctx, err))}
	}
	return d.withGroups(ctx, conn, name, dn)
}

// lookup reads a user and their groups again, without their password:
// what a refresh does.
func (d *directory) lookup(ctx context.Context, name string) (directoryUser, error) {
	conn, done, err := d.dial(ctx)
	if err != nil {
		return directoryUser{}, err
	}
	defer done()
	dn, err := d.findUser(ctx, conn, name)
	if err != nil {
		return directoryUser{}, err
	}
	return d.withGroups(ctx, conn, name, dn)
}

// findUser is the DN of the one entry the user filter finds for name.
func (d *directory) findUser(ctx context.Context, conn *ldap.Conn, name string) (string, error) {
	filter := strings.ReplaceAll(d.cfg.UserSearch.Filter, v1.LDAPUsernamePlaceholder, ldap.EscapeFilter(name))
	res, err := conn.Search(ldap.NewSearchRequest(d.cfg.UserSearch.BaseDN, ldap.ScopeWholeSubtree, ldap.NeverDerefAliases, 2, d.timeLimit(), false,
		filter, []string{"1.1"}, nil))
	if err != nil && !ldap.IsErrorWithCode(err, ldap.LDAPResultSizeLimitExceeded) {
		return "", &DirectoryError{fmt.Errorf("search users: %w", ctxErr(ctx, err))}
	}
	if res == nil || len(res.Entries) != 1 {
		// Two entries for one name is a directory to fix, not a guess.
		return "", errNotInDirectory
	}
	return res.Entries[0].DN, nil
}

// withGroups is the user at dn with their groups and the role they give.
func (d *directory) withGroups(ctx context.Context, conn *ldap.Conn, name, dn string) (directoryUser, error) {
	groups, err := d.groups(ctx, conn, dn)
	if err != nil {
		return directoryUser{}, err
	}
	return directoryUser{Name: name, DN: dn, Groups: groups, Role: d.role(groups)}, nil
}

// groups follows group membership from dn upward, one search per level,
// so that nested groups count on directories without Active Directory's
// in-chain matching rule. Cycles end where a group was seen.
func (d *directory) groups(ctx context.Context, conn *ldap.Conn, dn string) ([]string, error) {
	seen := map[string]bool{strings.ToLower(dn): true}
	frontier := []string{dn}
	var names []string
	for depth := 0; depth < v1.MaxLDAPGroupDepth && len(frontier) > 0; depth++ {
		var filter strings.Builder
		filter.WriteString("(|")
		for _, member := range frontier {
			filter.WriteString(strings.ReplaceAll(d.cfg.GroupSearch.Filter, v1.LDAPDNPlaceholder, ldap.EscapeFilter(member)))
		}
		filter.WriteString(")")
		res, err := conn.Search(ldap.NewSearchRequest(d.cfg.GroupSearch.BaseDN, ldap.ScopeWholeSubtree, ldap.NeverDerefAliases,
			v1.MaxLDAPGroups, d.timeLimit(), false, filter.String(), []string{d.cfg.GroupSearch.NameAttribute}, nil))
		if err != nil && !ldap.IsErrorWithCode(err, ldap.LDAPResultSizeLimitExceeded) {
			return nil, &DirectoryError{fmt.Errorf("search groups: %w", ctxErr(ctx, err))}
		}
		frontier = frontier[:0]
		for _, e := range res.Entries {
			key := strings.ToLower(e.DN)
			if seen[key] {
				continue
			}
			seen[key] = true
			frontier = append(frontier, e.DN)
			if name := e.GetAttributeValue(d.cfg.GroupSearch.NameAttribute); name != "" && v1.ValidateGroupName("group", name) == nil {
				names = append(names, name)
			}
			if len(names) >= v1.MaxLDAPGroups {
				frontier = nil
				break
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// role is what the group mappings give a member of groups.
func (d *directory) role(groups []string) v1.UserRole {
	role, usersMapped := v1.UserRole(""), false
	for _, m := range d.cfg.GroupRoles {
		usersMapped = usersMapped || m.Role == v1.UserRoleUser
		if !slices.Contains(groups, m.Group) {
			continue
		}
		if m.Role == v1.UserRoleAdmin {
			return v1.UserRoleAdmin
		}
		role = v1.UserRoleUser
	}
	if role == "" && !usersMapped {
		role = v1.UserRoleUser
	}
	return role
}
