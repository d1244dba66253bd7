package client

import (
	"context"
	"net/http"
	"net/url"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// userPath is the path of one user, with an optional suffix.
func userPath(name, suffix string) string {
	return v1.PathUsers + "/" + url.PathEscape(name) + suffix
}

// Login starts a session. It needs no credential, only the controller's
// CA in the config.
func (c *Client) Login(ctx context.Context, username, password string) (*v1.Session, error) {
	var s v1.Session
	if err := c.Do(ctx, "POST", v1.PathLogin, v1.LoginRequest{Username: username, Password: password}, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Logout ends the client's session.
func (c *Client) Logout(ctx context.Context) error {
	c.mu.Lock()
	s := c.session
	c.mu.Unlock()
	if s == nil {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, "POST", c.server+v1.PathLogout, jsonBody(v1.RefreshRequest{RefreshToken: s.RefreshToken}))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return c.send(c.http, req, nil)
}

// Setup creates the first admin with the controller's setup token.
func (c *Client) Setup(ctx context.Context, req v1.SetupRequest) (*v1.User, error) {
	var u v1.User
	if err := c.Do(ctx, "POST", v1.PathSetup, req, &u); err != nil {
		return nil, err
	}
	return &u, nil
}

// WhoAmI is who the controller takes the client for.
func (c *Client) WhoAmI(ctx context.Context) (*v1.WhoAmI, error) {
	var w v1.WhoAmI
	if err := c.Do(ctx, "GET", v1.PathWhoAmI, nil, &w); err != nil {
		return nil, err
	}
	return &w, nil
}

// Users lists users.
func (c *Client) Users(ctx context.Context) ([]v1.User, error) {
	var l v1.UserList
	if err := c.Do(ctx, "GET", v1.PathUsers, nil, &l); err != nil {
		return nil, err
	}
	return l.Users, nil
}

// CreateUser adds a local user.
func (c *Client) CreateUser(ctx context.Context, req v1.UserCreate) (*v1.User, error) {
	var u v1.User
	if err := c.Do(ctx, "POST", v1.PathUsers, req, &u); err != nil {
		return nil, err
	}
	return &u, nil
}

// UpdateUser changes a user; any change ends their sessions.
func (c *Client) UpdateUser(ctx context.Context, name string, req v1.UserUpdate) (*v1.User, error) {
	var u v1.User
	if err := c.Do(ctx, "PATCH", userPath(name, ""), req, &u); err != nil {
		return nil, err
	}
	return &u, nil
}

// DeleteUser removes a user with their sessions and grants.
func (c *Client) DeleteUser(ctx context.Context, name string) error {
	return c.Do(ctx, "DELETE", userPath(name, ""), nil, nil)
}

// EndSessions ends every session of a user; it returns how many.
func (c *Client) EndSessions(ctx context.Context, name string) (int, error) {
	var e v1.SessionsEnded
	err := c.Do(ctx, "POST", userPath(name, "/end-sessions"), nil, &e)
	return e.Ended, err
}

// Grants lists a cluster's grants.
func (c *Client) Grants(ctx context.Context, cluster string) ([]v1.Grant, error) {
	var l v1.GrantList
	if err := c.Do(ctx, "GET", clusterPath(cluster, "/grants"), nil, &l); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// Grant gives a user or a group a role on a cluster.
func (c *Client) Grant(ctx context.Context, cluster string, req v1.GrantRequest) (*v1.Grant, error) {
	var g v1.Grant
	if err := c.Do(ctx, "POST", clusterPath(cluster, "/grants"), req, &g); err != nil {
		return nil, err
	}
	return &g, nil
}

// Revoke removes a user's (kind "user") or a group's grant on a cluster.
func (c *Client) Revoke(ctx context.Context, cluster, kind, subject string) error {
	return c.Do(ctx, "DELETE", clusterPath(cluster, "/grants/"+url.PathEscape(kind)+"/"+url.PathEscape(subject)), nil, nil)
}

// Credential asks for a short-lived client certificate for the cluster's
// apiserver, for the key of csrPEM.
func (c *Client) Credential(ctx context.Context, cluster, csrPEM string) (*v1.Credential, error) {
	var cred v1.Credential
	if err := c.Do(ctx, "POST", clusterPath(cluster, "/credential"), v1.CredentialRequest{CSR: csrPEM}, &cred); err != nil {
		return nil, err
	}
	return &cred, nil
}

// Audit lists audited requests: since is a duration back (24h) or an RFC
// 3339 time; cluster and user filter when set.
func (c *Client) Audit(ctx context.Context, since, cluster, user string) ([]v1.AuditEntry, error) {
	q := url.Values{}
	for k, v := range map[string]string{"since": since, "cluster": cluster, "user": user} {
		if v != "" {
			q.Set(k, v)
		}
	}
	path := v1.PathAudit
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var l v1.AuditList
	if err := c.Do(ctx, "GET", path, nil, &l); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// RevokeSessions ends every session of a user who holds a grant on the
// cluster; it returns how many.
func (c *Client) RevokeSessions(ctx context.Context, cluster, user string) (int, error) {
	var e v1.SessionsEnded
	err := c.Do(ctx, "POST", clusterPath(cluster, "/revoke-sessions"), v1.RevokeSessionsRequest{User: user}, &e)
	return e.Ended, err
}

// LDAP returns the LDAP settings, without the bind password.
func (c *Client) LDAP(ctx context.Context) (*v1.LDAP, error) {
	var l v1.LDAP
	if err := c.Do(ctx, "GET", v1.PathLDAP, nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// ApplyLDAP sets the LDAP settings after the controller has checked them
// against the directory.
func (c *Client) ApplyLDAP(ctx context.Context, l *v1.LDAP) (*v1.LDAP, error) {
	var applied v1.LDAP
	if err := c.Do(ctx, "PUT", v1.PathLDAP, l, &applied); err != nil {
		return nil, err
	}
	return &applied, nil
}

// DeleteLDAP removes the LDAP settings; it returns how many directory
// users' sessions ended.
func (c *Client) DeleteLDAP(ctx context.Context) (int, error) {
	var e v1.SessionsEnded
	err := c.Do(ctx, "DELETE", v1.PathLDAP, nil, &e)
	return e.Ended, err
}

// LookupLDAPUser looks a user up in the directory as a sign-in would.
func (c *Client) LookupLDAPUser(ctx context.Context, name string) (*v1.LDAPUserInfo, error) {
	var info v1.LDAPUserInfo
	if err := c.Do(ctx, "POST", v1.PathLDAP+"/lookup", v1.LDAPLookupRequest{Username: name}, &info); err != nil {
		return nil, err
	}
	return &info, nil
}
