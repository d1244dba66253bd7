package controller

import (
	"archive/tar"
	"bytes"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/ca"
	"github.com/harmonykaas/harmony/controller/store"
)

// issueCert has the controller issue a certificate through the API (admin
// renewal or scraper) and returns it as a client certificate.
func (tc *testController) issueCert(t *testing.T, client *http.Client, path string, body func(csr string) any) tls.Certificate {
	t.Helper()
	csr, key := makeCSR(t, csrOptions{cn: "x"})
	r := doJSON(t, client, "POST", tc.url+path, body(csr))
	if r.status != http.StatusOK {
		t.Fatalf("POST %s: %d %s", path, r.status, r.body)
	}
	var resp v1.CertificateResponse
	r.decode(t, &resp)
	certs, err := v1.ParseCertificatesPEM([]byte(resp.Certificate))
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{certs[0].Raw}, PrivateKey: key, Leaf: certs[0]}
}

func serialOfCert(c tls.Certificate) string { return c.Leaf.SerialNumber.Text(16) }

// A deleted admin.conf used to work for 365 days. Every admin and scraper
// certificate is now recorded and checked on every request; revoking one
// shuts it out at once, and the last valid admin certificate cannot be
// revoked (nobody could undo that from the API).
func TestAdminAndScraperCertificatesAreRevocable(t *testing.T) {
	tc := startController(t, t.TempDir())

	// The first admin certificate lives 30 days.
	var list v1.CertificateList
	doJSON(t, tc.admin, "GET", tc.url+v1.PathCertificates, nil).decode(t, &list)
	if len(list.Items) != 1 || list.Items[0].Kind != v1.OrgAdmins || !list.Items[0].Current {
		t.Fatalf("certificates at start: %+v", list.Items)
	}
	first := list.Items[0]
	if life := first.NotAfter.Sub(first.IssuedAt); life > 30*24*time.Hour || life < 29*24*time.Hour {
		t.Fatalf("admin certificate lives %s, want 30 days", life)
	}
	doJSON(t, tc.admin, "POST", tc.url+v1.PathCertificates+"/"+first.Serial+"/revoke", nil).
		wantStatus(t, http.StatusConflict, v1.CodeLastAdmin)

	renewed := tc.issueCert(t, tc.admin, v1.PathAdminCert, func(csr string) any { return v1.AdminCertRequest{CSR: csr} })
	if renewed.Leaf.Subject.CommonName != "admin" || renewed.Leaf.Subject.Organization[0] != v1.OrgAdmins {
		t.Fatalf("renewed certificate subject %v", renewed.Leaf.Subject)
	}
	admin2 := tc.certClient(renewed)
	scraperCert := tc.issueCert(t, tc.admin, v1.PathScraperCert, func(csr string) any {
		return v1.ScraperCertRequest{Name: "prometheus", CSR: csr}
	})
	scraper := tc.certClient(scraperCert)
	if r := doJSON(t, scraper, "GET", tc.url+v1.PathMetrics, nil); r.status != http.StatusOK {
		t.Fatalf("scraper before revocation: %d", r.status)
	}

	// The new admin revokes the old one and the scraper.
	doJSON(t, admin2, "POST", tc.url+v1.PathCertificates+"/"+first.Serial+"/revoke", nil).wantStatus(t, http.StatusOK, "")
	doJSON(t, tc.admin, "GET", tc.url+v1.PathNodes, nil).wantStatus(t, http.StatusUnauthorized, v1.CodeCertRevoked)
	doJSON(t, admin2, "POST", tc.url+v1.PathCertificates+"/"+serialOfCert(scraperCert)+"/revoke", nil).wantStatus(t, http.StatusOK, "")
	doJSON(t, scraper, "GET", tc.url+v1.PathMetrics, nil).wantStatus(t, http.StatusUnauthorized, v1.CodeCertRevoked)
	tc.logContains(t, "request refused", "reason="+v1.CodeCertRevoked)

	doJSON(t, admin2, "GET", tc.url+v1.PathCertificates, nil).decode(t, &list)
	revoked := 0
	for _, c := range list.Items {
		if !c.RevokedAt.IsZero() {
			revoked++
			if c.RevokedBy != "admin" {
				t.Errorf("certificate %s revoked by %q", c.Serial, c.RevokedBy)
			}
		}
	}
	if len(list.Items) != 3 || revoked != 2 {
		t.Fatalf("certificates after two revocations: %+v", list.Items)
	}

	// A certificate from the controller's own CA that the controller never
	// recorded (made with its key outside the API) is refused too.
	csr, key := makeCSR(t, csrOptions{cn: "admin"})
	parsed, _ := v1.ParseCSR(csr)
	forged, err := tc.c.CA().Issue(ca.Leaf{CommonName: "admin", Organization: v1.OrgAdmins, PublicKey: parsed.PublicKey, Lifetime: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	unrecorded := tc.certClient(tls.Certificate{Certificate: [][]byte{forged.Raw}, PrivateKey: key})
	doJSON(t, unrecorded, "GET", tc.url+v1.PathNodes, nil).wantStatus(t, http.StatusUnauthorized, v1.CodeCertRevoked)

	// Revocations survive a restart: they are in the store.
	tc.shutdown()
	tc2 := startController(t, tc.dir)
	doJSON(t, tc2.certClient(scraperCert), "GET", tc2.url+v1.PathMetrics, nil).wantStatus(t, http.StatusUnauthorized, v1.CodeCertRevoked)
	if r := doJSON(t, tc2.certClient(renewed), "GET", tc2.url+v1.PathNodes, nil); r.status != http.StatusOK {
		t.Fatalf("the renewed admin after a restart: %d %s", r.status, r.body)
	}
	doJSON(t, tc2.certClient(renewed), "POST", tc2.url+v1.PathCertificates+"/zz/revoke", nil).wantStatus(t, http.StatusBadRequest, v1.CodeBadRequest)
}

// mountTmpfs mounts a small tmpfs of its own at a new directory, for a
// disk that fills up.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "harmony-test", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

// fill takes every free byte of the file system at dir.
func fill(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			break
		}
	}
	for n := 4096; n > 0; n /= 2 { // the last bytes
		for {
			if _, err := f.Write(chunk[:n]); err != nil {
				break
			}
		}
	}
}

