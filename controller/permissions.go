package controller

import (
	"errors"
	"net/http"
	"strings"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/access"
)

// kindUser is the principal kind of a user signed in with a session.
const kindUser = "user"

// permission is what a route asks of its caller. Every route declares
// exactly one; route() checks it before the handler runs, and the API
// document lists it.
type permission struct {
	name string
	// doc says who passes, for the API document.
	doc string
	// allows decides for a caller with a credential; nil for public.
	allows func(who principal) bool
	// cluster, when set, scopes the permission to one cluster: admins
	// pass, and a user needs a grant of at least this role on it.
	cluster v1.GrantRole
	// clusterOf names the route's cluster; the {name} path value when nil.
	clusterOf func(c *Controller, r *http.Request) (string, *apiError)
}

func isAdmin(who principal) bool {
	return who.kind == v1.OrgAdmins || who.kind == kindUser && who.role == v1.UserRoleAdmin
}

var (
	permPublic = permission{name: "public", doc: "Public: no credential needed."}
	permNode   = permission{name: "node", doc: "A node's enrolled certificate (organization " + v1.OrgNodes + ").",
		allows: func(who principal) bool { return who.kind == v1.OrgNodes }}
	permMetrics = permission{name: "metrics", doc: "An admin, or a scraper certificate (organization " + v1.OrgScrapers + ").",
		allows: func(who principal) bool { return isAdmin(who) || who.kind == v1.OrgScrapers }}
	permAdmin = permission{name: "admin", doc: "An admin: an admin user's session, or an admin certificate (organization " + v1.OrgAdmins + ").",
		allows: isAdmin}
	permAdminCert = permission{name: "admin-certificate", doc: "An admin certificate (organization " + v1.OrgAdmins + "): it acts on that certificate.",
		allows: func(who principal) bool { return who.kind == v1.OrgAdmins }}
	permSignedIn = permission{name: "signed-in", doc: "Any admin or user; what a user sees is limited to their grants.",
		allows: func(who principal) bool { return isAdmin(who) || who.kind == kindUser }}
	permClusterView = permission{name: "cluster:view", doc: "An admin, or a user with a grant on the cluster (any role); others get 404.",
		allows: permSignedIn.allows, cluster: v1.GrantView}
	permClusterAdmin = permission{name: "cluster:admin", doc: "An admin, or a user with the admin grant on the cluster; others get 404, or 403 with a lesser grant.",
		allows: permSignedIn.allows, cluster: v1.GrantAdmin}
)

// permOperationView lets a user watch the operations of clusters granted
// to them; an image import's operation is the admins'.
var permOperationView = permission{name: "cluster:view", doc: permClusterView.doc + " The cluster is the operation's.",
	allows: permSignedIn.allows, cluster: v1.GrantView,
	clusterOf: func(c *Controller, r *http.Request) (string, *apiError) {
		op, err := c.clusters.Operation(r.PathValue("id"), 0)
		if err != nil || op.Cluster == "" {
			return "", refuse(http.StatusNotFound, v1.CodeNotFound, "operation %q not found", r.PathValue("id"))
		}
		return op.Cluster, nil
	}}

// authorize finds the caller and checks perm; the one place every route's
// permission is enforced. A caller it knows but refuses is returned with
// the refusal, for the audit.
func (c *Controller) authorize(r *http.Request, perm permission) (principal, *apiError) {
	if err := c.crossOrigin.Check(r); err != nil {
		return principal{}, refuse(http.StatusForbidden, v1.CodeCSRF, "a browser request that another site's page made (Origin %q): %v", r.Header.Get("Origin"), err)
	}
	if perm.allows == nil {
		return principal{}, nil
	}
	who, err := c.caller(r)
	if err != nil {
		return principal{}, err
	}
	if !perm.allows(who) {
		return who, refuse(http.StatusForbidden, v1.CodeForbidden, "%s %q may not use this endpoint (it needs: %s)", who.kind, who.name, perm.name)
	}
	if perm.cluster == "" {
		return who, nil
	}
	if isAdmin(who) {
		who.grant = v1.GrantAdmin
		return who, nil
	}
	name := r.PathValue("name")
	if perm.clusterOf != nil {
		if name, err = perm.clusterOf(c, r); err != nil {
			return who, err
		}
	}
	role, gerr := c.grantedRole(who, name)
	if gerr != nil {
		return who, storeError(gerr, "grant")
	}
	switch {
	case role == "":
		// As if the cluster did not exist: names do not leak.
		return who, refuse(http.StatusNotFound, v1.CodeNotFound, "cluster %q not found", name)
	case !role.AtLeast(perm.cluster):
		return who, refuse(http.StatusForbidden, v1.CodeForbidden, "user %q has the %s grant on cluster %q; this needs %s", who.name, role, name, perm.cluster)
	}
	who.grant = role
	return who, nil
}

// caller is who the request comes from: a session's user (Authorization:
// Bearer, or a browser's session cookie) or a client certificate's
// holder. A certificate wins over a cookie: a browser may carry one.
func (c *Controller) caller(r *http.Request) (principal, *apiError) {
	token := ""
	if h := r.Header.Get("Authorization"); h != "" {
		var ok bool
		token, ok = strings.CutPrefix(h, "Bearer ")
		if !ok || token == "" {
			return principal{}, refuse(http.StatusUnauthorized, v1.CodeSessionInvalid, "the Authorization header must be \"Bearer\" and a session's access token")
		}
	} else if cookie := cookieValue(r, v1.CookieAccess); cookie != "" && (r.TLS == nil || len(r.TLS.PeerCertificates) == 0) {
		if e := checkBrowserRequest(r); e != nil {
			return principal{}, e
		}
		token = cookie
	}
	if token != "" {
		u, err := c.access.Authenticate(token)
		var se *access.SessionError
		if errors.As(err, &se) {
			c.log.Info("session token refused", "reason", se.Reason, "remote", r.RemoteAddr)
			return principal{}, refuse(http.StatusUnauthorized, v1.CodeSessionInvalid, "the session is not valid (expired, ended, or not this controller's): refresh it or log in again")
		}
		if err != nil {
			return principal{}, internalError("session", err)
		}
		return principal{kind: kindUser, name: u.Name, role: u.Role, groups: u.Groups}, nil
	}
	return c.authenticate(r)
}
