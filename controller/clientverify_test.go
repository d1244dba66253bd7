package controller

import (
	"crypto/tls"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// onKeptConnection makes a request that must go over a connection the
// client already holds, so that it meets the chain verified for that
// connection, not a fresh handshake.
func onKeptConnection(t *testing.T, client *http.Client, method, url string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	reused := false
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused },
	}))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	r := readResponse(t, req, resp)
	if !reused {
		t.Fatalf("%s %s went over a new connection; the test needs a kept one", method, url)
	}
	return r
}

// A client's chain is verified once per connection; what can change
// while a connection is kept is still checked on each request over it:
// the certificate's validity (an expired one, or a clock set back before
// it began), its revocation and a node's deletion.
func TestAKeptConnectionIsCheckedOnEveryRequest(t *testing.T) {
	tc := startController(t, t.TempDir())
	metrics := tc.url + v1.PathMetrics
	scraper := tc.certClient(tc.scraperCert("prometheus"))
	node := tc.certClient(tc.enrolledNode("w1"))
	for _, c := range []*http.Client{scraper, tc.admin} {
		if r := doJSON(t, c, "GET", metrics, nil); r.status != http.StatusOK {
			t.Fatalf("first request: %d %s", r.status, r.body)
		}
	}
	status := v1.Status{APIVersion: v1.APIVersion, Kind: "Status", NodeName: "w1", Phase: v1.PhaseReady}
	if r := doJSON(t, node, "POST", tc.url+v1.PathNodeStatus, status); r.status >= 300 {
		t.Fatalf("node's first request: %d %s", r.status, r.body)
	}
	if r := onKeptConnection(t, tc.admin, "GET", metrics); r.status != http.StatusOK {
		t.Fatalf("second request on the admin's connection: %d %s", r.status, r.body)
	}

	// Revoked while its connection is kept.
	scraperLeaf := scraper.Transport.(*http.Transport).TLSClientConfig.Certificates[0].Leaf
	if r := doJSON(t, tc.admin, "POST", tc.url+v1.PathCertificates+"/"+serialOf(scraperLeaf)+"/revoke", nil); r.status != http.StatusOK {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	onKeptConnection(t, scraper, "GET", metrics).wantStatus(t, http.StatusUnauthorized, v1.CodeCertRevoked)

	// Deleted while its connection is kept.
	if r := doJSON(t, tc.admin, "DELETE", tc.url+v1.PathNodes+"/w1", nil); r.status != http.StatusNoContent {
		t.Fatalf("delete node: %d %s", r.status, r.body)
	}
	onKeptConnection(t, node, "GET", tc.url+v1.PathNodeRole).wantStatus(t, http.StatusForbidden, v1.CodeNodeGone)

	// The clock set back before the certificate began, then past its end.
	adminLeaf := adminCert(t, tc).Leaf
	tc.clock.Advance(adminLeaf.NotBefore.Sub(tc.clock.Now()) - time.Minute)
	r := onKeptConnection(t, tc.admin, "GET", metrics)
	r.wantStatus(t, http.StatusUnauthorized, v1.CodeBadClientCert)
	if !strings.Contains(r.err.Message, "expired or is not yet valid") {
		t.Errorf("refusal before the certificate's start: %q", r.err.Message)
	}
	tc.clock.Advance(time.Minute)
	if r := onKeptConnection(t, tc.admin, "GET", metrics); r.status != http.StatusOK {
		t.Fatalf("at the certificate's start: %d %s", r.status, r.body)
	}
	tc.clock.Advance(adminLeaf.NotAfter.Sub(tc.clock.Now()) + time.Second)
	onKeptConnection(t, tc.admin, "GET", metrics).wantStatus(t, http.StatusUnauthorized, v1.CodeBadClientCert)
}

func adminCert(t *testing.T, tc *testController) *tls.Certificate {
	t.Helper()
	conf := tc.admin.Transport.(*http.Transport).TLSClientConfig
	if len(conf.Certificates) != 1 || conf.Certificates[0].Leaf == nil {
		t.Fatal("the admin client holds no parsed certificate")
	}
	return &conf.Certificates[0]
}
