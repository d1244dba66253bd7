package controller

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// TestOpenAPIDocumentsEveryRoute fetches the served document and checks
// that every registered route is in it, with a method, and that every
// schema it refers to is defined.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	tc := startController(t, t.TempDir())
	r := doJSON(t, tc.admin, "GET", tc.url+v1.PathOpenAPI, nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET %s: %d", v1.PathOpenAPI, r.status)
	}
	var doc struct {
		OpenAPI    string                                `json:"openapi"`
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	r.decode(t, &doc)
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi %q", doc.OpenAPI)
	}
	if len(tc.c.patterns) < 25 {
		t.Fatalf("only %d routes registered", len(tc.c.patterns))
	}
	for _, p := range tc.c.patterns {
		method, path, _ := strings.Cut(p, " ")
		if _, ok := doc.Paths[path][strings.ToLower(method)]; !ok {
			t.Errorf("route %s is not in the OpenAPI document", p)
		}
	}
	for _, ref := range strings.Split(string(r.body), `"$ref": "#/components/schemas/`)[1:] {
		name := ref[:strings.IndexByte(ref, '"')]
		if s, ok := doc.Components.Schemas[name]; !ok || string(s) == "null" {
			t.Errorf("schema %s is referred to but not defined", name)
		}
	}
	// The wire types' fields are there by their JSON names.
	var spec struct {
		Properties map[string]any `json:"properties"`
	}
	if err := json.Unmarshal(doc.Components.Schemas["ClusterSpec"], &spec); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"masters", "workers", "vip", "podCIDR", "masterDataDiskGiB"} {
		if _, ok := spec.Properties[f]; !ok {
			t.Errorf("ClusterSpec schema lacks %s", f)
		}
	}
	// Without an admin certificate, no document.
	if r := doJSON(t, tc.anonClient(), "GET", tc.url+v1.PathOpenAPI, nil); r.status != http.StatusUnauthorized {
		t.Errorf("anonymous: %d", r.status)
	}
}
