package console

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// The script repeats the API's names (it cannot import Go): a name
// changed on one side only would break the console.
func TestScriptUsesTheAPIsNames(t *testing.T) {
	data, err := os.ReadFile("assets/app.js")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{v1.CookieCSRF, v1.HeaderCSRF, v1.PathLogin, v1.PathRefresh, v1.PathLogout, v1.PathWhoAmI,
		v1.PathClusters, v1.PathProviders, v1.PathImages, v1.APIVersion, v1.ImageReady, string(v1.GrantAdmin), string(v1.UserRoleAdmin),
		v1.PathLDAP, v1.PathUsers, v1.PathAudit, v1.PathOperations, v1.UpgradeRunning, v1.UpgradeSucceeded} {
		if !strings.Contains(string(data), `"`+want+`"`) {
			t.Errorf("app.js lacks %q", want)
		}
	}
	// Values from the API go in as text only.
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("} {
		if strings.Contains(string(data), bad) {
			t.Errorf("app.js uses %s", bad)
		}
	}
}

func TestServesThePageWithItsPolicy(t *testing.T) {
	h := Handler()
	for _, c := range []struct {
		path, want string
		status     int
	}{
		{PathPrefix, `<script type="module" src="app.js">`, http.StatusOK},
		{PathPrefix + "app.js", "csrfToken", http.StatusOK},
		{PathPrefix + "style.css", "--accent", http.StatusOK},
		{PathPrefix + "missing.js", "", http.StatusNotFound},
		{PathPrefix + "../console.go", "", http.StatusNotFound},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", c.path, nil))
		if rec.Code != c.status || !strings.Contains(rec.Body.String(), c.want) {
			t.Errorf("GET %s: %d, want %d with %q", c.path, rec.Code, c.status, c.want)
		}
		if got := rec.Header().Get("Content-Security-Policy"); got != ContentSecurityPolicy {
			t.Errorf("GET %s: CSP %q", c.path, got)
		}
		if rec.Header().Get("X-Frame-Options") != "DENY" || rec.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: headers %v", c.path, rec.Header())
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", PathPrefix, nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", rec.Code)
	}
	// The page has no inline script or style for the policy to block.
	page, _ := os.ReadFile("assets/index.html")
	if strings.Contains(string(page), "<script>") || strings.Contains(string(page), "style=") || strings.Contains(string(page), "<style") {
		t.Error("index.html has inline script or style, which the policy refuses")
	}
}
