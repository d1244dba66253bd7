package controller

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/clientconfig"
	htest "github.com/harmonykaas/harmony/internal/testutil"
)

// testController is a real controller on a loopback port, with its admin
// client and a log that tests can search.
type testController struct {
	t       *testing.T
	c       *Controller
	dir     string
	url     string
	admin   *http.Client
	logs    *htest.LogBuffer
	stop    context.CancelFunc
	stopped chan struct{}
	clock   *htest.Clock
}

func startController(t *testing.T, dir string, mutate ...func(*Config)) *testController {
	t.Helper()
	logs := &htest.LogBuffer{}
	clock := &htest.Clock{}
	cfg := Config{
		DataDir: dir,
		Listen:  "127.0.0.1:0",
		Logger:  slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Now:     clock.Now,
	}
	for _, m := range mutate {
		m(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("start controller: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tc := &testController{t: t, c: c, dir: dir, url: c.URL(), logs: logs, stop: cancel, stopped: make(chan struct{}), clock: clock}
	go func() {
		defer close(tc.stopped)
		if err := c.Serve(ctx); err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	adminCfg, err := clientconfig.Load(filepath.Join(dir, AdminConfigFile))
	if err != nil {
		t.Fatalf("load admin.conf: %v", err)
	}
	tlsConf, err := adminCfg.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	tc.admin = &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConf}, Timeout: 30 * time.Second}
	t.Cleanup(tc.shutdown)
	return tc
}

func (tc *testController) shutdown() {
	select {
	case <-tc.stopped:
		return
	default:
	}
	tc.stop()
	<-tc.stopped
	tc.c.Close()
}

// response is a decoded answer.
type response struct {
	status int
	body   []byte
	err    v1.Error
}

func doJSON(t *testing.T, client *http.Client, method, url string, body any) response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return readResponse(t, req, resp)
}

// readResponse reads and closes an answer, decoding a refusal's body.
func readResponse(t *testing.T, req *http.Request, resp *http.Response) response {
	t.Helper()
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	r := response{status: resp.StatusCode, body: data}
	if resp.StatusCode >= 400 {
		var eb v1.ErrorBody
		if err := json.Unmarshal(data, &eb); err != nil {
			t.Fatalf("%s %s: error body is not JSON: %q", req.Method, req.URL, data)
		}
		r.err = eb.Error
	}
	return r
}

func (r response) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %q: %v", r.body, err)
	}
}

func (r response) wantStatus(t *testing.T, status int, code string) {
	t.Helper()
	if r.status != status || r.err.Code != code {
		t.Fatalf("got %d %q (%s), want %d %q", r.status, r.err.Code, r.err.Message, status, code)
	}
}

// addNode creates a node through the admin API and returns its bootstrap.
func (tc *testController) addNode(name string, spec v1.NodeSpec) v1.Bootstrap {
	tc.t.Helper()
	spec.Name = name
	if spec.Cluster == "" {
		spec.Cluster = "demo"
	}
	if spec.Role == "" {
		spec.Role = v1.RoleWorker
	}
	if spec.IPs == nil {
		spec.IPs = []string{"198.18.0.11"}
	}
	r := doJSON(tc.t, tc.admin, "POST", tc.url+v1.PathNodes, spec)
	if r.status != http.StatusCreated {
		tc.t.Fatalf("add node %s: %d %s", name, r.status, r.body)
	}
	var res v1.NodeWithBootstrap
	r.decode(tc.t, &res)
	return res.Bootstrap
}

// anonClient trusts the controller's CA and presents no certificate.
func (tc *testController) anonClient() *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(tc.c.CA().Certificate())
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 30 * time.Second}
}

// certClient presents cert.
func (tc *testController) certClient(cert tls.Certificate) *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(tc.c.CA().Certificate())
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}, Timeout: 30 * time.Second}
}

type csrOptions struct {
	cn       string
	dnsNames []string
	ips      []net.IP
	key      crypto.Signer
}

func makeCSR(t *testing.T, o csrOptions) (string, crypto.Signer) {
	t.Helper()
	key := o.key
	if key == nil {
		var err error
		if key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
			t.Fatal(err)
		}
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: o.cn}, DNSNames: o.dnsNames, IPAddresses: o.ips,
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	return v1.EncodeCSR(der), key
}

// enroll posts an enrollment and, on success, returns the usable client
// certificate.
func (tc *testController) enroll(token, csr string, key crypto.Signer) (response, tls.Certificate) {
	tc.t.Helper()
	r := doJSON(tc.t, tc.anonClient(), "POST", tc.url+v1.PathEnroll, v1.EnrollRequest{Token: token, CSR: csr})
	if r.status != http.StatusOK {
		return r, tls.Certificate{}
	}
	var resp v1.CertificateResponse
	r.decode(tc.t, &resp)
	certs, err := v1.ParseCertificatesPEM([]byte(resp.Certificate))
	if err != nil {
		tc.t.Fatalf("issued chain: %v", err)
	}
	cert := tls.Certificate{PrivateKey: key, Leaf: certs[0]}
	for _, c := range certs {
		cert.Certificate = append(cert.Certificate, c.Raw)
	}
	return r, cert
}

// enrolledNode adds a node and enrolls it, returning its certificate.
func (tc *testController) enrolledNode(name string) tls.Certificate {
	tc.t.Helper()
	b := tc.addNode(name, v1.NodeSpec{})
	csr, key := makeCSR(tc.t, csrOptions{cn: name, dnsNames: []string{name}, ips: []net.IP{net.ParseIP("198.18.0.11")}})
	r, cert := tc.enroll(b.Token, csr, key)
	if r.status != http.StatusOK {
		tc.t.Fatalf("enroll %s: %d %s", name, r.status, r.body)
	}
	return cert
}

func (tc *testController) logContains(t *testing.T, parts ...string) {
	t.Helper()
	for _, line := range strings.Split(tc.logs.String(), "\n") {
		all := true
		for _, p := range parts {
			if !strings.Contains(line, p) {
				all = false
				break
			}
		}
		if all {
			return
		}
	}
	t.Fatalf("no log line contains all of %q; log:\n%s", parts, tc.logs.String())
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func gaugeValue(g prometheus.Gauge) float64 { return testutil.ToFloat64(g) }

// waitFor waits for cond with a generous bound: it returns as soon as
// cond holds, and under make test's load (-race, every package at once on
// two cores) an upgrade's first steps took longer than 30 s once
// (TestUpgradeKeepsReadySurgeWorkersWhenAnotherFails, a fresh-clone CI).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	htest.Eventually(t, 2*time.Minute, what, cond)
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }
