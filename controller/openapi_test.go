package controller

import (
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/buildinfo"
)

// openAPIDoc is the part of the document the tests read.
type openAPIDoc struct {
	OpenAPI string `json:"openapi"`
	Info    struct {
		Title   string `json:"title"`
		Version string `json:"version"`
	} `json:"info"`
	Paths      map[string]map[string]openAPIOperation `json:"paths"`
	Components struct {
		Schemas         map[string]json.RawMessage `json:"schemas"`
		SecuritySchemes map[string]struct {
			Type string `json:"type"`
		} `json:"securitySchemes"`
	} `json:"components"`
}

type openAPIOperation struct {
	Summary    string `json:"summary"`
	Parameters []struct {
		Name     string `json:"name"`
		In       string `json:"in"`
		Required bool   `json:"required"`
	} `json:"parameters"`
	RequestBody *json.RawMessage           `json:"requestBody"`
	Responses   map[string]json.RawMessage `json:"responses"`
	Security    []map[string][]string      `json:"security"`
	Permission  string                     `json:"x-harmony-permission"`
}

func loadOpenAPI(t *testing.T) (openAPIDoc, []byte) {
	t.Helper()
	c := &Controller{permissions: map[string]permission{}}
	c.routes()
	data, err := json.Marshal(openAPIDocument(c.permissions))
	if err != nil {
		t.Fatal(err)
	}
	var doc openAPIDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	return doc, data
}

// hasOperation reports whether the document has method on path; path
// templates such as {name} are compared as written.
func (d openAPIDoc) hasOperation(method, path string) bool {
	_, ok := d.Paths[path][strings.ToLower(method)]
	return ok
}

var templateSegment = regexp.MustCompile(`\{[^}/]+\}`)

var permissionNames = []string{permPublic.name, permNode.name, permMetrics.name, permAdmin.name, permAdminCert.name,
	permSignedIn.name, permClusterView.name, permClusterAdmin.name}

// TestOpenAPIDocumentShape checks the document's header, that every
// operation is complete, and that every schema it refers to is defined.
func TestOpenAPIDocumentShape(t *testing.T) {
	doc, data := loadOpenAPI(t)
	if doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi = %q, want 3.1.0", doc.OpenAPI)
	}
	if doc.Info.Version == "" || doc.Info.Version != buildinfo.Version {
		t.Errorf("info.version = %q, want the build's %q", doc.Info.Version, buildinfo.Version)
	}
	if doc.Info.Title == "" {
		t.Error("info.title is empty")
	}
	if s := doc.Components.SecuritySchemes["clientCertificate"]; s.Type != "mutualTLS" {
		t.Errorf("security scheme clientCertificate has type %q, want mutualTLS", s.Type)
	}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			where := strings.ToUpper(method) + " " + path
			if op.Summary == "" {
				t.Errorf("%s has no summary", where)
			}
			if _, ok := op.Responses["default"]; !ok {
				t.Errorf("%s does not document its error answer", where)
			}
			if len(op.Responses) < 2 {
				t.Errorf("%s documents no success answer", where)
			}
			var inPath []string
			for _, p := range op.Parameters {
				if p.In == "path" {
					inPath = append(inPath, "{"+p.Name+"}")
					if !p.Required {
						t.Errorf("%s: path parameter %s is not required", where, p.Name)
					}
				}
			}
			if got := templateSegment.FindAllString(path, -1); !slices.Equal(got, inPath) {
				t.Errorf("%s: path parameters %v, want %v", where, inPath, got)
			}
			if (op.Permission == permPublic.name) != (len(op.Security) == 0) {
				t.Errorf("%s: permission %q does not agree with security %v", where, op.Permission, op.Security)
			}
			if !slices.Contains(permissionNames, op.Permission) {
				t.Errorf("%s: permission %q is none of %q", where, op.Permission, permissionNames)
			}
		}
	}
	for _, ref := range strings.Split(string(data), `"$ref":"#/components/schemas/`)[1:] {
		name := ref[:strings.IndexByte(ref, '"')]
		if s, ok := doc.Components.Schemas[name]; !ok || string(s) == "null" {
			t.Errorf("schema %s is referred to but not defined", name)
		}
	}
	// The wire types' fields are there by their JSON names.
	for typ, fields := range map[string][]string{
		"ClusterSpec":  {"masters", "workers", "vip", "podCIDR", "masterDataDiskGiB"},
		"Operation":    {"id", "kind", "state", "revision", "events"},
		"Error":        {"code", "message", "field"},
		"ErrorBody":    {"error"},
		"Provider":     {"vcenter", "datastores", "ipPool"},
		"VCenter":      {"url", "username", "password", "thumbprint"},
		"ScaleRequest": {"masters", "workers"},
	} {
		var schema struct {
			Properties map[string]any `json:"properties"`
		}
		if err := json.Unmarshal(doc.Components.Schemas[typ], &schema); err != nil {
			t.Fatalf("schema %s: %v", typ, err)
		}
		for _, f := range fields {
			if _, ok := schema.Properties[f]; !ok {
				t.Errorf("%s schema lacks %s", typ, f)
			}
		}
	}
	// The image upload is raw bytes, and a second upload of the same file
	// answers with the image.
	up := doc.Paths[v1.PathImages]["post"]
	if up.RequestBody == nil || !strings.Contains(string(*up.RequestBody), "application/octet-stream") {
		t.Errorf("POST %s: body is not an octet stream", v1.PathImages)
	}
	for _, status := range []string{"200", "202"} {
		if _, ok := up.Responses[status]; !ok {
			t.Errorf("POST %s does not document %s", v1.PathImages, status)
		}
	}
}

