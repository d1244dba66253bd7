package controller

import (
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strconv"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/access"
	"github.com/harmonykaas/harmony/controller/store"
)

// grantedRole is a user's strongest role on a cluster.
func (c *Controller) grantedRole(who principal, cluster string) (v1.GrantRole, error) {
	return c.access.RoleOn(who.name, who.groups, cluster)
}

// accessError maps the access service's refusals.
func accessError(err error, what string) *apiError {
	var te *access.ThrottledError
	var se *access.SessionError
	var fe *v1.FieldError
	var de *access.DirectoryError
	switch {
	case errors.As(err, &te):
		e := refuse(http.StatusTooManyRequests, v1.CodeThrottled, "%v", te)
		e.retryAfter = te.RetryAfter
		return e
	case errors.Is(err, access.ErrBadCredentials):
		return refuse(http.StatusUnauthorized, v1.CodeBadCredentials, "wrong user name or password")
	case errors.As(err, &se):
		return refuse(http.StatusUnauthorized, v1.CodeSessionInvalid, "the session is not valid (expired, ended, or not this controller's): log in again")
	case errors.Is(err, access.ErrSetupDone):
		return refuse(http.StatusConflict, v1.CodeSetupDone, "the first admin is set up already; sign in, or ask an admin")
	case errors.As(err, &fe):
		return fieldRefusal(fe.Field, "%s", fe.Problem)
	case errors.As(err, &de):
		return refuse(http.StatusServiceUnavailable, v1.CodeLDAPUnreachable, "%v", de)
	}
	return storeError(err, what)
}

func remoteAddr(r *http.Request) netip.Addr {
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	a, _ := netip.ParseAddr(host)
	return a
}

func (c *Controller) handleSetup(w http.ResponseWriter, r *http.Request, _ principal) *apiError {
	req, err := v1.DecodeSetupRequest(r.Body)
	if err != nil {
		return badInput(err)
	}
	setAuditSubject(r, req.Name)
	u, err := c.access.Setup(r.Context(), *req)
	if err != nil {
		return accessError(err, "user")
	}
	writeJSON(w, http.StatusCreated, u)
	return nil
}

func (c *Controller) handleLogin(w http.ResponseWriter, r *http.Request, _ principal) *apiError {
	req, err := v1.DecodeLoginRequest(r.Body)
	if err != nil {
		return badInput(err)
	}
	setAuditSubject(r, req.Username)
	if req.Browser {
		// A login form elsewhere cannot send the header: no signing a
		// browser into someone else's account.
		if r.Header.Get(v1.HeaderCSRF) == "" {
			return refuse(http.StatusForbidden, v1.CodeCSRF, "a browser login needs the %s header", v1.HeaderCSRF)
		}
	}
	sess, err := c.access.Login(r.Context(), req.Username, req.Password, remoteAddr(r))
	var de *access.DirectoryError
	if errors.As(err, &de) {
		// The caller has not signed in: the directory's address, bind DN
		// and answer are for the log, not for them.
		c.log.Warn("sign-in not checked: the directory failed", "user", req.Username, "err", de)
		return refuse(http.StatusServiceUnavailable, v1.CodeLDAPUnreachable,
			"the directory could not check this sign-in; try again later (the controller's log says why)")
	}
	if err != nil {
		return accessError(err, "user")
	}
	if req.Browser {
		setBrowserSession(w, sess, newCSRFToken())
		sess = withoutTokens(sess)
	}
	writeJSON(w, http.StatusOK, sess)
	return nil
}

func (c *Controller) handleRefresh(w http.ResponseWriter, r *http.Request, _ principal) *apiError {
	req, token, e := decodeSessionRequest(r)
	if e != nil {
		return e
	}
	sess, err := c.access.Refresh(r.Context(), token)
	if err != nil {
		if req.Browser {
			clearBrowserSession(w)
		}
		return accessError(err, "session")
	}
	if req.Browser {
		setBrowserSession(w, sess, cookieValue(r, v1.CookieCSRF))
		sess = withoutTokens(sess)
	}
	writeJSON(w, http.StatusOK, sess)
	return nil
}