// A full disk made 37 writes fail without an ERROR line, and an upload
// that filled it answered 400. Now every 5xx is logged with its route and
// cause, and a full disk answers 507.
func TestFullDiskAnswers507AndLogs(t *testing.T) {
	dir := mountTmpfs(t, "16m")
	tc := startController(t, dir)
	tc.addNode("before", v1.NodeSpec{})
	fill(t, dir)

	var r response
	for i := range 50 { // until bbolt's pre-grown file is used up
		r = doJSON(t, tc.admin, "POST", tc.url+v1.PathNodes, v1.NodeSpec{Name: fmt.Sprintf("n%03d", i), Cluster: "demo",
			Role: v1.RoleWorker, IPs: []string{"198.18.0.11"}, DNSNames: []string{strings.Repeat("d", 60) + ".example"}})
		if r.status != http.StatusCreated {
			break
		}
	}
	r.wantStatus(t, http.StatusInsufficientStorage, v1.CodeInsufficientStorage)
	tc.logContains(t, "level=ERROR", "request failed", "route=\"POST "+v1.PathNodes+"\"", "status=507", "no space left on device")

	up := doJSON(t, tc.admin, "POST", tc.url+v1.PathImages+"?provider=none", make([]byte, 1<<20))
	if up.status != http.StatusNotFound { // no such provider: refused before anything is written
		t.Fatalf("upload to a missing provider: %d %s", up.status, up.body)
	}
}

// An upload that fills the disk is the controller's problem, not a bad
// request: 507, logged, and its spool file removed.
func TestUploadOnFullDiskAnswers507(t *testing.T) {
	dir := mountTmpfs(t, "16m")
	tc := startController(t, dir)
	if err := tc.c.store.Update(func(tx *store.Tx) error {
		return tx.Put(store.Providers, "lab", v1.Provider{Name: "lab"})
	}); err != nil {
		t.Fatal(err)
	}
	r := doJSON(t, tc.admin, "POST", tc.url+v1.PathImages+"?provider=lab", make([]byte, 32<<20))
	r.wantStatus(t, http.StatusInsufficientStorage, v1.CodeInsufficientStorage)
	tc.logContains(t, "level=ERROR", "request failed", "status=507", "spool the upload")
	if spool, _ := filepath.Glob(filepath.Join(dir, "images", "upload-*")); len(spool) != 0 {
		t.Fatalf("spool files left: %v", spool)
	}
}

