package controller

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/ca"
	"github.com/harmonykaas/harmony/controller/clientconfig"
	"github.com/harmonykaas/harmony/controller/store"
)

func TestSecretsAreWrittenOwnerOnly(t *testing.T) {
	dir := t.TempDir()
	tc := startController(t, dir)
	cfg, err := clientconfig.Load(filepath.Join(dir, AdminConfigFile))
	if err != nil || cfg.Server != tc.url {
		t.Fatalf("admin.conf: %v, server %q, want %q", err, cfg.Server, tc.url)
	}
	for _, name := range []string{ca.KeyFile, AdminConfigFile, store.FileName} {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if perm := info.Mode().Perm(); perm != 0o600 {
			t.Errorf("%s has mode %04o, want 0600", name, perm)
		}
	}
}

func TestRestartKeepsCANodesRolesAndTokens(t *testing.T) {
	dir := t.TempDir()
	tc := startController(t, dir)
	pin := tc.c.CA().Pin()
	adminConf, _ := os.ReadFile(filepath.Join(dir, AdminConfigFile))
	tc.enrolledNode("w1")
	pending := tc.addNode("w2", v1.NodeSpec{})
	role := getRole(t, tc, "w1")
	role.Cluster.VIP = "198.18.0.10"
	role = setRole(t, tc, role)
	tc.shutdown()

	tc2 := startController(t, dir)
	if got := tc2.c.CA().Pin(); got != pin {
		t.Fatalf("CA changed across restart: %s -> %s", pin, got)
	}
	if again, _ := os.ReadFile(filepath.Join(dir, AdminConfigFile)); string(again) != string(adminConf) {
		t.Fatal("admin.conf was rewritten on restart")
	}
	var list v1.NodeList
	doJSON(t, tc2.admin, "GET", tc2.url+v1.PathNodes, nil).decode(t, &list)
	if len(list.Items) != 2 || list.Items[0].Name != "w1" || list.Items[0].EnrolledAt.IsZero() {
		t.Fatalf("nodes after restart: %+v", list.Items)
	}
	if got := getRole(t, tc2, "w1"); got.Cluster.VIP != "198.18.0.10" || got.Revision != role.Revision {
		t.Fatalf("role after restart: vip %q revision %d", got.Cluster.VIP, got.Revision)
	}
	// The unused token of w2 still works once; the state of tokens survived.
	csr, key := makeCSR(t, csrOptions{cn: "w2"})
	if r, _ := tc2.enroll(pending.Token, csr, key); r.status != http.StatusOK {
		t.Fatalf("pending token after restart: %d %s", r.status, r.body)
	}
	r, _ := tc2.enroll(pending.Token, csr, key)
	r.wantStatus(t, http.StatusUnauthorized, v1.CodeTokenUsed)
}

func TestSecondControllerOnSameDataDirFailsClearly(t *testing.T) {
	dir := t.TempDir()
	startController(t, dir)
	_, err := New(Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: quiet()})
	if err == nil || !strings.Contains(err.Error(), "locked by another process") {
		t.Fatalf("second controller: %v", err)
	}
}

func getRole(t *testing.T, tc *testController, name string) v1.Role {
	t.Helper()
	var role v1.Role
	r := doJSON(t, tc.admin, "GET", tc.url+v1.PathNodes+"/"+name+"/role", nil)
	if r.status != http.StatusOK {
		t.Fatalf("get role %s: %d %s", name, r.status, r.body)
	}
	r.decode(t, &role)
	return role
}

func setRole(t *testing.T, tc *testController, role v1.Role) v1.Role {
	t.Helper()
	r := doJSON(t, tc.admin, "PUT", tc.url+v1.PathNodes+"/"+role.NodeName+"/role", role)
	if r.status != http.StatusOK {
		t.Fatalf("set role %s: %d %s", role.NodeName, r.status, r.body)
	}
	var updated v1.Role
	r.decode(t, &updated)
	return updated
}

