// Package console is the web console the controller serves at
// PathPrefix: a small page and script that use the REST API as their only
// back end, with the session in cookies (v1.LoginRequest.Browser). Every
// asset is in the binary, so the console works with no network beyond
// the controller.
package console

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

// PathPrefix is where the console is served.
const PathPrefix = "/console/"

//go:embed assets
var assets embed.FS

// ContentSecurityPolicy lets the page load only the controller's own
// script, style and API: no inline script, no other origin, no framing.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"

// Handler serves the console's files under PathPrefix, and PathPrefix
// itself as the page.
func Handler() http.Handler {
	files, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	server := http.StripPrefix(PathPrefix, http.FileServerFS(files))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		if strings.HasSuffix(r.URL.Path, "/") && r.URL.Path != PathPrefix {
			http.NotFound(w, r) // no directory listings
			return
		}
		server.ServeHTTP(w, r)
	})
}