// A crash during an upload leaves its spool file; the next start removes
// it, and OVAs no unfinished import needs, but keeps one that a resumed
// import will read.
func TestStaleUploadsAreRemovedAtStart(t *testing.T) {
	dir := t.TempDir()
	// The import is recorded by a controller that does not serve: one
	// that served might take it up at once (Serve resumes what is
	// pending when it starts, which may be after this write), fail it for
	// want of a provider, and so leave nothing for the start below to keep.
	first, err := New(Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.store.Update(func(tx *store.Tx) error {
		return tx.Put(store.Images, "lab/pending", importRecord{Image: v1.Image{Name: "pending", Provider: "lab", State: v1.ImageImporting},
			OVA: filepath.Join(dir, "images", "needed.ova")})
	}); err != nil {
		t.Fatal(err)
	}
	first.Close()
	images := filepath.Join(dir, "images")
	os.MkdirAll(images, 0o700)
	for _, name := range []string{"upload-123.ova", "upload-456.ova", "0123abcd.ova", "needed.ova"} {
		if err := os.WriteFile(filepath.Join(images, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The pending import cannot resume without its provider: it ends, but
	// only after the start has looked at the files.
	c, err := New(Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	left, _ := filepath.Glob(filepath.Join(images, "*"))
	if len(left) != 1 || filepath.Base(left[0]) != "needed.ova" {
		t.Fatalf("after the start %v is left, want only needed.ova", left)
	}
}

// Shutdown answered open role watches with an empty 200, which agents
// logged as bad_response. It answers 503 now, with Retry-After.
func TestShutdownAnswersOpenWatchesWith503(t *testing.T) {
	tc := startController(t, t.TempDir())
	node := tc.certClient(tc.enrolledNode("w1"))
	role := getRole(t, tc, "w1")
	got := make(chan response, 1)
	go func() {
		got <- doJSON(t, node, "GET", tc.url+v1.PathNodeRole+"?wait=30s&after="+itoa(role.Revision), nil)
	}()
	waitFor(t, "the watch held", func() bool { return gaugeValue(tc.c.metrics.activeWatches) == 1 })
	tc.stop()
	select {
	case r := <-got:
		r.wantStatus(t, http.StatusServiceUnavailable, v1.CodeUnavailable)
	case <-time.After(20 * time.Second):
		t.Fatal("the watch got no answer at shutdown")
	}
	<-tc.stopped
	if strings.Contains(tc.logs.String(), "level=ERROR") {
		t.Fatalf("a shutdown is no error:\n%s", tc.logs.String())
	}
}

// A key of the hub that nobody watches any more is gone: role watches
// that timed out, operation watches of a finished operation.
func TestHubForgetsEndedWatches(t *testing.T) {
	tc := startController(t, t.TempDir())
	node := tc.certClient(tc.enrolledNode("w1"))
	role := getRole(t, tc, "w1")
	op := v1.Operation{ID: "feedfeedfeedfeed", Kind: "import", State: v1.OperationRunning, CreatedAt: time.Now()}
	if err := tc.c.store.Update(func(tx *store.Tx) error { return tx.Put(store.Operations, op.ID, op) }); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	for range 3 {
		go func() {
			doJSON(t, node, "GET", tc.url+v1.PathNodeRole+"?wait=1s&after="+itoa(role.Revision), nil)
			done <- struct{}{}
		}()
		go func() {
			doJSON(t, tc.admin, "GET", tc.url+v1.PathOperations+"/"+op.ID+"?watch=true&timeout=1s", nil)
			done <- struct{}{}
		}()
	}
	waitFor(t, "watches held", func() bool { return tc.c.hub.size() == 2 })
	for range 6 {
		<-done
	}
	if n := tc.c.hub.size(); n != 0 {
		t.Fatalf("%d hub keys left after every watch ended", n)
	}
}

// A crafted OVA of GNU long names (1 MiB each) made the controller answer
// with an error bigger than the upload, and use 25 times its size. The
// answer is now a page long.
func TestCraftedOVAGetsAShortAnswer(t *testing.T) {
	tc := startController(t, t.TempDir())
	if err := tc.c.store.Update(func(tx *store.Tx) error {
		return tx.Put(store.Providers, "lab", v1.Provider{Name: "lab"})
	}); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for i := range 8 {
		name := strings.Repeat(string(rune('a'+i)), 1<<20)
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: 1, Format: tar.FormatGNU}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte("x"))
	}
	tw.Close()
	r := doJSON(t, tc.admin, "POST", tc.url+v1.PathImages+"?provider=lab", buf.Bytes())
	if r.status != http.StatusBadRequest || r.err.Field != "ova" {
		t.Fatalf("crafted OVA: %d %+v", r.status, r.err)
	}
	if len(r.body) > 20<<10 {
		t.Fatalf("the answer to an %d-byte upload is %d bytes", buf.Len(), len(r.body))
	}
}