// routePattern matches a route registered in routes(): its method, the
// v1 path constant, and the suffix after it.
var routePattern = regexp.MustCompile(`(?:c\.route\(mux,|mux\.HandleFunc\()\s*"([A-Z]+) "\s*\+\s*v1\.(Path\w+)(?:\s*\+\s*"([^"]*)")?`)

// TestOpenAPIDocumentsRoutesInSource reads routes() from http.go, so that
// a route registered any way, /healthz too, must be documented.
func TestOpenAPIDocumentsRoutesInSource(t *testing.T) {
	src, err := os.ReadFile("http.go")
	if err != nil {
		t.Fatal(err)
	}
	text := string(src)
	start := strings.Index(text, "func (c *Controller) routes() http.Handler {")
	if start < 0 {
		t.Fatal("routes() not found in http.go")
	}
	end := strings.Index(text[start:], "\n}\n")
	if end < 0 {
		t.Fatal("end of routes() not found")
	}
	body := text[start : start+end]

	// The v1 path constants by name. A route on a new constant fails
	// below until it is added here.
	paths := map[string]string{
		"PathCA":                v1.PathCA,
		"PathEnroll":            v1.PathEnroll,
		"PathRenew":             v1.PathRenew,
		"PathNodeRole":          v1.PathNodeRole,
		"PathNodeStatus":        v1.PathNodeStatus,
		"PathNodeEtcdSnapshots": v1.PathNodeEtcdSnapshots,
		"PathNodes":             v1.PathNodes,
		"PathRoles":             v1.PathRoles,
		"PathScraperCert":       v1.PathScraperCert,
		"PathAdminCert":         v1.PathAdminCert,
		"PathCertificates":      v1.PathCertificates,
		"PathHealthz":           v1.PathHealthz,
		"PathMetrics":           v1.PathMetrics,
		"PathMetricsTargets":    v1.PathMetricsTargets,
		"PathProviders":         v1.PathProviders,
		"PathImages":            v1.PathImages,
		"PathLeftovers":         v1.PathLeftovers,
		"PathClusters":          v1.PathClusters,
		"PathOperations":        v1.PathOperations,
		"PathOpenAPI":           v1.PathOpenAPI,
		"PathSetup":             v1.PathSetup,
		"PathLogin":             v1.PathLogin,
		"PathRefresh":           v1.PathRefresh,
		"PathLogout":            v1.PathLogout,
		"PathWhoAmI":            v1.PathWhoAmI,
		"PathUsers":             v1.PathUsers,
		"PathAudit":             v1.PathAudit,
		"PathLDAP":              v1.PathLDAP,
	}
	matches := routePattern.FindAllStringSubmatch(body, -1)
	// Every registration must be in the form the pattern reads; one in
	// another form would otherwise escape the check. The catch-all "/"
	// is no route.
	registrations := strings.Count(body, "c.route(mux,") + strings.Count(body, "mux.HandleFunc(") - strings.Count(body, `mux.HandleFunc("/",`)
	if len(matches) != registrations || len(matches) < 25 {
		t.Fatalf("read %d routes from routes(), but it registers %d; keep the form c.route(mux, \"METHOD \"+v1.PathX+\"/suffix\", ...)", len(matches), registrations)
	}
	doc, _ := loadOpenAPI(t)
	for _, m := range matches {
		base, ok := paths[m[2]]
		if !ok {
			t.Errorf("routes() uses v1.%s, which this test does not know; add it to the map", m[2])
			continue
		}
		method, path := m[1], base+m[3]
		if !doc.hasOperation(method, path) {
			t.Errorf("route %s %s is not in the OpenAPI document", method, path)
		}
	}
}

