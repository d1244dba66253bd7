//go:build linux

package haproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/agent/service"
	"github.com/harmonykaas/harmony/agent/service/servicetest"
	v1 "github.com/harmonykaas/harmony/api/v1"
	"golang.org/x/sys/unix"
)

// The real HAProxy, run by the real process supervisor, in front of a TLS
// "apiserver" on 127.0.0.1: it serves the VIP, passes TLS through, checks
// /readyz against the cluster CA, exports metrics, reloads on a new CA
// without dropping an established connection, and stops for a worker.
func TestEndToEndWithSupervisor(t *testing.T) {
	ctx := context.Background()
	ca := newCA(t, "cluster-ca")
	f := startLoopback(t, ca)
	sup, host, c, frontend, stats := f.sup, f.host, f.comp, f.frontend, f.stats

	role := func(ca *testCA) *v1.Role { return loopbackRole(t, ca, "200ms", "127.0.0.1") }

	st := c.Reconcile(ctx, host, role(ca))
	if want := []string{"wrote " + CAFile, "wrote " + ConfigFile, "started haproxy"}; st.Phase != reconcile.PhaseConverged || !slices.Equal(st.Actions, want) {
		t.Fatalf("first pass: %+v, want actions %q", st, want)
	}
	if !st.Healthy || !strings.Contains(st.Message, "1 of 1 apiservers UP") {
		t.Errorf("first pass health: %v %q", st.Healthy, st.Message)
	}
	first, err := sup.State(ctx, Name)
	if err != nil || !first.Running {
		t.Fatalf("state %+v, %v", first, err)
	}

	// UP from a passing check, not merely from HAProxy's initial
	// assumption: the L7 check over TLS, verified against the CA, passed.
	waitServer(t, c, func(s, check string) bool { return s == "UP" && check == "L7OK" })

	metrics := get(t, "http://"+stats.String()+"/metrics")
	for _, want := range []string{"haproxy_process_", `haproxy_server_status{proxy="apiservers",server="m1",state="UP"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if page := get(t, "http://"+stats.String()+"/stats"); !strings.Contains(page, "apiservers") {
		t.Error("/stats does not show the backend")
	}

	// Through the VIP, TLS passes through untouched: the client verifies
	// the apiserver's own certificate.
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	conn, err := tls.Dial("tcp", frontend.String(), &tls.Config{RootCAs: pool, ServerName: "kubernetes"})
	if err != nil {
		t.Fatalf("TLS through the VIP: %v", err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	if body := roundTrip(t, conn, br, "/version"); body != "apiserver says hello" {
		t.Errorf("through the VIP: %q", body)
	}

	// Same role: nothing happens, the process is the same.
	if st := c.Reconcile(ctx, host, role(ca)); st.Phase != reconcile.PhaseConverged || len(st.Actions) != 0 || !st.Healthy {
		t.Fatalf("second pass: %+v", st)
	}

	// A new cluster CA, which did not sign the apiserver's certificate:
	// HAProxy reloads (same master PID, no restart), its checks now refuse
	// the certificate, and the connection opened before the reload lives
	// on in the old worker.
	other := newCA(t, "rotated-ca")
	st = c.Reconcile(ctx, host, role(other))
	if want := []string{"wrote " + CAFile, "reloaded haproxy"}; st.Phase != reconcile.PhaseConverged || !slices.Equal(st.Actions, want) {
		t.Fatalf("CA pass: %+v, want actions %q", st, want)
	}
	after, err := sup.State(ctx, Name)
	if err != nil || !after.Running || after.PID != first.PID || after.Restarts != first.Restarts {
		t.Errorf("after reload: %+v (before %+v), %v", after, first, err)
	}
	waitServer(t, c, func(s, check string) bool { return strings.HasPrefix(s, "DOWN") && strings.HasPrefix(check, "L6") })
	if body := roundTrip(t, conn, br, "/version"); body != "apiserver says hello" {
		t.Errorf("established connection after the reload: %q", body)
	}
	if st := c.Reconcile(ctx, host, role(other)); len(st.Actions) != 0 || !strings.Contains(st.Message, "0 of 1 apiservers UP") {
		t.Errorf("pass with the backend down: %+v", st)
	}

	// A worker has no HAProxy.
	worker := role(other)
	worker.Role = v1.RoleWorker
	st = c.Reconcile(ctx, host, worker)
	if st.Phase != reconcile.PhaseDisabled || !slices.Equal(st.Actions, []string{"stopped haproxy"}) {
		t.Fatalf("worker pass: %+v", st)
	}
	if _, err := sup.State(ctx, Name); !errors.Is(err, service.ErrUnknownUnit) {
		t.Errorf("state after stop: %v", err)
	}
	if _, err := net.DialTimeout("tcp", stats.String(), time.Second); err == nil {
		t.Error("the stats port still answers after stop")
	}
}

// loopbackFixture is HAProxy, run by the real supervisor on 127.0.0.1,
// with a TLS "apiserver" behind it whose certificate ca signed.
type loopbackFixture struct {
	sup      *service.Supervisor
	host     *reconcile.Host
	comp     *Component
	frontend netip.AddrPort
	stats    netip.AddrPort
	apiPort  int
}

func startLoopback(t *testing.T, ca *testCA) *loopbackFixture {
	t.Helper()
	needHAProxy(t)
	if testing.Short() {
		t.Skip("runs HAProxy")
	}
	der, key := ca.servingCert(t, net.IPv4(127, 0, 0, 1))
	api := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			io.WriteString(w, "ok")
			return
		}
		io.WriteString(w, "apiserver says hello")
	}))
	api.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	// Checks refused after a CA rotation would log handshake errors.
	api.Config.ErrorLog = log.New(io.Discard, "", 0)
	api.StartTLS()
	t.Cleanup(api.Close)
	apiPort := api.Listener.Addr().(*net.TCPAddr).Port

	root := t.TempDir()
	sup := servicetest.Supervisor(t, root, service.SupervisorConfig{}, Name)
	loopback := netip.MustParseAddr("127.0.0.1")
	f := &loopbackFixture{sup: sup, host: &reconcile.Host{Root: root, Services: sup},
		frontend: netip.AddrPortFrom(loopback, freePort(t)), stats: netip.AddrPortFrom(loopback, freePort(t)), apiPort: apiPort}
	f.comp = New(Config{Binary: haproxyBinary, FrontendPort: int(f.frontend.Port()), APIServerPort: apiPort, StatsAddr: f.stats})
	return f
}

// loopbackRole is a master role for the loopback fixture: the VIP on
// 127.0.0.1, masters m1, m2, ... at addrs, checks every checkInterval.
func loopbackRole(t *testing.T, ca *testCA, checkInterval string, addrs ...string) *v1.Role {
	t.Helper()
	r := masterRole(t, len(addrs), ca)
	r.Cluster.VIP = "127.0.0.1"
	r.Cluster.LoadBalancer.CheckInterval = checkInterval
	for i, addr := range addrs {
		j := slices.IndexFunc(r.Peers, func(p v1.Peer) bool { return p.Name == fmt.Sprintf("m%d", i+1) })
		r.Peers[j].Address = addr
	}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	return r
}

// An apiserver that is stopped (its port refuses) or gone (its host
// powered off: no answer at all), and that the checks have not marked DOWN
// yet, costs a client at most the connect timeout, a quarter of a second:
// HAProxy moves the connection to another server instead of retrying the
// same one.
func TestFailedConnectionMovesToAnotherServer(t *testing.T) {
	for _, tc := range []struct {
		name string
		// m2 prepares 127.0.0.2 at the apiserver port.
		m2 func(t *testing.T, port int)
	}{
		{"refused", func(*testing.T, int) {}},
		{"no answer", silentListener},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ca := newCA(t, "cluster-ca")
			f := startLoopback(t, ca)
			tc.m2(t, f.apiPort)
			// m1 is the apiserver, m2 is not. Checks an hour apart keep
			// m2 UP through the test, as in the seconds before the checks
			// notice.
			r := loopbackRole(t, ca, "1h", "127.0.0.1", "127.0.0.2")
			if st := f.comp.Reconcile(context.Background(), f.host, r); st.Phase != reconcile.PhaseConverged {
				t.Fatalf("reconcile: %+v", st)
			}
			pool := x509.NewCertPool()
			pool.AddCert(ca.cert)
			var slowest time.Duration
			// Round robin: every other connection goes to m2 first.
			for range 4 {
				start := time.Now()
				conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Minute}, "tcp", f.frontend.String(),
					&tls.Config{RootCAs: pool, ServerName: "kubernetes"})
				if err != nil {
					t.Fatalf("TLS through the VIP with m2 %s: %v", tc.name, err)
				}
				conn.Close()
				slowest = max(slowest, time.Since(start))
			}
			t.Logf("slowest of 4 connections with m2 %s: %s (connect timeout %s)", tc.name, slowest.Round(time.Millisecond), connectTimeout)
			// Generous: a loopback handshake takes milliseconds, one that
			// moves on after the connect timeout about 250 ms.
			if limit := 2 * time.Second; slowest >= limit {
				t.Errorf("a connection took %s (limit %s): HAProxy kept trying m2", slowest.Round(time.Millisecond), limit)
			}
		})
	}
}

// silentListener listens on 127.0.0.2:port with a backlog it fills
// itself and never accepts, so that the kernel drops every further SYN: a
// server that does not answer, as a powered-off host.
func silentListener(t *testing.T, port int) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 2}}); err != nil {
		t.Fatalf("bind 127.0.0.2:%d: %v", port, err)
	}
	if err := unix.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.2:%d", port)
	for i := 0; ; i++ {
		conn, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
		if err != nil {
			return // full: this SYN went unanswered
		}
		t.Cleanup(func() { conn.Close() })
		if i == 8 {
			t.Fatalf("%s still accepts connections after %d", addr, i+1)
		}
	}
}

// waitServer waits until the stats show apiservers/m1 in the wanted state.
func waitServer(t *testing.T, c *Component, ok func(status, check string) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		rows, err := c.statsCSV(context.Background())
		if err == nil {
			for _, r := range rows {
				if r["pxname"] == "apiservers" && r["svname"] == "m1" {
					if ok(r["status"], r["check_status"]) {
						return
					}
					last = fmt.Sprintf("status %q check %q (%s)", r["status"], r["check_status"], r["last_chk"])
				}
			}
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("apiservers/m1 never reached the wanted state; last: %s", last)
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v", url, resp.Status, err)
	}
	return string(b)
}

// roundTrip sends one HTTP/1.1 request on an open connection, keeping it
// open.
func roundTrip(t *testing.T, conn net.Conn, br *bufio.Reader, path string) string {
	t.Helper()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: kubernetes\r\n\r\n", path); err != nil {
		t.Fatalf("write: %v", err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", path, resp.Status)
	}
	return string(b)
}