func TestRoleWatchWakesOnChange(t *testing.T) {
	tc := startController(t, t.TempDir())
	client := tc.certClient(tc.enrolledNode("w1"))
	current := getRole(t, tc, "w1")

	// Nothing new: the long poll ends with 304 after its wait.
	r := doJSON(t, client, "GET", tc.url+v1.PathNodeRole+"?after="+itoa(current.Revision)+"&wait=100ms", nil)
	if r.status != http.StatusNotModified {
		t.Fatalf("watch without change: %d %s", r.status, r.body)
	}

	got := make(chan response, 1)
	go func() {
		got <- doJSON(t, client, "GET", tc.url+v1.PathNodeRole+"?after="+itoa(current.Revision)+"&wait=60s", nil)
	}()
	waitFor(t, "watch registered", func() bool { return gaugeValue(tc.c.metrics.activeWatches) == 1 })
	current.Cluster.VIP = "198.18.0.10"
	start := time.Now()
	updated := setRole(t, tc, current)
	select {
	case r := <-got:
		var role v1.Role
		r.decode(t, &role)
		if r.status != http.StatusOK || role.Revision != updated.Revision || role.Cluster.VIP != "198.18.0.10" {
			t.Fatalf("watch answered %d revision %d vip %q", r.status, role.Revision, role.Cluster.VIP)
		}
		// Generous bound: this is a correctness test; speed is in make bench.
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("change took %s to reach the watch", d)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("role change never reached the watch")
	}
	waitFor(t, "watch released", func() bool { return gaugeValue(tc.c.metrics.activeWatches) == 0 })

	doJSON(t, client, "GET", tc.url+v1.PathNodeRole+"?wait=10m", nil).wantStatus(t, http.StatusBadRequest, v1.CodeBadRequest)
	doJSON(t, client, "GET", tc.url+v1.PathNodeRole+"?after=-1", nil).wantStatus(t, http.StatusBadRequest, v1.CodeBadRequest)
}

func TestRoleUpdatesAreValidated(t *testing.T) {
	tc := startController(t, t.TempDir())
	tc.addNode("w1", v1.NodeSpec{})
	role := getRole(t, tc, "w1")

	bad := role
	bad.Cluster.VIP = "not-an-ip"
	r := doJSON(t, tc.admin, "PUT", tc.url+v1.PathNodes+"/w1/role", bad)
	r.wantStatus(t, http.StatusBadRequest, v1.CodeBadRequest)
	if r.err.Field != "cluster.vip" {
		t.Fatalf("error field %q, want cluster.vip", r.err.Field)
	}
	promoted := role
	promoted.Role = v1.RoleMaster
	r = doJSON(t, tc.admin, "PUT", tc.url+v1.PathNodes+"/w1/role", promoted)
	r.wantStatus(t, http.StatusBadRequest, v1.CodeBadRequest)
	if r.err.Field != "role" {
		t.Fatalf("error field %q, want role", r.err.Field)
	}
	elsewhere := role
	elsewhere.NodeName = "w2"
	doJSON(t, tc.admin, "PUT", tc.url+v1.PathNodes+"/w1/role", elsewhere).wantStatus(t, http.StatusBadRequest, v1.CodeBadRequest)
	if got := getRole(t, tc, "w1"); got.Revision != role.Revision {
		t.Fatalf("a refused update changed the role: revision %d -> %d", role.Revision, got.Revision)
	}
}

func TestBatchRoleUpdateIsOneRevision(t *testing.T) {
	tc := startController(t, t.TempDir())
	tc.addNode("w1", v1.NodeSpec{})
	tc.addNode("w2", v1.NodeSpec{})
	a, b := getRole(t, tc, "w1"), getRole(t, tc, "w2")
	a.Cluster.VIP, b.Cluster.VIP = "198.18.0.10", "198.18.0.10"
	r := doJSON(t, tc.admin, "PUT", tc.url+v1.PathRoles, v1.RoleList{Items: []v1.Role{a, b}})
	if r.status != http.StatusOK {
		t.Fatalf("batch: %d %s", r.status, r.body)
	}
	ga, gb := getRole(t, tc, "w1"), getRole(t, tc, "w2")
	if ga.Revision != gb.Revision || ga.Cluster.VIP != "198.18.0.10" || gb.Cluster.VIP != "198.18.0.10" {
		t.Fatalf("batch result: %d/%q and %d/%q", ga.Revision, ga.Cluster.VIP, gb.Revision, gb.Cluster.VIP)
	}
	// One unknown node fails the whole batch.
	ghost := a
	ghost.NodeName = "ghost"
	a.Cluster.VIP = "198.18.0.20"
	doJSON(t, tc.admin, "PUT", tc.url+v1.PathRoles, v1.RoleList{Items: []v1.Role{a, ghost}}).wantStatus(t, http.StatusNotFound, v1.CodeNotFound)
	if got := getRole(t, tc, "w1"); got.Cluster.VIP != "198.18.0.10" {
		t.Fatalf("a failed batch changed w1: vip %q", got.Cluster.VIP)
	}
}

func TestStatusIsStoredUnderTheCertificatesNode(t *testing.T) {
	tc := startController(t, t.TempDir())
	client := tc.certClient(tc.enrolledNode("w1"))
	st := v1.Status{APIVersion: v1.APIVersion, Kind: "Status", Phase: v1.PhaseReady, ObservedRevision: 3,
		Components: []v1.ComponentStatus{{Name: "etcd", Healthy: true}}}
	if r := doJSON(t, client, "POST", tc.url+v1.PathNodeStatus, st); r.status != http.StatusNoContent {
		t.Fatalf("status: %d %s", r.status, r.body)
	}
	var n v1.Node
	doJSON(t, tc.admin, "GET", tc.url+v1.PathNodes+"/w1", nil).decode(t, &n)
	if n.Status == nil || n.Status.NodeName != "w1" || n.Status.Phase != v1.PhaseReady || n.Status.ReportedAt.IsZero() {
		t.Fatalf("stored status %+v", n.Status)
	}
	st.Phase = "Sleeping"
	r := doJSON(t, client, "POST", tc.url+v1.PathNodeStatus, st)
	r.wantStatus(t, http.StatusBadRequest, v1.CodeBadRequest)
	if r.err.Field != "phase" {
		t.Fatalf("error field %q, want phase", r.err.Field)
	}
}

func TestNewTokenRevokesUnusedOnes(t *testing.T) {
	tc := startController(t, t.TempDir())
	first := tc.addNode("w1", v1.NodeSpec{})
	r := doJSON(t, tc.admin, "POST", tc.url+v1.PathNodes+"/w1/token", v1.TokenRequest{TokenTTL: "5m", CAPinOnly: true})
	if r.status != http.StatusCreated {
		t.Fatalf("new token: %d %s", r.status, r.body)
	}
	var res v1.NodeWithBootstrap
	r.decode(t, &res)
	if res.Bootstrap.CABundle != "" || res.Bootstrap.CAPin == "" {
		t.Fatalf("pin-only document carries bundle %q pin %q", res.Bootstrap.CABundle, res.Bootstrap.CAPin)
	}
	csr, key := makeCSR(t, csrOptions{cn: "w1"})
	old, _ := tc.enroll(first.Token, csr, key)
	old.wantStatus(t, http.StatusUnauthorized, v1.CodeTokenUnknown)
	if r, _ := tc.enroll(res.Bootstrap.Token, csr, key); r.status != http.StatusOK {
		t.Fatalf("new token: %d %s", r.status, r.body)
	}
	doJSON(t, tc.admin, "POST", tc.url+v1.PathNodes+"/w1/token", v1.TokenRequest{TokenTTL: "30d"}).wantStatus(t, http.StatusBadRequest, v1.CodeBadRequest)
	doJSON(t, tc.admin, "POST", tc.url+v1.PathNodes+"/nobody/token", nil).wantStatus(t, http.StatusNotFound, v1.CodeNotFound)
}

func TestAddNodeValidatesAndRefusesDuplicates(t *testing.T) {
	tc := startController(t, t.TempDir())
	tc.addNode("w1", v1.NodeSpec{})
	doJSON(t, tc.admin, "POST", tc.url+v1.PathNodes, v1.NodeSpec{Name: "w1", Cluster: "demo", Role: v1.RoleWorker, IPs: []string{"198.18.0.1"}}).
		wantStatus(t, http.StatusConflict, v1.CodeConflict)
	for field, spec := range map[string]v1.NodeSpec{
		"name":     {Name: "W1", Cluster: "demo", Role: v1.RoleWorker, IPs: []string{"198.18.0.1"}},
		"role":     {Name: "w2", Cluster: "demo", Role: "boss", IPs: []string{"198.18.0.1"}},
		"ips":      {Name: "w2", Cluster: "demo", Role: v1.RoleWorker},
		"ips[0]":   {Name: "w2", Cluster: "demo", Role: v1.RoleWorker, IPs: []string{"0.0.0.0"}},
		"tokenTTL": {Name: "w2", Cluster: "demo", Role: v1.RoleWorker, IPs: []string{"198.18.0.1"}, TokenTTL: "forever"},
	} {
		r := doJSON(t, tc.admin, "POST", tc.url+v1.PathNodes, spec)
		r.wantStatus(t, http.StatusBadRequest, v1.CodeBadRequest)
		if r.err.Field != field {
			t.Errorf("error field %q, want %q (%s)", r.err.Field, field, r.err.Message)
		}
	}
}

