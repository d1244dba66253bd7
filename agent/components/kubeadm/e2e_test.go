//go:build linux

package kubeadm

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/harmonykaas/harmony/agent/pki"
	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/agent/service"
	"github.com/harmonykaas/harmony/agent/service/servicetest"
	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/testutil"
)

// A first master in a network namespace, against a real etcd with TLS:
// kubeadm makes the certificates, kubeconfigs and manifests under the
// host's root, the real kube-apiserver runs from its manifest as a
// stand-in and answers /readyz, and the cluster phases reach it. A second
// pass changes nothing and keeps the process; a role that changes the
// manifest restarts it; a role kubeadm refuses leaves it running.
func TestFirstMasterInNetns(t *testing.T) {
	bin := k8sBin(t)
	if testing.Short() {
		t.Skip("runs etcd and kube-apiserver")
	}
	if _, err := os.Stat("/usr/bin/etcd"); err != nil {
		t.Fatalf("etcd is not installed (scripts/install-deps.sh installs it): %v", err)
	}
	ctx := context.Background()
	cl := newTestCluster(t)
	role := cl.role(t, "m1", 40)
	ns := newNetns(t, role.Addresses.IPs[0])

	root := t.TempDir()
	logs := &testutil.LogBuffer{}
	sup := servicetest.Supervisor(t, root, service.SupervisorConfig{
		Wrap:      func(argv []string) []string { return append([]string{"/usr/bin/ip", "netns", "exec", ns}, argv...) },
		StopGrace: 5 * time.Second,
	}, "etcd", APIServerUnit)
	startEtcd(t, sup, root, cl.etcdCA)

	host := &reconcile.Host{Root: root, Services: sup, Log: slog.New(slog.NewTextHandler(logs, nil))}
	dial := testutil.NetnsDialer(ns)
	c := New(Config{
		Binary: filepath.Join(bin, "kubeadm"), APIServerBinary: filepath.Join(bin, "kube-apiserver"),
		StandInForKubelet: true, DialContext: dial, Command: inNetns(ns),
	})

	// Passes until the apiserver answers and the cluster phases ran, as
	// the runner would make them every interval.
	actions := converge(t, c, host, role)
	t.Logf("converged with actions %q", actions)
	for _, want := range []string{
		"wrote " + InitConfigFile, "issued " + EtcdClientCertFile,
		"ran kubeadm init phase certs all", "ran kubeadm init phase kubeconfig all", "ran kubeadm init phase control-plane all",
		"started " + APIServerUnit,
		"created ClusterRoleBinding " + clusterAdmins, "created ClusterRoleBinding " + v1.GrantView.KubernetesGroup(),
		"created ClusterRoleBinding " + v1.GrantAdmin.KubernetesGroup(),
		"ran kubeadm init phase upload-config all", "ran kubeadm init phase bootstrap-token", "ran kubeadm init phase addon coredns",
	} {
		if !slices.Contains(actions, want) {
			t.Errorf("no %q among the actions %q", want, actions)
		}
	}
	if n := logs.Count("standing in for the kubelet"); n != 1 {
		t.Errorf("the stand-in was announced %d times, want once", n)
	}
	for _, f := range localOutputs(&plan{first: true}) {
		if _, err := os.Stat(host.Path(f)); err != nil {
			t.Errorf("kubeadm output: %v", err)
		}
	}

	// The apiserver answers, checked here without the component.
	api := testAPI(t, host, dial)
	if code, body := api.get(t, nil, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz: %d %s", code, body)
	}
	// The cluster phases reached it: kubeadm's ConfigMap, the role's
	// bootstrap token, and admin.conf's group bound to cluster-admin
	// (admin.conf's own certificate may list namespaces).
	superAdmin := kubeconfigCert(t, host, "super-admin.conf")
	for _, p := range []string{
		"/api/v1/namespaces/kube-system/configmaps/kubeadm-config",
		"/api/v1/namespaces/kube-system/secrets/bootstrap-token-abcdef",
		"/api/v1/namespaces/kube-public/configmaps/cluster-info",
		"/apis/apps/v1/namespaces/kube-system/deployments/coredns",
	} {
		if code, body := api.get(t, superAdmin, p); code != http.StatusOK {
			t.Errorf("GET %s: %d %s", p, code, tail(body, 300))
		}
	}
	// cluster-info, from which every joining node's kubelet.conf takes
	// its server, names the VIP's endpoint, not this master's address.
	var info struct {
		Data map[string]string `json:"data"`
	}
	getJSON(t, api, superAdmin, clusterInfoPath, &info)
	if got, want := clusterInfoServer(info.Data["kubeconfig"]), "https://"+net.JoinHostPort(role.Cluster.VIP, "8443"); got != want {
		t.Errorf("cluster-info's server %q, want %q:\n%s", got, want, info.Data["kubeconfig"])
	}
	if code, body := api.get(t, kubeconfigCert(t, host, "admin.conf"), "/api/v1/namespaces"); code != http.StatusOK {
		t.Errorf("admin.conf lists namespaces: %d %s", code, tail(body, 300))
	}
	// Not even a cluster admin gets the apiserver's profiles.
	if code, _ := api.get(t, superAdmin, "/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("GET /debug/pprof/ as the super-admin: %d, want 404", code)
	}

	startRoleAggregation(t, ns, bin, host)
	checkGrantRBAC(t, api, cl, superAdmin)

	first, err := sup.State(ctx, APIServerUnit)
	if err != nil || !first.Running {
		t.Fatalf("apiserver unit: %+v, %v", first, err)
	}
	checkMetrics(t, c)
	checkDrain(t, host, dial, cl, role, api, superAdmin)
	checkPruneNodes(t, c, host, role, api, superAdmin)
	checkServingRequests(t, c, host, cl, role, api, superAdmin)
	checkAuditLog(t, host, api, superAdmin)

	// The same role: nothing to do, the same process.
	st := c.Reconcile(ctx, host, role)
	if st.Phase != reconcile.PhaseConverged || !st.Healthy || len(st.Actions) != 0 {
		t.Fatalf("second pass: %+v", st)
	}
	if s, _ := sup.State(ctx, APIServerUnit); s.PID != first.PID || !s.Started.Equal(first.Started) {
		t.Errorf("second pass: apiserver %+v, was %+v", s, first)
	}
	// A new component (an agent restart) finds everything in place.
	c2 := New(Config{
		Binary: filepath.Join(bin, "kubeadm"), APIServerBinary: filepath.Join(bin, "kube-apiserver"),
		StandInForKubelet: true, DialContext: dial, Command: inNetns(ns),
	})
	if st := c2.Reconcile(ctx, host, role); st.Phase != reconcile.PhaseConverged || !st.Healthy || len(st.Actions) != 0 {
		t.Fatalf("pass after a restart: %+v", st)
	}

	// A DNS domain changes the apiserver's manifest (the service account
	// issuer) and the names its certificate must carry: the stale
	// certificate goes, kubeadm makes a new one, and the stand-in restarts.
	renamed := cl.role(t, "m1", 40)
	renamed.Cluster.DNSDomain = "lab.example"
	actions = converge(t, c, host, renamed)
	for _, want := range []string{"wrote " + InitConfigFile, "ran kubeadm init phase certs all", "started " + APIServerUnit, "ran kubeadm init phase upload-config all"} {
		if !slices.Contains(actions, want) {
			t.Errorf("DNS domain change: no %q among %q", want, actions)
		}
	}
	if !slices.ContainsFunc(actions, func(a string) bool {
		return strings.Contains(a, "apiserver.crt") && strings.Contains(a, "lacks kubernetes.default.svc.lab.example")
	}) {
		t.Errorf("DNS domain change: the stale apiserver certificate was not removed: %q", actions)
	}
	second, err := sup.State(ctx, APIServerUnit)
	if err != nil || second.PID == first.PID {
		t.Errorf("the changed manifest did not restart the apiserver: %+v (was %+v), %v", second, first, err)
	}
	if cert, err := readCert(host.Path("/etc/kubernetes/pki/apiserver.crt")); err != nil || cert.VerifyHostname("kubernetes.default.svc.lab.example") != nil {
		t.Errorf("new apiserver certificate: %v", err)
	}

	// A role kubeadm refuses: Failed, the configuration byte for byte as
	// it was, the apiserver untouched.
	before := readFile(t, host.Path(InitConfigFile))
	broken := cl.role(t, "m1", 40)
	broken.Cluster.DNSDomain = "lab.example"
	broken.Cluster.KubernetesVersion = "v1.20.0"
	st = c.Reconcile(ctx, host, broken)
	t.Logf("refused role: %s", st.Message)
	if st.Phase != reconcile.PhaseFailed || !st.Healthy || !strings.Contains(st.Message, "1.33.0") {
		t.Errorf("broken role: %+v", st)
	}
	if after := readFile(t, host.Path(InitConfigFile)); string(after) != string(before) {
		t.Error("a refused role changed init.yaml")
	}
	if s, err := sup.State(ctx, APIServerUnit); err != nil || s.PID != second.PID || !s.Running {
		t.Errorf("after the refused role: apiserver %+v (was %+v), %v", s, second, err)
	}
	if code, _ := api.get(t, nil, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after the refused role: %d", code)
	}

	// A year on, the apiserver's certificate has expired (re-signed here
	// with past dates): it is made afresh, and the apiserver restarts to
	// serve it, which a client trusting only the cluster CA accepts.
	crt := host.Path(path.Join(PKIDir, "apiserver.crt"))
	now := time.Now()
	expired := resign(t, parseCA(t, cl.clusterCA), readCertFile(t, crt), now.Add(-400*24*time.Hour), now.Add(-35*24*time.Hour))
	if err := os.WriteFile(crt, expired, 0o644); err != nil {
		t.Fatal(err)
	}
	actions = converge(t, c, host, renamed)
	if !slices.ContainsFunc(actions, func(a string) bool { return strings.Contains(a, "apiserver.crt and .key (expired ") }) {
		t.Errorf("expired certificate: not renewed: %q", actions)
	}
	renewed := readCertFile(t, crt)
	if served := servedCert(t, host, dial); served == nil || !served.Equal(renewed) || !renewed.NotAfter.After(now.Add(time.Hour)) {
		t.Errorf("after the renewal the apiserver serves %v, the file holds one valid until %s", served, renewed.NotAfter)
	}
	third, err := sup.State(ctx, APIServerUnit)
	if err != nil || third.PID == second.PID || !third.Running {
		t.Errorf("the renewal did not restart the apiserver: %+v (was %+v), %v", third, second, err)
	}

	// A worker role stops the stand-in.
	worker := cl.role(t, "w1", 40)
	st = c.Reconcile(ctx, host, worker)
	if st.Phase != reconcile.PhaseConverged || !slices.Contains(st.Actions, "stopped "+APIServerUnit) || !slices.Contains(st.Actions, "removed "+InitConfigFile) {
		t.Errorf("worker pass: %+v", st)
	}
	if _, err := sup.State(ctx, APIServerUnit); err == nil {
		t.Error("the apiserver unit is still known after the worker pass")
	}
}