// TestOpenAPIDocumentsEveryRoute fetches the served document and checks
// that every registered route is in it, that it documents no route that is
// not registered, and that the access it states is what the route does.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	tc := startController(t, t.TempDir())
	r := doJSON(t, tc.admin, "GET", tc.url+v1.PathOpenAPI, nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET %s: %d", v1.PathOpenAPI, r.status)
	}
	var doc openAPIDoc
	r.decode(t, &doc)
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi %q", doc.OpenAPI)
	}
	if len(tc.c.patterns) < 25 {
		t.Fatalf("only %d routes registered", len(tc.c.patterns))
	}
	for _, p := range tc.c.patterns {
		method, path, _ := strings.Cut(p, " ")
		if !doc.hasOperation(method, path) {
			t.Errorf("route %s is not in the OpenAPI document", p)
		}
	}
	registered := slices.Clone(tc.c.patterns)
	anon := tc.anonClient()
	for path, ops := range doc.Paths {
		for method, op := range ops {
			pattern := strings.ToUpper(method) + " " + path
			if !slices.Contains(registered, pattern) {
				t.Errorf("the document has %s, which is not a registered route", pattern)
				continue
			}
			url := tc.url + templateSegment.ReplaceAllString(path, "x")
			got := doJSON(t, anon, strings.ToUpper(method), url, nil)
			if op.Permission == permPublic.name {
				if got.status == http.StatusUnauthorized {
					t.Errorf("%s is documented as public, but refuses a caller without a certificate", pattern)
				}
				continue
			}
			if got.status != http.StatusUnauthorized {
				t.Errorf("%s without a certificate: %d, want 401", pattern, got.status)
			}
			// Path parameters of "x" name nothing and there is no body, so
			// an admin's call is refused or finds nothing, if it gets past
			// the certificate check.
			got = doJSON(t, tc.admin, strings.ToUpper(method), url, nil)
			admitted := got.status != http.StatusUnauthorized && got.status != http.StatusForbidden
			if (op.Permission != permNode.name) != admitted {
				t.Errorf("%s is documented as %s, but an admin gets %d %s", pattern, op.Permission, got.status, got.err.Code)
			}
		}
	}
	// Without an admin certificate, no document.
	if r := doJSON(t, tc.anonClient(), "GET", tc.url+v1.PathOpenAPI, nil); r.status != http.StatusUnauthorized {
		t.Errorf("anonymous: %d", r.status)
	}
}
