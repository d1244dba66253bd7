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

// apiDoc documents one route of the admin API. The OpenAPI document is
// made from these and the wire types themselves, so it cannot drift from
// the Go types; a test checks that every registered route has one.
type apiDoc struct {
	pattern string // "METHOD /path/{param}"
	summary string
	query   []string
	body    any // a wire type, []byte for an octet stream, nil for none
	status  int
	answer  any
}

var adminAPIDocs = []apiDoc{
	{"GET " + v1.PathCA, "The controller's CA bundle (PEM); no client certificate needed", nil, nil, 200, "pem"},
	{"POST " + v1.PathEnroll, "Enroll a node: one-time token and CSR, over server-authenticated TLS", nil, v1.EnrollRequest{}, 201, v1.CertificateResponse{}},
	{"POST " + v1.PathRenew, "Renew a node's certificate (node certificate)", nil, v1.RenewRequest{}, 200, v1.CertificateResponse{}},
	{"GET " + v1.PathNodeRole, "A node's own role; long poll with ?after=REVISION&wait=DURATION (node certificate)", []string{"after", "wait"}, nil, 200, v1.Role{}},
	{"POST " + v1.PathNodeStatus, "A node's status report (node certificate)", nil, v1.Status{}, 204, nil},
	{"GET " + v1.PathNodes, "List node records", nil, nil, 200, v1.NodeList{}},
	{"POST " + v1.PathNodes, "Create a node record; answers with its bootstrap document", nil, v1.NodeSpec{}, 201, v1.NodeWithBootstrap{}},
	{"GET " + v1.PathNodes + "/{name}", "One node record", nil, nil, 200, v1.Node{}},
	{"DELETE " + v1.PathNodes + "/{name}", "Delete a node record; its certificate stops working", nil, nil, 204, nil},
	{"POST " + v1.PathNodes + "/{name}/token", "A new bootstrap token (revokes unused ones)", nil, v1.TokenRequest{}, 201, v1.NodeWithBootstrap{}},
	{"GET " + v1.PathNodes + "/{name}/role", "A node's role", nil, nil, 200, v1.Role{}},
	{"PUT " + v1.PathNodes + "/{name}/role", "Replace a node's role", nil, v1.Role{}, 200, v1.Role{}},
	{"PUT " + v1.PathRoles, "Replace several roles in one transaction", nil, v1.RoleList{}, 200, nil},
	{"POST " + v1.PathScraperCert, "Issue a metrics scraper certificate for a CSR", nil, v1.ScraperCertRequest{}, 201, v1.CertificateResponse{}},
	{"GET " + v1.PathProviders, "List providers (passwords are never returned)", nil, nil, 200, v1.ProviderList{}},
	{"GET " + v1.PathProviders + "/{name}", "One provider", nil, nil, 200, v1.Provider{}},
	{"PUT " + v1.PathProviders + "/{name}", "Create or update a provider; checked against vCenter first. Without vcenter.password an update keeps the stored one", nil, v1.Provider{}, 200, v1.Provider{}},
	{"DELETE " + v1.PathProviders + "/{name}", "Delete a provider no cluster uses", nil, nil, 204, nil},
	{"GET " + v1.PathImages, "List imported images", []string{"provider"}, nil, 200, v1.ImageList{}},
	{"POST " + v1.PathImages, "Upload an OVA (application/octet-stream) to import into ?provider= as a template; 202 with an operation, or 200 with the image when the same file was imported before", []string{"provider"}, []byte{}, 202, v1.Operation{}},
	{"GET " + v1.PathClusters, "List clusters", nil, nil, 200, v1.ClusterList{}},
	{"POST " + v1.PathClusters, "Create a cluster: validated and pre-checked against vCenter, then built; 202 with an operation", nil, v1.ClusterSpec{}, 202, v1.Operation{}},
	{"GET " + v1.PathClusters + "/{name}", "A cluster with its nodes (vCenter power, agent reports), conditions and events", nil, nil, 200, v1.Cluster{}},
	{"DELETE " + v1.PathClusters + "/{name}", "Delete a cluster's VMs; data disks stay unless ?purge=true", []string{"purge"}, nil, 202, v1.Operation{}},
	{"POST " + v1.PathClusters + "/{name}/scale", "Scale workers, or masters in pairs", nil, v1.ScaleRequest{}, 202, v1.Operation{}},
	{"POST " + v1.PathClusters + "/{name}/retry", "Retry the steps that failed for good", nil, nil, 202, v1.Operation{}},
	{"DELETE " + v1.PathClusters + "/{name}/nodes/{node}", "Remove one worker; ?keepVM=true keeps its VM powered off", []string{"keepVM"}, nil, 202, v1.Operation{}},
	{"GET " + v1.PathOperations + "/{id}", "An operation with its progress; ?watch=true&revision=N&timeout=30s long-polls for newer events", []string{"watch", "revision", "timeout"}, nil, 200, v1.Operation{}},
	{"GET " + v1.PathOpenAPI, "This document", nil, nil, 200, nil},
	{"GET " + v1.PathMetrics, "Prometheus metrics (admin or scraper certificate)", nil, nil, 200, "text"},
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
			params = append(params, map[string]any{"name": q, "in": "query", "schema": map[string]any{"type": "string"}})
		}
		if params != nil {
			op["parameters"] = params
		}
		switch b := d.body.(type) {
		case nil:
		case []byte:
			op["requestBody"] = map[string]any{"required": true, "content": map[string]any{
				"application/octet-stream": map[string]any{"schema": map[string]any{"type": "string", "format": "binary"}}}}
		default:
			op["requestBody"] = map[string]any{"required": true, "content": map[string]any{
				"application/json": map[string]any{"schema": s.of(reflect.TypeOf(b))}}}
		}
		ok := map[string]any{"description": http.StatusText(d.status)}
		switch a := d.answer.(type) {
		case nil:
		case string:
			ok["content"] = map[string]any{"text/plain": map[string]any{"schema": map[string]any{"type": "string"}}}
		default:
			ok["content"] = map[string]any{"application/json": map[string]any{"schema": s.of(reflect.TypeOf(a))}}
		}
		op["responses"] = map[string]any{
			strconv.Itoa(d.status): ok,
			"default": map[string]any{"description": "an error: a stable code, a message and the field at fault",
				"content": map[string]any{"application/json": map[string]any{"schema": errorRef}}},
		}
		if !strings.HasPrefix(d.pattern, "GET "+v1.PathCA) && !strings.HasPrefix(d.pattern, "POST "+v1.PathEnroll) {
			op["security"] = []any{map[string]any{"clientCertificate": []any{}}}
		}
		if paths[path] == nil {
			paths[path] = map[string]any{}
		}
		paths[path][strings.ToLower(method)] = op
	}
	return map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{"title": "Harmony controller API", "version": buildinfo.Version,
			"description": "Admin and node API of harmony-controller. Every admin route needs a client certificate from the controller's CA with organization " + v1.OrgAdmins + " (admin.conf); node routes need the node's enrolled certificate. Long operations answer 202 with an Operation to poll or watch."},
		"paths": paths,
		"components": map[string]any{
			"schemas":         s.defs,
			"securitySchemes": map[string]any{"clientCertificate": map[string]any{"type": "mutualTLS"}},
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