func TestImportedIntermediateCAIssuesChainsToTheRoot(t *testing.T) {
	rootKey, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	rootTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "Customer Root"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	rootDER, _ := x509.CreateCertificate(rand.Reader, rootTmpl, rootTmpl, &rootKey.PublicKey, rootKey)
	root, _ := x509.ParseCertificate(rootDER)
	interKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	interTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "Customer Harmony Intermediate"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	interDER, _ := x509.CreateCertificate(rand.Reader, interTmpl, root, &interKey.PublicKey, rootKey)
	keyDER, _ := x509.MarshalPKCS8PrivateKey(interKey)

	src := t.TempDir()
	certPath, keyPath := filepath.Join(src, "inter.crt"), filepath.Join(src, "inter.key")
	os.WriteFile(certPath, append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: interDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: rootDER})...), 0o644)
	os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)

	dir := t.TempDir()
	tc := startController(t, dir, func(c *Config) { c.ImportCACert, c.ImportCAKey = certPath, keyPath })
	if tc.c.CA().Certificate().Subject.CommonName != "Customer Harmony Intermediate" {
		t.Fatalf("CA is %s", tc.c.CA().Certificate().Subject)
	}
	cert := tc.enrolledNode("w1")
	roots := x509.NewCertPool()
	roots.AddCert(root)
	inter := x509.NewCertPool()
	for _, raw := range cert.Certificate[1:] {
		c, _ := x509.ParseCertificate(raw)
		inter.AddCert(c)
	}
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("node certificate does not chain to the customer root: %v", err)
	}
	// The leaf's lifetime is capped by the intermediate's.
	if cert.Leaf.NotAfter.After(tc.c.CA().Certificate().NotAfter) {
		t.Fatal("leaf outlives its CA")
	}
	tc.shutdown()

	// Restarting with the same flags is fine; importing another CA over it is not.
	startController(t, dir, func(c *Config) { c.ImportCACert, c.ImportCAKey = certPath, keyPath }).shutdown()
	otherDir := t.TempDir()
	other := startController(t, otherDir)
	other.shutdown()
	_, err := New(Config{DataDir: dir, Listen: "127.0.0.1:0", ImportCACert: filepath.Join(otherDir, ca.CertFile), ImportCAKey: filepath.Join(otherDir, ca.KeyFile), Logger: quiet()})
	if err == nil || !strings.Contains(err.Error(), "already has a CA") {
		t.Fatalf("replacing the CA: %v", err)
	}
}

func TestImportRefusesUnfitCA(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	otherKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "not a CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "expired CA"},
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	goodTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "good CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	encode := func(tmpl *x509.Certificate) []byte {
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	}
	keyPEM := func(k *ecdsa.PrivateKey) []byte {
		der, _ := x509.MarshalPKCS8PrivateKey(k)
		return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	}
	for name, c := range map[string]struct {
		cert, key []byte
		want      string
	}{
		"leaf certificate": {encode(leafTmpl), keyPEM(key), "act as a CA"},
		"expired":          {encode(caTmpl), keyPEM(key), "valid only"},
		"key mismatch":     {encode(goodTmpl), keyPEM(otherKey), "does not match"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := ca.Import(dir, c.cert, c.key, time.Now())
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("import: %v, want an error containing %q", err, c.want)
			}
			if _, statErr := os.Stat(filepath.Join(dir, ca.KeyFile)); statErr == nil {
				t.Fatal("a refused import left a key behind")
			}
		})
	}
}

func TestPlainMetricsListenerMustBeLoopback(t *testing.T) {
	_, err := New(Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", MetricsListen: "0.0.0.0:0", Logger: quiet()})
	if err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("metrics on 0.0.0.0: %v", err)
	}
	tc := startController(t, t.TempDir(), func(c *Config) { c.MetricsListen = "127.0.0.1:0" })
	resp, err := http.Get("http://" + tc.c.MetricsAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("plain metrics: %d", resp.StatusCode)
	}
}

func TestServerCertificateCoversAdvertisedNames(t *testing.T) {
	tc := startController(t, t.TempDir(), func(c *Config) {
		c.AdvertiseURLs = []string{"https://controller.demo.example:9443"}
		c.ExtraSANs = []string{"198.18.0.5"}
	})
	cert, err := tc.c.getServerCert(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"controller.demo.example", "198.18.0.5", "127.0.0.1", "localhost"} {
		if err := cert.Leaf.VerifyHostname(name); err != nil {
			t.Errorf("serving certificate does not cover %s: %v", name, err)
		}
	}
	if ip := net.ParseIP("198.18.0.6"); cert.Leaf.VerifyHostname(ip.String()) == nil {
		t.Error("serving certificate covers an address it was never given")
	}
}