func (c *Controller) handleLogout(w http.ResponseWriter, r *http.Request, _ principal) *apiError {
	req, token, e := decodeSessionRequest(r)
	if e != nil {
		return e
	}
	if req.Browser {
		clearBrowserSession(w)
	}
	if err := c.access.Logout(token); err != nil {
		return accessError(err, "session")
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// decodeSessionRequest reads a refresh or logout: the refresh token from
// the body, or from a browser's cookie under the CSRF rules.
func decodeSessionRequest(r *http.Request) (*v1.RefreshRequest, string, *apiError) {
	req, err := v1.DecodeRefreshRequest(r.Body)
	if err != nil {
		return nil, "", badInput(err)
	}
	if !req.Browser {
		return req, req.RefreshToken, nil
	}
	if e := checkBrowserRequest(r); e != nil {
		return nil, "", e
	}
	token := cookieValue(r, v1.CookieRefresh)
	if token == "" {
		return nil, "", refuse(http.StatusUnauthorized, v1.CodeSessionInvalid, "no browser session: log in again")
	}
	return req, token, nil
}

func (c *Controller) handleWhoAmI(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	out := v1.WhoAmI{Kind: who.kind, Name: who.name, Role: who.role}
	if who.kind == v1.OrgAdmins {
		out.Role = v1.UserRoleAdmin
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (c *Controller) handleListUsers(w http.ResponseWriter, r *http.Request, _ principal) *apiError {
	users, err := c.access.Users()
	if err != nil {
		return internalError("users", err)
	}
	writeJSON(w, http.StatusOK, v1.UserList{Users: users})
	return nil
}

func (c *Controller) handleCreateUser(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	req, err := v1.DecodeUserCreate(r.Body)
	if err != nil {
		return badInput(err)
	}
	u, err := c.access.CreateUser(r.Context(), *req)
	if err != nil {
		return accessError(err, "user "+strconv.Quote(req.Name))
	}
	c.log.Info("user created", "user", u.Name, "role", u.Role, "by", who.name)
	writeJSON(w, http.StatusCreated, u)
	return nil
}

func (c *Controller) handleGetUser(w http.ResponseWriter, r *http.Request, _ principal) *apiError {
	u, err := c.access.User(r.PathValue("user"))
	if err != nil {
		return accessError(err, "user "+strconv.Quote(r.PathValue("user")))
	}
	writeJSON(w, http.StatusOK, u)
	return nil
}

func (c *Controller) handleUpdateUser(w http.ResponseWriter, r *http.Request, _ principal) *apiError {
	req, err := v1.DecodeUserUpdate(r.Body)
	if err != nil {
		return badInput(err)
	}
	u, err := c.access.UpdateUser(r.Context(), r.PathValue("user"), *req)
	if err != nil {
		return accessError(err, "user "+strconv.Quote(r.PathValue("user")))
	}
	writeJSON(w, http.StatusOK, u)
	return nil
}

func (c *Controller) handleDeleteUser(w http.ResponseWriter, r *http.Request, _ principal) *apiError {
	if err := c.access.DeleteUser(r.PathValue("user")); err != nil {
		return accessError(err, "user "+strconv.Quote(r.PathValue("user")))
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (c *Controller) handleEndSessions(w http.ResponseWriter, r *http.Request, _ principal) *apiError {
	n, err := c.access.EndSessions(r.PathValue("user"))
	if err != nil {
		return accessError(err, "user "+strconv.Quote(r.PathValue("user")))
	}
	writeJSON(w, http.StatusOK, v1.SessionsEnded{Ended: n})
	return nil
}

func (c *Controller) handleListGrants(w http.ResponseWriter, r *http.Request, _ principal) *apiError {
	grants, err := c.access.Grants(r.PathValue("name"))
	if err != nil {
		return storeError(err, "cluster "+strconv.Quote(r.PathValue("name")))
	}
	writeJSON(w, http.StatusOK, v1.GrantList{Items: grants})
	return nil
}

func (c *Controller) handleGrant(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	req, err := v1.DecodeGrantRequest(r.Body)
	if err != nil {
		return badInput(err)
	}
	g, err := c.access.Grant(r.Context(), r.PathValue("name"), *req, who.name)
	if errors.Is(err, store.ErrNotFound) {
		return refuse(http.StatusNotFound, v1.CodeNotFound, "%v", err)
	}
	if err != nil {
		return internalError("grant", err)
	}
	writeJSON(w, http.StatusCreated, g)
	return nil
}

func (c *Controller) handleRevoke(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	err := c.access.Revoke(r.PathValue("name"), r.PathValue("kind"), r.PathValue("subject"), who.name)
	if errors.Is(err, store.ErrNotFound) {
		return refuse(http.StatusNotFound, v1.CodeNotFound, "%v", err)
	}
	if err != nil {
		return internalError("revoke", err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (c *Controller) handleRevokeSessions(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	req, err := v1.DecodeRevokeSessionsRequest(r.Body)
	if err != nil {
		return badInput(err)
	}
	name := r.PathValue("name")
	n, err := c.access.EndSessionsOn(name, req.User)
	if errors.Is(err, store.ErrNotFound) {
		return refuse(http.StatusNotFound, v1.CodeNotFound, "%v", err)
	}
	if errors.Is(err, access.ErrBeyondCluster) {
		return refuse(http.StatusForbidden, v1.CodeForbidden, "%v", err)
	}
	if err != nil {
		return internalError("sessions", err)
	}
	c.log.Info("user's sessions revoked on a cluster", "cluster", name, "user", req.User, "ended", n, "by", who.name)
	writeJSON(w, http.StatusOK, v1.SessionsEnded{Ended: n})
	return nil
}

// visibleClusters filters a cluster list to what who may see.
func (c *Controller) visibleClusters(who principal, items []v1.Cluster) ([]v1.Cluster, error) {
	if isAdmin(who) {
		for i := range items {
			items[i].Access = v1.GrantAdmin
		}
		return items, nil
	}
	roles, err := c.access.Roles(who.name, who.groups)
	if err != nil {
		return nil, err
	}
	out := []v1.Cluster{}
	for _, cl := range items {
		if role := roles[cl.Spec.Name]; role != "" {
			cl.Access = role
			out = append(out, cl)
		}
	}
	return out, nil
}

func (c *Controller) handleCredential(w http.ResponseWriter, r *http.Request, who principal) *apiError {
	csr, err := v1.DecodeCredentialRequest(r.Body)
	if err != nil {
		return badInput(err)
	}
	if e := checkCSRKey(csr); e != nil {
		return e
	}
	name := r.PathValue("name")
	cred, err := c.clusters.UserCredential(name, who.name, who.grant, who.groups, csr.PublicKey, v1.DefaultCredentialLifetime)
	if err != nil {
		return clusterError(err)
	}
	c.log.Info("cluster credential issued", "cluster", name, "user", cred.User, "groups", cred.Groups, "expires", cred.ExpiresAt)
	writeJSON(w, http.StatusOK, cred)
	return nil
}