// converge reconciles until the apiserver is ready and the cluster phases
// are done, at most a few minutes; every pass must converge. It returns
// every action taken.
func converge(t *testing.T, c *Component, host *reconcile.Host, role *v1.Role) []string {
	t.Helper()
	var actions []string
	var last reconcile.Status
	testutil.Eventually(t, 4*time.Minute, "the first master to converge", func() bool {
		last = c.Reconcile(context.Background(), host, role)
		actions = append(actions, last.Actions...)
		if last.Phase != reconcile.PhaseConverged {
			t.Fatalf("pass: %+v", last)
		}
		if last.Healthy && strings.Contains(last.Message, "cluster phases done") {
			return true
		}
		time.Sleep(time.Second)
		return false
	}, func() { t.Logf("last status: %+v", last) })
	return actions
}

// startEtcd runs a one-member etcd with client TLS from the role's etcd
// CA on 127.0.0.1:2379 inside the namespace.
func startEtcd(t *testing.T, sup *service.Supervisor, root string, caPair *v1.KeyPair) {
	t.Helper()
	ca, err := pki.LoadCA(caPair)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "test-etcd")
	cert, key, caFile := filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key"), filepath.Join(dir, "ca.crt")
	if _, err := ca.Ensure(cert, key, pki.Leaf{CommonName: "etcd", IPs: []net.IP{net.IPv4(127, 0, 0, 1)},
		Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ca.WriteCACert(caFile, nil); err != nil {
		t.Fatal(err)
	}
	_, err = sup.Ensure(context.Background(), service.Unit{Name: "etcd", Command: []string{
		"/usr/bin/etcd", "--name", "m1", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", "https://127.0.0.1:2379", "--advertise-client-urls", "https://127.0.0.1:2379",
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "m1=http://127.0.0.1:2380",
		"--cert-file", cert, "--key-file", key, "--client-cert-auth", "--trusted-ca-file", caFile,
	}})
	if err != nil {
		t.Fatal(err)
	}
}

// checkMetrics: leaf certificate expiries, readiness and the cluster
// phases' time, as a scrape sees them.
func checkMetrics(t *testing.T, c *Component) {
	t.Helper()
	got := gathered(t, c)
	now := float64(time.Now().Unix())
	for _, cert := range []string{"apiserver", "apiserver-kubelet-client", "front-proxy-client", "apiserver-etcd-client", "admin.conf", "super-admin.conf"} {
		if v := got["harmony_agent_kubernetes_certificate_expiry_timestamp_seconds/"+cert]; v < now {
			t.Errorf("expiry of %s: %v", cert, v)
		}
	}
	if got["harmony_agent_kubernetes_apiserver_ready"] != 1 {
		t.Errorf("apiserver_ready: %v", got)
	}
	if v := got["harmony_agent_kubeadm_cluster_phases_timestamp_seconds"]; v < now-600 || v > now+1 {
		t.Errorf("cluster phases time %v, now %v", v, now)
	}
}

// gathered is what a scrape of c gives, by name and label values
// ("name/value1/value2").
func gathered(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			name := f.GetName()
			for _, l := range m.GetLabel() {
				name += "/" + l.GetValue()
			}
			got[name] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	return got
}

// testAPI asks the apiserver in the namespace, verifying it with the
// cluster CA.
type apiClient struct {
	ca   *x509.CertPool
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// servedCert is the certificate the apiserver serves, to a client that
// trusts only the cluster CA; nil (and the test fails) when the handshake
// fails.
func servedCert(t *testing.T, host *reconcile.Host, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *x509.Certificate {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := dial(ctx, "tcp", "127.0.0.1:6443")
	if err != nil {
		t.Errorf("dial the apiserver: %v", err)
		return nil
	}
	defer conn.Close()
	tc := tls.Client(conn, &tls.Config{RootCAs: testAPI(t, host, dial).ca, ServerName: "kubernetes"})
	if err := tc.HandshakeContext(ctx); err != nil {
		t.Errorf("TLS handshake with the apiserver: %v", err)
		return nil
	}
	return tc.ConnectionState().PeerCertificates[0]
}

func testAPI(t *testing.T, host *reconcile.Host, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *apiClient {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(readFile(t, host.Path(CACertFile))) {
		t.Fatal("no CA")
	}
	return &apiClient{ca: pool, dial: dial}
}

func (a *apiClient) get(t *testing.T, cert *tls.Certificate, path string) (int, string) {
	t.Helper()
	return a.send(t, cert, http.MethodGet, path, "")
}

// send sends body (JSON, when not empty) with method to path.
func (a *apiClient) send(t *testing.T, cert *tls.Certificate, method, path, body string) (int, string) {
	t.Helper()
	conf := &tls.Config{RootCAs: a.ca, ServerName: "kubernetes"}
	if cert != nil {
		conf.Certificates = []tls.Certificate{*cert}
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: a.dial, TLSClientConfig: conf}}
	defer client.CloseIdleConnections()
	req, err := http.NewRequest(method, "https://127.0.0.1:6443"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case method == http.MethodPatch:
		req.Header.Set("Content-Type", "application/merge-patch+json")
	case body != "":
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func kubeconfigCert(t *testing.T, host *reconcile.Host, name string) *tls.Certificate {
	t.Helper()
	kc, err := readKubeconfig(host.Path(filepath.Join(KubernetesDir, name)))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := kc.keyPair()
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return &cert
}

func tail(s string, n int) string {
	if len(s) > n {
		return fmt.Sprintf("…%s", s[len(s)-n:])
	}
	return s
}

// checkGrantRBAC: a certificate such as the controller gives a user, from
// the cluster CA with the group of their grant, gets from the apiserver's
// own RBAC what the grant says: view reads and cannot write, edit writes
// in a namespace but cannot read nodes, admin can; no grant, nothing.
func checkGrantRBAC(t *testing.T, api *apiClient, cl *testCluster, superAdmin *tls.Certificate) {
	t.Helper()
	// view and edit are aggregated roles: wait for their rules.
	deadline := time.Now().Add(2 * time.Minute)
	for _, role := range []string{"view", "edit"} {
		for {
			_, body := api.get(t, superAdmin, "/apis/rbac.authorization.k8s.io/v1/clusterroles/"+role)
			if strings.Contains(body, `"verbs"`) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("ClusterRole %s has no rules: %s", role, tail(body, 300))
			}
			time.Sleep(time.Second)
		}
	}
	userCert := func(group string) *tls.Certificate {
		var org []string
		if group != "" {
			org = []string{group}
		}
		return clusterClientCert(t, cl, v1.KubernetesUser("alice"), org...)
	}
	configMap := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"grant-test"}}`
	for _, tc := range []struct {
		group                         string
		readPods, writeMaps, readNode bool
	}{
		{v1.GrantView.KubernetesGroup(), true, false, false},
		{v1.GrantEdit.KubernetesGroup(), true, true, false},
		{v1.GrantAdmin.KubernetesGroup(), true, true, true},
		{"harmony:grant:none", false, false, false},
	} {
		cert := userCert(tc.group)
		want := func(ok bool, okCode int) int {
			if ok {
				return okCode
			}
			return http.StatusForbidden
		}
		if code, body := api.get(t, cert, "/api/v1/namespaces/default/pods"); code != want(tc.readPods, http.StatusOK) {
			t.Errorf("%s lists pods: %d %s", tc.group, code, tail(body, 200))
		}
		code, body := api.send(t, cert, http.MethodPost, "/api/v1/namespaces/default/configmaps", configMap)
		if code != want(tc.writeMaps, http.StatusCreated) {
			t.Errorf("%s creates a ConfigMap: %d %s", tc.group, code, tail(body, 200))
		}
		if code == http.StatusCreated {
			if code, body := api.send(t, cert, http.MethodDelete, "/api/v1/namespaces/default/configmaps/grant-test", ""); code != http.StatusOK {
				t.Errorf("%s deletes its ConfigMap: %d %s", tc.group, code, tail(body, 200))
			}
		}
		if code, body := api.get(t, cert, "/api/v1/nodes"); code != want(tc.readNode, http.StatusOK) {
			t.Errorf("%s lists nodes: %d %s", tc.group, code, tail(body, 200))
		}
	}
}

// clusterClientCert is a client certificate from the cluster CA for user
// cn in groups org, as the apiserver authenticates them.
func clusterClientCert(t *testing.T, cl *testCluster, cn string, org ...string) *tls.Certificate {
	t.Helper()
	clusterCA, err := pki.LoadCA(cl.clusterCA)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "user.crt"), filepath.Join(dir, "user.key")
	if _, err := clusterCA.Ensure(cert, key, pki.Leaf{CommonName: cn, Organization: org,
		Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, Validity: v1.DefaultCredentialLifetime}); err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return &pair
}

// startRoleAggregation runs kube-controller-manager with only its
// clusterrole-aggregation controller, as a cluster's controller manager
// would: it fills the aggregated view and edit ClusterRoles.
func startRoleAggregation(t *testing.T, ns, bin string, host *reconcile.Host) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs := &testutil.LogBuffer{}
	cmd := inNetns(ns)(ctx, []string{filepath.Join(bin, "kube-controller-manager"),
		"--kubeconfig=" + host.Path(filepath.Join(KubernetesDir, "controller-manager.conf")),
		"--controllers=clusterrole-aggregation", "--leader-elect=false", "--secure-port=0",
		// Each controller as its own service account, as kubeadm runs it.
		"--use-service-account-credentials=true"})
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		cmd.Wait()
		if t.Failed() {
			t.Logf("kube-controller-manager log (tail):\n%s", tail(logs.String(), 3000))
		}
	})
}
