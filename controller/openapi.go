package controller

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
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
	access   access
	query    []queryParam
	body     any  // a wire type, []byte for an octet stream, nil for none
	optional bool // the body may be left out
	answers  []answer
}

// access is who may call a route: the organizations of the client
// certificates it accepts, none for a public route.
type access []string

var (
	docPublic         = access(nil)
	docNode           = access{v1.OrgNodes}
	docAdmin          = access{v1.OrgAdmins}
	docAdminOrScraper = access{v1.OrgAdmins, v1.OrgScrapers}
)

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
	{pattern: "GET " + v1.PathHealthz, summary: "Liveness: ok while the controller serves", access: docPublic,
		answers: []answer{{200, mediaType("text/plain"), "ok"}}},
	{pattern: "GET " + v1.PathCA, summary: "The controller's CA bundle (PEM); no client certificate needed", access: docPublic,
		answers: []answer{{200, mediaType("application/x-pem-file"), "the CA certificates, PEM"}}},
	{pattern: "POST " + v1.PathEnroll, summary: "Enroll a node: one-time token and CSR, over server-authenticated TLS", access: docPublic,
		body: v1.EnrollRequest{}, answers: []answer{{200, v1.CertificateResponse{}, "the node's certificate"}}},
	{pattern: "POST " + v1.PathRenew, summary: "Renew a node's certificate (node certificate)", access: docNode,
		body: v1.RenewRequest{}, answers: []answer{{200, v1.CertificateResponse{}, "the node's new certificate"}}},
	{pattern: "GET " + v1.PathNodeRole, summary: "A node's own role; long poll with ?after=REVISION&wait=DURATION (node certificate)", access: docNode,
		query: []queryParam{
			{name: "after", typ: "integer", description: "answer with the role only once its revision is greater than this"},
			{name: "wait", typ: "string", description: "how long to wait for a newer revision, " + docDuration + ", at most " + MaxWatchWait.String() + "; default 0, no wait"},
		},
		answers: []answer{
			{200, v1.Role{}, "the role, its revision greater than after"},
			{304, nil, "Not Modified: no revision greater than after came within wait"},
		}},
	{pattern: "POST " + v1.PathNodeStatus, summary: "A node's status report (node certificate); stored under the certificate's node name", access: docNode,
		body: v1.Status{}, answers: []answer{{204, nil, "stored"}}},
	{pattern: "GET " + v1.PathNodes, summary: "List node records", access: docAdmin,
		answers: []answer{{200, v1.NodeList{}, "the node records"}}},
	{pattern: "POST " + v1.PathNodes, summary: "Create a node record; answers with its bootstrap document", access: docAdmin,
		body: v1.NodeSpec{}, answers: []answer{{201, v1.NodeWithBootstrap{}, "the node and its bootstrap document with a one-time token"}}},
	{pattern: "GET " + v1.PathNodes + "/{name}", summary: "One node record", access: docAdmin,
		answers: []answer{{200, v1.Node{}, "the node record with its last status"}}},
	{pattern: "DELETE " + v1.PathNodes + "/{name}", summary: "Delete a node record; its certificate stops working", access: docAdmin,
		answers: []answer{{204, nil, "deleted"}}},
	{pattern: "POST " + v1.PathNodes + "/{name}/token", summary: "A new bootstrap token (revokes unused ones); an empty body takes the defaults", access: docAdmin,
		body: v1.TokenRequest{}, optional: true, answers: []answer{{201, v1.NodeWithBootstrap{}, "the node and its new bootstrap document"}}},
	{pattern: "GET " + v1.PathNodes + "/{name}/role", summary: "A node's role", access: docAdmin,
		answers: []answer{{200, v1.Role{}, "the role"}}},
	{pattern: "PUT " + v1.PathNodes + "/{name}/role", summary: "Replace a node's role; nodeName must be the node in the path", access: docAdmin,
		body: v1.Role{}, answers: []answer{{200, v1.Role{}, "the role as stored, with its new revision"}}},
	{pattern: "PUT " + v1.PathRoles, summary: "Replace several roles in one transaction", access: docAdmin,
		body: v1.RoleList{}, answers: []answer{{200, schemaFunc(func(s *schemas) map[string]any {
			return map[string]any{"oneOf": []any{
				s.of(reflect.TypeOf(v1.Role{})),
				map[string]any{"type": "object", "required": []string{"revision"}, "additionalProperties": false,
					"properties": map[string]any{"revision": map[string]any{"type": "integer"}}},
			}}
		}), "the stored role when the list has one item, else the new revision"}}},
	{pattern: "POST " + v1.PathScraperCert, summary: "Issue a metrics scraper certificate for a CSR", access: docAdmin,
		body: v1.ScraperCertRequest{}, answers: []answer{{200, v1.CertificateResponse{}, "the scraper's certificate, organization " + v1.OrgScrapers}}},
	{pattern: "POST " + v1.PathAdminCert, summary: "Renew the calling admin's certificate for a CSR (same name, new key); the old one stays valid until revoked or expired", access: docAdmin,
		body: v1.AdminCertRequest{}, answers: []answer{{200, v1.CertificateResponse{}, "the new admin certificate, organization " + v1.OrgAdmins}}},
	{pattern: "GET " + v1.PathCertificates, summary: "List the admin and scraper certificates the controller issued, revoked ones too", access: docAdmin,
		answers: []answer{{200, v1.CertificateList{}, "the certificates; current marks the caller's"}}},
	{pattern: "POST " + v1.PathCertificates + "/{serial}/revoke", summary: "Revoke an admin or scraper certificate: every later request with it is refused. The last valid admin certificate cannot be revoked", access: docAdmin,
		answers: []answer{{200, v1.Certificate{}, "the certificate, revoked"}}},
	{pattern: "GET " + v1.PathProviders, summary: "List providers (passwords are never returned)", access: docAdmin,
		answers: []answer{{200, v1.ProviderList{}, "the providers"}}},
	{pattern: "GET " + v1.PathProviders + "/{name}", summary: "One provider (without its password)", access: docAdmin,
		answers: []answer{{200, v1.Provider{}, "the provider"}}},
	{pattern: "PUT " + v1.PathProviders + "/{name}", summary: "Create or update a provider; checked against vCenter first. Without vcenter.password an update keeps the stored one", access: docAdmin,
		body: v1.Provider{}, answers: []answer{
			{200, v1.Provider{}, "updated (without its password)"},
			{201, v1.Provider{}, "created (without its password)"},
		}},
	{pattern: "DELETE " + v1.PathProviders + "/{name}", summary: "Delete a provider no cluster uses", access: docAdmin,
		answers: []answer{{204, nil, "deleted"}}},
	{pattern: "GET " + v1.PathImages, summary: "List imported images", access: docAdmin,
		query:   []queryParam{{name: "provider", typ: "string", description: "only this provider's images"}},
		answers: []answer{{200, v1.ImageList{}, "the images"}}},
	{pattern: "POST " + v1.PathImages, summary: "Upload an OVA (the raw file as application/octet-stream) to import into ?provider= as a template", access: docAdmin,
		query: []queryParam{{name: "provider", typ: "string", description: "the provider to import into", required: true}},
		body:  []byte{},
		answers: []answer{
			{docAsync.status, docAsync.body, docAsync.description + "; the import runs in the background"},
			{200, v1.Image{}, "the same file was imported before: the existing image, nothing done"},
		}},
	{pattern: "GET " + v1.PathClusters, summary: "List clusters", access: docAdmin,
		answers: []answer{{200, v1.ClusterList{}, "the clusters"}}},
	{pattern: "POST " + v1.PathClusters, summary: "Create a cluster: validated and pre-checked against vCenter, then built in the background", access: docAdmin,
		body: v1.ClusterSpec{}, answers: []answer{docAsync}},
	{pattern: "GET " + v1.PathClusters + "/{name}", summary: "A cluster with its nodes (vCenter power, agent reports), conditions and events", access: docAdmin,
		answers: []answer{{200, v1.Cluster{}, "the cluster"}}},
	{pattern: "DELETE " + v1.PathClusters + "/{name}", summary: "Delete a cluster's VMs; data disks stay unless ?purge=true", access: docAdmin,
		query:   []queryParam{{name: "purge", typ: "boolean", description: "delete the data disks too"}},
		answers: []answer{docAsync}},
	{pattern: "POST " + v1.PathClusters + "/{name}/scale", summary: "Scale workers, or masters in pairs", access: docAdmin,
		body: v1.ScaleRequest{}, answers: []answer{docAsync}},
	{pattern: "POST " + v1.PathClusters + "/{name}/retry", summary: "Retry the steps that failed for good", access: docAdmin,
		answers: []answer{docAsync}},
	{pattern: "DELETE " + v1.PathClusters + "/{name}/nodes/{node}", summary: "Remove one worker; ?keepVM=true keeps its VM powered off", access: docAdmin,
		query:   []queryParam{{name: "keepVM", typ: "boolean", description: "power the VM off and keep it instead of deleting it"}},
		answers: []answer{docAsync}},
	{pattern: "POST " + v1.PathClusters + "/{name}/kubeconfig", summary: "Issue a cluster-admin kubeconfig (system:masters, through the VIP) with a new key; an empty body takes the default lifetime", access: docAdmin,
		body: v1.KubeconfigRequest{}, optional: true, answers: []answer{{200, v1.Kubeconfig{}, "the kubeconfig and when its certificate expires"}}},
	{pattern: "GET " + v1.PathOperations + "/{id}", summary: "An operation with its progress; ?watch=true&revision=N&timeout=30s long-polls for newer events", access: docAdmin,
		query: []queryParam{
			{name: "watch", typ: "boolean", description: "wait until there is an event newer than revision, or the operation ends, or timeout passes"},
			{name: "revision", typ: "integer", description: "the revision the caller has seen; events up to it are left out"},
			{name: "timeout", typ: "string", description: "how long a watch waits, " + docDuration + ", at most " + maxOperationWatch.String() + "; default " + DefaultOperationWatch.String()},
		},
		answers: []answer{{200, v1.Operation{}, "the operation; when watching, as soon as it has news or at the timeout"}}},
	{pattern: "GET " + v1.PathOpenAPI, summary: "This document", access: docAdmin,
		answers: []answer{{200, schemaFunc(func(*schemas) map[string]any { return map[string]any{"type": "object"} }), "the OpenAPI document"}}},
	{pattern: "GET " + v1.PathMetrics, summary: "Prometheus metrics (admin or scraper certificate)", access: docAdminOrScraper,
		answers: []answer{{200, mediaType("text/plain"), "metrics in the Prometheus text format"}}},
}

var (
	openAPIOnce sync.Once
	openAPIJSON []byte
)

func (c *Controller) handleOpenAPI(w http.ResponseWriter, r *http.Request, _ principal) *apiError {
	openAPIOnce.Do(func() { openAPIJSON, _ = json.MarshalIndent(openAPIDocument(), "", "  ") })
	w.Header().Set("Content-Type", "application/json")
	w.Write(openAPIJSON)
	return nil
}

// openAPIDocument builds the OpenAPI 3.1 document of the API.
func openAPIDocument() map[string]any {
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
		if len(d.access) == 0 {
			op["security"] = []any{}
			op["description"] = "Public: no client certificate needed."
		} else {
			op["security"] = []any{map[string]any{"clientCertificate": []any{}}}
			op["description"] = "Needs a client certificate of organization " + strings.Join(d.access, " or ") + "."
		}
		op["x-harmony-organizations"] = append([]string{}, d.access...)
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
			"description": "Admin and node API of harmony-controller, over mutual TLS. Every admin route needs a client certificate from the controller's CA with organization " + v1.OrgAdmins +
				" (admin.conf); node routes need the node's enrolled certificate (" + v1.OrgNodes + "); " + v1.PathMetrics + " also takes a scraper certificate (" + v1.OrgScrapers + ")." +
				" Long operations (creating, scaling, retrying or deleting a cluster, removing a node, importing an image) answer 202 with an Operation;" +
				" GET " + v1.PathOperations + "/{id} polls it, or with ?watch=true&revision=N&timeout=30s long-polls for newer events." +
				" Errors are JSON: {\"error\": {\"code\", \"message\", \"field\"}}, with a stable code."},
		"paths":    paths,
		"security": []any{map[string]any{"clientCertificate": []any{}}},
		"components": map[string]any{
			"schemas": s.defs,
			"securitySchemes": map[string]any{"clientCertificate": map[string]any{"type": "mutualTLS",
				"description": "A client certificate issued by the controller's CA. Its single organization says who the caller is: " +
					v1.OrgAdmins + " (admins), " + v1.OrgNodes + " (enrolled nodes, whose record must still exist) or " + v1.OrgScrapers + " (metrics scrapers)."}},
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
