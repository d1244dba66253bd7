package controller

import (
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/buildinfo"
)

// apiDoc documents one route of the API. The OpenAPI document is made
// from these and the wire types themselves, so it cannot drift from the Go
// types; a test checks that every registered route has one, and that
// every one documents a registered route.
type apiDoc struct {
	pattern  string // "METHOD /path/{param}"
	summary  string
	query    []queryParam
	body     any  // a wire type, []byte for an octet stream, nil for none
	optional bool // the body may be left out
	answers  []answer
}

type queryParam struct {
	name, typ, description string
	required               bool
}

// answer is one success response. body is a wire type for JSON, nil for
// no content, a mediaType for text, or a schemaFunc for a JSON schema
// made by hand.
type answer struct {
	status      int
	body        any
	description string
}

type mediaType string

type schemaFunc func(s *schemas) map[string]any

var (
	docDuration = "a Go duration such as 30s or 2m"
	// docAsync is the answer of a long operation.
	docAsync = answer{http.StatusAccepted, v1.Operation{}, "Accepted: an operation to poll, or watch, at " + v1.PathOperations + "/{id}"}
)

var adminAPIDocs = []apiDoc{
	{pattern: "GET " + v1.PathHealthz, summary: "Liveness: ok while the controller serves",
		answers: []answer{{200, mediaType("text/plain"), "ok"}}},
	{pattern: "GET " + v1.PathCA, summary: "The controller's CA bundle (PEM); no client certificate needed",
		answers: []answer{{200, mediaType("application/x-pem-file"), "the CA certificates, PEM"}}},
	{pattern: "POST " + v1.PathEnroll, summary: "Enroll a node: one-time token and CSR, over server-authenticated TLS",
		body: v1.EnrollRequest{}, answers: []answer{{200, v1.CertificateResponse{}, "the node's certificate"}}},
	{pattern: "POST " + v1.PathRenew, summary: "Renew a node's certificate (node certificate)",
		body: v1.RenewRequest{}, answers: []answer{{200, v1.CertificateResponse{}, "the node's new certificate"}}},
	{pattern: "GET " + v1.PathNodeRole, summary: "A node's own role; long poll with ?after=REVISION&wait=DURATION (node certificate)",
		query: []queryParam{
			{name: "after", typ: "integer", description: "answer with the role only once its revision is greater than this"},
			{name: "wait", typ: "string", description: "how long to wait for a newer revision, " + docDuration + ", at most " + MaxWatchWait.String() + "; default 0, no wait"},
		},
		answers: []answer{
			{200, v1.Role{}, "the role, its revision greater than after"},
			{304, nil, "Not Modified: no revision greater than after came within wait"},
		}},
	{pattern: "POST " + v1.PathNodeStatus, summary: "A node's status report (node certificate); stored under the certificate's node name",
		body: v1.Status{}, answers: []answer{{204, nil, "stored"}}},
	{pattern: "GET " + v1.PathNodeEtcdSnapshots, summary: "The copies the controller keeps of the etcd snapshots of the node's cluster (a master's certificate)",
		answers: []answer{{200, v1.EtcdSnapshotCopyList{}, "the copies, oldest first, and after when a snapshot must be taken to be copied"}}},
	{pattern: "PUT " + v1.PathNodeEtcdSnapshots + "/{takenAt}", summary: "Send a copy of an etcd snapshot taken at {takenAt} (RFC 3339, to the second) as etcd wrote it, application/octet-stream (a master's certificate); the cluster is the node's",
		body: []byte{},
		answers: []answer{
			{201, v1.EtcdSnapshotCopy{}, "kept (the oldest beyond the cluster's etcdSnapshots.keep go)"},
			{404, v1.ErrorBody{}, "the node is not a master of a cluster that takes etcd snapshots"},
			{409, v1.ErrorBody{}, "not wanted: the controller has a copy from within half an interval"},
		}},
	{pattern: "GET " + v1.PathNodeEtcdSnapshots + "/{takenAt}", summary: "Fetch the controller's copy of the node's cluster's etcd snapshot taken at {takenAt} (a master's certificate): a restore's source does, with etcd.restore.fromController",
		answers: []answer{
			{200, mediaType("application/octet-stream"), "the snapshot as etcd wrote it"},
			{404, v1.ErrorBody{}, "no such copy, or the node is not a master of a cluster that takes etcd snapshots"},
		}},
	{pattern: "GET " + v1.PathNodes, summary: "List node records",
		answers: []answer{{200, v1.NodeList{}, "the node records"}}},
	{pattern: "POST " + v1.PathNodes, summary: "Create a node record; answers with its bootstrap document",
		body: v1.NodeSpec{}, answers: []answer{{201, v1.NodeWithBootstrap{}, "the node and its bootstrap document with a one-time token"}}},
	{pattern: "GET " + v1.PathNodes + "/{name}", summary: "One node record",
		answers: []answer{{200, v1.Node{}, "the node record with its last status"}}},
	{pattern: "DELETE " + v1.PathNodes + "/{name}", summary: "Delete a node record; its certificate stops working",
		answers: []answer{{204, nil, "deleted"}}},
	{pattern: "POST " + v1.PathNodes + "/{name}/token", summary: "A new bootstrap token (revokes unused ones); an empty body takes the defaults",
		body: v1.TokenRequest{}, optional: true, answers: []answer{{201, v1.NodeWithBootstrap{}, "the node and its new bootstrap document"}}},
	{pattern: "GET " + v1.PathNodes + "/{name}/role", summary: "A node's role",
		answers: []answer{{200, v1.Role{}, "the role"}}},
	{pattern: "PUT " + v1.PathNodes + "/{name}/role", summary: "Replace a node's role; nodeName must be the node in the path",
		body: v1.Role{}, answers: []answer{{200, v1.Role{}, "the role as stored, with its new revision"}}},
	{pattern: "PUT " + v1.PathRoles, summary: "Replace several roles in one transaction",
		body: v1.RoleList{}, answers: []answer{{200, schemaFunc(func(s *schemas) map[string]any {
			return map[string]any{"oneOf": []any{
				s.of(reflect.TypeOf(v1.Role{})),
				map[string]any{"type": "object", "required": []string{"revision"}, "additionalProperties": false,
					"properties": map[string]any{"revision": map[string]any{"type": "integer"}}},
			}}
		}), "the stored role when the list has one item, else the new revision"}}},
	{pattern: "POST " + v1.PathScraperCert, summary: "Issue a metrics scraper certificate for a CSR",
		body: v1.ScraperCertRequest{}, answers: []answer{{200, v1.CertificateResponse{}, "the scraper's certificate, organization " + v1.OrgScrapers}}},
	{pattern: "POST " + v1.PathAdminCert, summary: "Renew the calling admin's certificate for a CSR (same name, new key); the old one stays valid until revoked or expired",
		body: v1.AdminCertRequest{}, answers: []answer{{200, v1.CertificateResponse{}, "the new admin certificate, organization " + v1.OrgAdmins}}},
	{pattern: "GET " + v1.PathCertificates, summary: "List the admin and scraper certificates the controller issued, revoked ones too",
		answers: []answer{{200, v1.CertificateList{}, "the certificates; current marks the caller's"}}},
	{pattern: "POST " + v1.PathCertificates + "/{serial}/revoke", summary: "Revoke an admin or scraper certificate: every later request with it is refused. The last valid admin certificate cannot be revoked",
		answers: []answer{{200, v1.Certificate{}, "the certificate, revoked"}}},
	{pattern: "GET " + v1.PathProviders, summary: "List providers (passwords are never returned)",
		answers: []answer{{200, v1.ProviderList{}, "the providers"}}},
	{pattern: "GET " + v1.PathProviders + "/{name}", summary: "One provider (without its password)",
		answers: []answer{{200, v1.Provider{}, "the provider"}}},
	{pattern: "PUT " + v1.PathProviders + "/{name}", summary: "Create or update a provider; checked against vCenter first. Without vcenter.password an update keeps the stored one",
		body: v1.Provider{}, answers: []answer{
			{200, v1.Provider{}, "updated (without its password)"},
			{201, v1.Provider{}, "created (without its password)"},
		}},
	{pattern: "DELETE " + v1.PathProviders + "/{name}", summary: "Delete a provider no cluster uses",
		answers: []answer{{204, nil, "deleted"}}},
	{pattern: "GET " + v1.PathImages, summary: "List imported images",
		query:   []queryParam{{name: "provider", typ: "string", description: "only this provider's images"}},
		answers: []answer{{200, v1.ImageList{}, "the images"}}},
	{pattern: "POST " + v1.PathImages, summary: "Upload an OVA (the raw file as application/octet-stream) to import into ?provider= as a template",
		query: []queryParam{{name: "provider", typ: "string", description: "the provider to import into", required: true}},
		body:  []byte{},
		answers: []answer{
			{docAsync.status, docAsync.body, docAsync.description + "; the import runs in the background"},
			{200, v1.Image{}, "the same file was imported before: the existing image, nothing done"},
		}},
	{pattern: "GET " + v1.PathClusters, summary: "List clusters",
		answers: []answer{{200, v1.ClusterList{}, "the clusters"}}},
	{pattern: "POST " + v1.PathClusters, summary: "Create a cluster: validated and pre-checked against vCenter, then built in the background",
		body: v1.ClusterSpec{}, answers: []answer{docAsync}},
	{pattern: "GET " + v1.PathClusters + "/{name}", summary: "A cluster with its nodes (vCenter power, agent reports), conditions and events",
		answers: []answer{{200, v1.Cluster{}, "the cluster"}}},
	{pattern: "DELETE " + v1.PathClusters + "/{name}", summary: "Delete a cluster's VMs; data disks stay unless ?purge=true",
		query:   []queryParam{{name: "purge", typ: "boolean", description: "delete the data disks too"}},
		answers: []answer{docAsync}},
	{pattern: "GET " + v1.PathLeftovers, summary: "What clusters deleted without purge left: their data disks' folders (with their etcd data) and the controller's copies of their etcd snapshots",
		answers: []answer{{200, v1.ClusterLeftoversList{}, "the leftovers, oldest deletion first"}}},
	{pattern: "DELETE " + v1.PathLeftovers + "/{id}", summary: "Purge a deleted cluster's leftovers (id is NAME-UID): its data disks' folders on every datastore, then its snapshot copies; asking again finishes a purge cut short",
		answers: []answer{{200, v1.ClusterLeftovers{}, "what was removed"}}},
	{pattern: "POST " + v1.PathClusters + "/{name}/scale", summary: "Scale workers, or masters in pairs",
		body: v1.ScaleRequest{}, answers: []answer{docAsync}},
	{pattern: "POST " + v1.PathClusters + "/{name}/upgrade", summary: "Move the cluster to another node image (and the next Kubernetes minor) by reimage: masters one at a time keeping their data disks, workers surged; {\"abort\": true} stops a running upgrade and rolls the node being replaced back",
		body: v1.UpgradeRequest{}, answers: []answer{docAsync}},
	{pattern: "POST " + v1.PathClusters + "/{name}/restore", summary: "Restore the cluster's etcd keyspace from a master's snapshot (default: the newest any master reports); what was written since is lost, each master's state before it is kept on its data disk",
		body: v1.RestoreRequest{}, answers: []answer{docAsync}},
	{pattern: "POST " + v1.PathClusters + "/{name}/etcd-snapshot", summary: "Take an etcd snapshot now: every master takes one, and the first taken after the request answers it once the controller keeps its copy (status.etcdSnapshotRequest names it)",
		answers: []answer{docAsync}},
	{pattern: "POST " + v1.PathClusters + "/{name}/retry", summary: "Retry the steps that failed for good",
		answers: []answer{docAsync}},
	{pattern: "DELETE " + v1.PathClusters + "/{name}/nodes/{node}", summary: "Remove one worker; ?keepVM=true keeps its VM powered off",
		query:   []queryParam{{name: "keepVM", typ: "boolean", description: "power the VM off and keep it instead of deleting it"}},
		answers: []answer{docAsync}},
	{pattern: "POST " + v1.PathClusters + "/{name}/nodes/{node}/replace", summary: "Replace a broken master's VM by a new one of the same name, address and image, on its data disk (the same etcd member) or, with freshDisk, a new one; the old VM hands over if it can; a new VM not Ready in time is rolled back; an empty body takes the defaults",
		body: v1.ReplaceNodeRequest{}, optional: true, answers: []answer{docAsync}},
	{pattern: "POST " + v1.PathClusters + "/{name}/kubeconfig", summary: "Issue a cluster-admin kubeconfig (system:masters, through the VIP) with a new key; an empty body takes the default lifetime",
		body: v1.KubeconfigRequest{}, optional: true, answers: []answer{{200, v1.Kubeconfig{}, "the kubeconfig and when its certificate expires"}}},
	{pattern: "GET " + v1.PathClusters + "/{name}/kubeconfig", summary: "The caller's own kubeconfig: the server and CA, and harmonyctl credential as its exec plugin (no certificate in it)",
		answers: []answer{{200, v1.Kubeconfig{}, "the kubeconfig"}}},
	{pattern: "POST " + v1.PathClusters + "/{name}/credential", summary: "A short-lived client certificate (5 minutes) for the cluster's apiserver, for a CSR of a key made on the caller's machine: the user's name and their grant's group, which the cluster's RBAC binds to view, edit or cluster-admin; harmonyctl credential asks for it as kubectl's exec plugin",
		body: v1.CredentialRequest{}, answers: []answer{{200, v1.Credential{}, "the certificate, the cluster CA and the server"}}},
	{pattern: "GET " + v1.PathClusters + "/{name}/grants", summary: "The users' and groups' grants on a cluster",
		answers: []answer{{200, v1.GrantList{}, "the grants"}}},
	{pattern: "POST " + v1.PathClusters + "/{name}/grants", summary: "Grant a user or a group a role on the cluster (view, edit or admin); replaces the subject's earlier grant",
		body: v1.GrantRequest{}, answers: []answer{{201, v1.Grant{}, "the grant"}}},
	{pattern: "DELETE " + v1.PathClusters + "/{name}/grants/{kind}/{subject}", summary: "Revoke a user's (kind user) or a group's (kind group) grant on the cluster",
		answers: []answer{{204, nil, "revoked"}}},
	{pattern: "POST " + v1.PathClusters + "/{name}/revoke-sessions", summary: "End every session of a user who holds a grant on the cluster (directly or through a group) and on no other, so that no new credential is issued to them; refused (403) for a controller admin or a user of other clusters too, whose sessions a controller admin ends; certificates already issued end within their 5 minutes",
		body: v1.RevokeSessionsRequest{}, answers: []answer{{200, v1.SessionsEnded{}, "how many sessions were ended"}}},
	{pattern: "POST " + v1.PathSetup, summary: "Create the first admin with the one-time setup token a new controller wrote into its data directory",
		body: v1.SetupRequest{}, answers: []answer{{201, v1.User{}, "the admin user; the token is used up"}}},
	{pattern: "POST " + v1.PathLogin, summary: "Log in with a user name and password; throttled per user and per address (429 with Retry-After)",
		body: v1.LoginRequest{}, answers: []answer{{200, v1.Session{}, "a session: an access token (15 minutes) and a refresh token (12 hours)"}}},
	{pattern: "POST " + v1.PathRefresh, summary: "New tokens for a live session; the user is read again, so a disabled or deleted user is refused",
		body: v1.RefreshRequest{}, answers: []answer{{200, v1.Session{}, "the session with a new access token"}}},
	{pattern: "POST " + v1.PathLogout, summary: "End the session of a refresh token; its access tokens stop working at once",
		body: v1.RefreshRequest{}, answers: []answer{{204, nil, "ended"}}},
	{pattern: "GET " + v1.PathWhoAmI, summary: "Who the controller takes the caller for",
		answers: []answer{{200, v1.WhoAmI{}, "the caller"}}},
	{pattern: "GET " + v1.PathAudit, summary: "Audited requests (every change, logins and enrollments; never a body), oldest first, at most the newest 1000",
		query: []queryParam{
			{name: "since", typ: "string", description: "a duration back from now (24h) or an RFC 3339 time"},
			{name: "cluster", typ: "string", description: "only requests on this cluster"},
			{name: "user", typ: "string", description: "only requests by (or, for a login, for) this user"},
		},
		answers: []answer{{200, v1.AuditList{}, "the entries"}}},
	{pattern: "GET " + v1.PathUsers, summary: "List users (password hashes are never returned)",
		answers: []answer{{200, v1.UserList{}, "the users"}}},
	{pattern: "POST " + v1.PathUsers, summary: "Create a local user; the password is hashed with argon2id",
		body: v1.UserCreate{}, answers: []answer{{201, v1.User{}, "the user"}}},
	{pattern: "GET " + v1.PathUsers + "/{user}", summary: "One user",
		answers: []answer{{200, v1.User{}, "the user"}}},
	{pattern: "PATCH " + v1.PathUsers + "/{user}", summary: "Change a user's password, role or disabled flag; any change ends the user's sessions",
		body: v1.UserUpdate{}, answers: []answer{{200, v1.User{}, "the user as changed"}}},
	{pattern: "DELETE " + v1.PathUsers + "/{user}", summary: "Delete a user with their sessions and grants",
		answers: []answer{{204, nil, "deleted"}}},
	{pattern: "GET " + v1.PathLDAP, summary: "The LDAP or Active Directory settings (the bind password is never returned)",
		answers: []answer{{200, v1.LDAP{}, "the settings"}}},
	{pattern: "PUT " + v1.PathLDAP, summary: "Set the LDAP or Active Directory source of users; checked first (TLS, the service account's bind, both search bases). Without bindPassword an update keeps the stored one",
		body: v1.LDAP{}, answers: []answer{
			{200, v1.LDAP{}, "updated (without the bind password)"},
			{201, v1.LDAP{}, "created (without the bind password)"},
		}},
	{pattern: "DELETE " + v1.PathLDAP, summary: "Remove the LDAP settings; every directory user's session ends",
		answers: []answer{{200, v1.SessionsEnded{}, "how many sessions were ended"}}},
	{pattern: "POST " + v1.PathLDAP + "/lookup", summary: "Look a directory user up as a sign-in would, without their password: their entry, groups and role",
		body: v1.LDAPLookupRequest{}, answers: []answer{{200, v1.LDAPUserInfo{}, "what the directory says of the user"}}},
	{pattern: "POST " + v1.PathUsers + "/{user}/end-sessions", summary: "End every session of a user at once",
		answers: []answer{{200, v1.SessionsEnded{}, "how many sessions ended"}}},
	{pattern: "GET " + v1.PathOperations + "/{id}", summary: "An operation with its progress; ?watch=true&revision=N&timeout=30s long-polls for newer events",
		query: []queryParam{
			{name: "watch", typ: "boolean", description: "wait until there is an event newer than revision, or the operation ends, or timeout passes"},
			{name: "revision", typ: "integer", description: "the revision the caller has seen; events up to it are left out"},
			{name: "timeout", typ: "string", description: "how long a watch waits, " + docDuration + ", at most " + maxOperationWatch.String() + "; default " + DefaultOperationWatch.String()},
		},
		answers: []answer{{200, v1.Operation{}, "the operation; when watching, as soon as it has news or at the timeout"}}},
	{pattern: "GET " + v1.PathOpenAPI, summary: "This document",
		answers: []answer{{200, schemaFunc(func(*schemas) map[string]any { return map[string]any{"type": "object"} }), "the OpenAPI document"}}},
	{pattern: "GET " + v1.PathMetrics, summary: "Prometheus metrics (admin or scraper certificate)",
		answers: []answer{{200, mediaType("text/plain"), "metrics in the Prometheus text format"}}},
	{pattern: "GET " + v1.PathMetricsTargets, summary: "Every node's agent metrics endpoint, for Prometheus's http_sd_configs (admin or scraper certificate)",
		answers: []answer{{200, []v1.MetricsTargetGroup{}, "one group per node with an address: its first address on port " + strconv.Itoa(v1.AgentMetricsPort) + ", labelled " + v1.MetricsLabelCluster + ", " + v1.MetricsLabelNode + " and " + v1.MetricsLabelRole}}},
}

func (c *Controller) handleOpenAPI(w http.ResponseWriter, r *http.Request, _ principal) *apiError {
	w.Header().Set("Content-Type", "application/json")
	w.Write(c.openAPI())
	return nil
}

// openAPIDocument builds the OpenAPI 3.1 document of the API, with each
// route's permission as routes() registered it.
func openAPIDocument(perms map[string]permission) map[string]any {
	s := &schemas{defs: map[string]any{}}
	errorRef := s.of(reflect.TypeOf(v1.ErrorBody{}))
	content := func(body any) map[string]any {
		switch b := body.(type) {
		case nil:
			return nil
		case mediaType:
			return map[string]any{string(b): map[string]any{"schema": map[string]any{"type": "string"}}}
		case []byte:
			return map[string]any{"application/octet-stream": map[string]any{"schema": map[string]any{"type": "string", "format": "binary"}}}
		case schemaFunc:
			return map[string]any{"application/json": map[string]any{"schema": b(s)}}
		default:
			return map[string]any{"application/json": map[string]any{"schema": s.of(reflect.TypeOf(b))}}
		}
	}
	paths := map[string]map[string]any{}
	for _, d := range adminAPIDocs {
		method, path, _ := strings.Cut(d.pattern, " ")
		op := map[string]any{"summary": d.summary}
		var params []any
		for _, seg := range strings.Split(path, "/") {
			if strings.HasPrefix(seg, "{") {
				params = append(params, map[string]any{"name": strings.Trim(seg, "{}"), "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
			}
		}
		for _, q := range d.query {
			params = append(params, map[string]any{"name": q.name, "in": "query", "required": q.required,
				"description": q.description, "schema": map[string]any{"type": q.typ}})
		}
		if params != nil {
			op["parameters"] = params
		}
		if d.body != nil {
			op["requestBody"] = map[string]any{"required": !d.optional, "content": content(d.body)}
		}
		responses := map[string]any{
			"default": map[string]any{"description": "an error: a stable code, a message and the field at fault",
				"content": map[string]any{"application/json": map[string]any{"schema": errorRef}}},
		}
		for _, a := range d.answers {
			r := map[string]any{"description": a.description}
			if c := content(a.body); c != nil {
				r["content"] = c
			}
			responses[strconv.Itoa(a.status)] = r
		}
		op["responses"] = responses
		perm, ok := perms[d.pattern]
		if !ok {
			perm = permAdmin // documented but not registered: the test says so
		}
		if perm.allows == nil {
			op["security"] = []any{}
		} else {
			op["security"] = []any{map[string]any{"clientCertificate": []any{}}, map[string]any{"session": []any{}}}
		}
		op["description"] = perm.doc
		op["x-harmony-permission"] = perm.name
		if paths[path] == nil {
			paths[path] = map[string]any{}
		}
		paths[path][strings.ToLower(method)] = op
	}
	// The guestinfo network document is no route's body, but it is part
	// of the v1 wire format.
	s.of(reflect.TypeOf(v1.NetworkConfig{}))
	if def, ok := s.defs["NetworkConfig"].(map[string]any); ok {
		def["description"] = "guestinfo.harmony.network: a VM's static address, written by the controller"
	}
	return map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{"title": "Harmony controller API", "version": buildinfo.Version,
			"description": "Admin, user and node API of harmony-controller, over TLS. A caller is a signed-in user (Authorization: Bearer and the access token of a session from POST " + v1.PathLogin +
				"), or holds a client certificate from the controller's CA: an admin's (" + v1.OrgAdmins + ", admin.conf, the break-glass credential), an enrolled node's (" + v1.OrgNodes + ") or a metrics scraper's (" + v1.OrgScrapers + ")." +
				" Every route declares one permission (x-harmony-permission): public, node, metrics, admin, admin-certificate, signed-in, cluster:view or cluster:admin." +
				" A user sees only the clusters granted to them; any other cluster answers 404." +
				" Long operations (creating, scaling, upgrading, retrying or deleting a cluster, restoring or snapshotting its etcd, removing a node, importing an image) answer 202 with an Operation;" +
				" GET " + v1.PathOperations + "/{id} polls it, or with ?watch=true&revision=N&timeout=30s long-polls for newer events." +
				" Errors are JSON: {\"error\": {\"code\", \"message\", \"field\"}}, with a stable code."},
		"paths":    paths,
		"security": []any{map[string]any{"clientCertificate": []any{}}, map[string]any{"session": []any{}}},
		"components": map[string]any{
			"schemas": s.defs,
			"securitySchemes": map[string]any{
				"clientCertificate": map[string]any{"type": "mutualTLS",
					"description": "A client certificate issued by the controller's CA. Its single organization says who the caller is: " +
						v1.OrgAdmins + " (admins), " + v1.OrgNodes + " (enrolled nodes, whose record must still exist) or " + v1.OrgScrapers + " (metrics scrapers)."},
				"session": map[string]any{"type": "http", "scheme": "bearer", "bearerFormat": "JWT",
					"description": "A session's access token from POST " + v1.PathLogin + " (15 minutes; POST " + v1.PathRefresh + " with the refresh token gives a new one, re-reading the user)."},
			},
		},
	}
}

// schemas turns Go wire types into JSON Schemas by their json tags.
type schemas struct{ defs map[string]any }

var timeType = reflect.TypeOf(time.Time{})

func (s *schemas) of(t reflect.Type) map[string]any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case t.Kind() == reflect.String:
		return map[string]any{"type": "string"}
	case t.Kind() == reflect.Bool:
		return map[string]any{"type": "boolean"}
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return map[string]any{"type": "integer"}
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return map[string]any{"type": "number"}
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8:
		return map[string]any{"type": "string", "contentEncoding": "base64"}
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		return map[string]any{"type": "array", "items": s.of(t.Elem())}
	case t.Kind() == reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": s.of(t.Elem())}
	case t.Kind() == reflect.Interface:
		return map[string]any{}
	case t.Kind() != reflect.Struct:
		return map[string]any{}
	}
	name := t.Name()
	ref := map[string]any{"$ref": "#/components/schemas/" + name}
	if _, done := s.defs[name]; done {
		return ref
	}
	s.defs[name] = nil // a placeholder against recursion
	props := map[string]any{}
	var required []string
	s.fields(t, props, &required)
	def := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		def["required"] = required
	}
	s.defs[name] = def
	return ref
}

func (s *schemas) fields(t reflect.Type, props map[string]any, required *[]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if f.Anonymous && tag == "" {
			s.fields(f.Type, props, required)
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		props[name] = s.of(f.Type)
		if !strings.Contains(opts, "omit") && f.Type.Kind() != reflect.Pointer {
			*required = append(*required, name)
		}
	}
}
