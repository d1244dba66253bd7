package client_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller"
	"github.com/harmonykaas/harmony/controller/client"
	"github.com/harmonykaas/harmony/controller/clientconfig"
	"github.com/harmonykaas/harmony/controller/controllertest"
	"github.com/harmonykaas/harmony/internal/vcsim"
)

// startController runs a real controller in a temporary directory and
// returns an admin client for it, loaded from the admin.conf it wrote.
func startController(t *testing.T, mutate ...func(*controller.Config)) *client.Client {
	t.Helper()
	return controllertest.Start(t, mutate...).Admin
}

// wantAPIError fails unless err is an APIError with this status and code
// whose message names want.
func wantAPIError(t *testing.T, what string, err error, status int, code, want string) {
	t.Helper()
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("%s: %v (%T), want an APIError %d %s", what, err, err, status, code)
	}
	if apiErr.Status != status || apiErr.Body.Code != code || !strings.Contains(apiErr.Body.Message, want) {
		t.Fatalf("%s: %d %s %q, want %d %s naming %q", what, apiErr.Status, apiErr.Body.Code, apiErr.Body.Message, status, code, want)
	}
}

func TestNodes(t *testing.T) {
	ctx := context.Background()
	c := startController(t)
	if err := c.Health(ctx); err != nil {
		t.Fatalf("health: %v", err)
	}

	added, err := c.AddNode(ctx, v1.NodeSpec{Name: "n1", Cluster: "c1", Role: v1.RoleWorker, IPs: []string{"198.18.0.11"}})
	if err != nil {
		t.Fatalf("add node: %v", err)
	}
	if added.Node.Name != "n1" || added.Node.Cluster != "c1" || added.Bootstrap.NodeName != "n1" || added.Bootstrap.Token == "" {
		t.Fatalf("added: %+v", added)
	}
	if _, err := c.AddNode(ctx, v1.NodeSpec{Name: "n1", Cluster: "c1", Role: v1.RoleWorker, IPs: []string{"198.18.0.11"}}); err == nil {
		t.Fatal("adding n1 twice succeeded")
	}

	nodes, err := c.Nodes(ctx)
	if err != nil {
		t.Fatalf("nodes: %v", err)
	}
	if len(nodes) != 1 || nodes[0].Name != "n1" {
		t.Fatalf("nodes: %+v", nodes)
	}
	n, err := c.Node(ctx, "n1")
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	if n.Name != "n1" || n.Role != v1.RoleWorker || strings.Join(n.IPs, ",") != "198.18.0.11" {
		t.Fatalf("node: %+v", n)
	}

	role, err := c.Role(ctx, "n1")
	if err != nil {
		t.Fatalf("role: %v", err)
	}
	if role.NodeName != "n1" || role.Role != v1.RoleWorker {
		t.Fatalf("role: %+v", role)
	}
	role.Cluster.VIP = "198.18.0.99"
	updated, err := c.SetRole(ctx, "n1", role)
	if err != nil {
		t.Fatalf("set role: %v", err)
	}
	if updated.NodeName != "n1" || updated.Revision <= role.Revision || updated.Cluster.VIP != "198.18.0.99" {
		t.Fatalf("set role: revision %d after %d, VIP %q", updated.Revision, role.Revision, updated.Cluster.VIP)
	}
	// The node comes from the name, not the document: the controller
	// refuses a document written for another node.
	var apiErr *client.APIError
	if _, err := c.SetRole(ctx, "n2", updated); !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest || apiErr.Body.Field != "nodeName" {
		t.Fatalf("set role of n2 with n1's document: %v", err)
	}
	updated.Cluster.VIP = "198.18.0.98"
	revision, err := c.SetRoles(ctx, []v1.Role{*updated})
	if err != nil {
		t.Fatalf("set roles: %v", err)
	}
	if revision <= updated.Revision {
		t.Fatalf("set roles: revision %d after %d", revision, updated.Revision)
	}
	if role, err = c.Role(ctx, "n1"); err != nil || role.Revision != revision || role.Cluster.VIP != "198.18.0.98" {
		t.Fatalf("role after set roles: %+v, %v", role, err)
	}

	token, err := c.NewToken(ctx, "n1", v1.TokenRequest{TokenTTL: "10m"})
	if err != nil {
		t.Fatalf("new token: %v", err)
	}
	if token.Bootstrap.NodeName != "n1" || token.Bootstrap.Token == "" || token.Bootstrap.Token == added.Bootstrap.Token {
		t.Fatalf("new token: %+v", token.Bootstrap)
	}

	if err := c.DeleteNode(ctx, "n1"); err != nil {
		t.Fatalf("delete node: %v", err)
	}
	_, err = c.Node(ctx, "n1")
	wantAPIError(t, "node after delete", err, http.StatusNotFound, v1.CodeNotFound, "n1")
	if nodes, err := c.Nodes(ctx); err != nil || len(nodes) != 0 {
		t.Fatalf("nodes after delete: %+v, %v", nodes, err)
	}
}

func TestEmptyListsAndMissing(t *testing.T) {
	ctx := context.Background()
	c := startController(t)

	providers, err := c.Providers(ctx)
	if err != nil || len(providers) != 0 {
		t.Fatalf("providers: %+v, %v", providers, err)
	}
	clusters, err := c.Clusters(ctx)
	if err != nil || len(clusters) != 0 {
		t.Fatalf("clusters: %+v, %v", clusters, err)
	}
	images, err := c.Images(ctx, "")
	if err != nil || len(images) != 0 {
		t.Fatalf("images: %+v, %v", images, err)
	}

	_, err = c.Cluster(ctx, "nope")
	wantAPIError(t, "cluster nope", err, http.StatusNotFound, v1.CodeNotFound, "nope")
	_, err = c.Operation(ctx, "nope")
	wantAPIError(t, "operation nope", err, http.StatusNotFound, v1.CodeNotFound, "nope")
	_, err = c.WatchOperation(ctx, "nope", 0, time.Second)
	wantAPIError(t, "watch operation nope", err, http.StatusNotFound, v1.CodeNotFound, "nope")
	_, err = c.Provider(ctx, "nope")
	wantAPIError(t, "provider nope", err, http.StatusNotFound, v1.CodeNotFound, "nope")
	// The flags make a query the controller accepts (a bad one would be a
	// 400), and the answer names the cluster.
	for _, purge := range []bool{false, true} {
		_, err = c.DeleteCluster(ctx, "nope", purge)
		wantAPIError(t, "delete cluster nope", err, http.StatusNotFound, v1.CodeNotFound, "nope")
	}
	for _, keepVM := range []bool{false, true} {
		_, err = c.RemoveClusterNode(ctx, "nope", "nope-w1", keepVM)
		wantAPIError(t, "remove node of cluster nope", err, http.StatusNotFound, v1.CodeNotFound, "nope")
	}
}

// TestRequestURLs checks the method, path and query each typed method
// sends, against a server that records them.
func TestRequestURLs(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var got []string
	c := recordingClient(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.RequestURI())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, `{"id":"op1","kind":"delete","state":"Running"}`)
	})
	calls := []struct {
		call func() (*v1.Operation, error)
		want string
	}{
		{func() (*v1.Operation, error) { return c.DeleteCluster(ctx, "a b", false) }, "DELETE /api/v1/clusters/a%20b"},
		{func() (*v1.Operation, error) { return c.DeleteCluster(ctx, "prod", true) }, "DELETE /api/v1/clusters/prod?purge=true"},
		{func() (*v1.Operation, error) { return c.RemoveClusterNode(ctx, "prod", "prod-w1", false) },
			"DELETE /api/v1/clusters/prod/nodes/prod-w1"},
		{func() (*v1.Operation, error) { return c.RemoveClusterNode(ctx, "prod", "prod-w1", true) },
			"DELETE /api/v1/clusters/prod/nodes/prod-w1?keepVM=true"},
		{func() (*v1.Operation, error) {
			return c.ReplaceClusterNode(ctx, "prod", "prod-m2", v1.ReplaceNodeRequest{FreshDisk: true})
		}, "POST /api/v1/clusters/prod/nodes/prod-m2/replace"},
		{func() (*v1.Operation, error) { return c.RetryCluster(ctx, "prod") }, "POST /api/v1/clusters/prod/retry"},
		{func() (*v1.Operation, error) { return c.WatchOperation(ctx, "op1", 7, 30*time.Second) },
			"GET /api/v1/operations/op1?watch=true&revision=7&timeout=30s"},
		{func() (*v1.Operation, error) { return c.WatchOperation(ctx, "op1", 0, 0) },
			"GET /api/v1/operations/op1?watch=true&revision=0"},
	}
	for _, tc := range calls {
		mu.Lock()
		got = nil
		mu.Unlock()
		op, err := tc.call()
		if err != nil {
			t.Fatalf("%s: %v", tc.want, err)
		}
		mu.Lock()
		if len(got) != 1 || got[0] != tc.want {
			t.Errorf("sent %q, want %q", got, tc.want)
		}
		mu.Unlock()
		if op.ID != "op1" || op.Kind != v1.OperationDelete {
			t.Errorf("%s: decoded %+v", tc.want, op)
		}
	}
}

// recordingClient is a client of an httptest TLS server whose certificate
// is one the client takes for a controller's.
func recordingClient(t *testing.T, handler http.HandlerFunc) *client.Client {
	t.Helper()
	certPEM, keyPEM := selfSigned(t, v1.OrgControllers)
	srv := tlsServer(t, handler, certPEM, keyPEM, nil)
	// The same certificate serves as the CA, the server's and the client's:
	// this server does not ask for one.
	c, err := client.New(clientconfig.New(srv.URL, certPEM, certPEM, keyPEM), "")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// selfSigned is a certificate for 127.0.0.1 of organization org that
// serves as its own CA, for a server and a client.
func selfSigned(t *testing.T, org string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "test " + org, Organization: []string{org}},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(time.Hour),
		IsCA:         true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}

// tlsServer serves handler with the given certificate; with clientCAs it
// requires a client certificate they signed.
func tlsServer(t *testing.T, handler http.Handler, certPEM, keyPEM []byte, clientCAs *x509.CertPool) *httptest.Server {
	t.Helper()
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(handler)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	if clientCAs != nil {
		srv.TLS.ClientCAs, srv.TLS.ClientAuth = clientCAs, tls.RequireAndVerifyClientCert
	}
	// The refused handshakes would log.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// WaitOperation asks again, for up to two minutes, a controller that does
// not answer (it may be restarting), but not one whose TLS failure no
// retry mends: each attack ends the wait at once with the reason.
func TestWaitOperationStopsAtATLSFailure(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("a request reached the server: %s %s", r.Method, r.URL)
	})
	controllerPEM, controllerKey := selfSigned(t, v1.OrgControllers)
	adminPEM, adminKey := selfSigned(t, v1.OrgControllers)
	otherPEM, otherKey := selfSigned(t, v1.OrgControllers)
	nodePEM, nodeKey := selfSigned(t, "harmony:nodes")
	pool := func(pemCert []byte) *x509.CertPool {
		p := x509.NewCertPool()
		p.AppendCertsFromPEM(pemCert)
		return p
	}
	for _, tc := range []struct {
		name string
		// The client trusts its ca and presents adminPEM.
		server *httptest.Server
		ca     []byte
		want   string
	}{
		{"server certificate from another CA", tlsServer(t, ok, otherPEM, otherKey, nil), controllerPEM, "certificate"},
		{"server certificate not a controller's", tlsServer(t, ok, nodePEM, nodeKey, nil), nodePEM, "not a Harmony controller"},
		{"client certificate refused", tlsServer(t, ok, controllerPEM, controllerKey, pool(otherPEM)), controllerPEM, "remote error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := client.New(clientconfig.New(tc.server.URL, tc.ca, adminPEM, adminKey), "")
			if err != nil {
				t.Fatal(err)
			}
			// Generous against the two minutes it would otherwise ask.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err = c.WaitOperation(ctx, "op-1", nil)
			if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("wait: %v (context: %v), want an error at once saying %q", err, ctx.Err(), tc.want)
			}
		})
	}

	// A controller that is not there is asked again until the context ends.
	gone := tlsServer(t, ok, controllerPEM, controllerKey, nil)
	gone.Close()
	c, err := client.New(clientconfig.New(gone.URL, controllerPEM, adminPEM, adminKey), "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := c.WaitOperation(ctx, "op-1", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait on a controller that is down: %v, want it to ask until the context ends", err)
	}
}

// TestClusterLifecycle creates, scales and deletes a small cluster on a
// simulated vCenter through the typed methods.
func TestClusterLifecycle(t *testing.T) {
	if testing.Short() {
		t.Skip("builds VMs in a simulated vCenter")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sim, err := vcsim.Start(vcsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	// One VM in flight, as the controller's own tests: govmomi's simulator
	// races against itself on overlapping changes to one datastore.
	c := startController(t, func(cfg *controller.Config) {
		cfg.RetryBase = 20 * time.Millisecond
		cfg.CloneParallelism = 1
		cfg.LeaveTimeout = time.Second
	})

	p := sim.Provider("lab", &v1.IPPool{Network: "198.18.10.0/24", Ranges: []string{"198.18.10.20-198.18.10.79"},
		Gateway: "198.18.10.1", DNS: []string{"198.18.10.2"}})
	applied, err := c.ApplyProvider(ctx, &p)
	if err != nil {
		t.Fatalf("apply provider: %v", err)
	}
	if applied.Name != "lab" || applied.VCenter.Password != "" {
		t.Fatalf("applied provider: name %q, password shown: %t", applied.Name, applied.VCenter.Password != "")
	}
	if got, err := c.Provider(ctx, "lab"); err != nil || got.Datacenter != "DC0" {
		t.Fatalf("provider: %+v, %v", got, err)
	}

	ova := filepath.Join(t.TempDir(), "harmony-node.ova")
	if err := vcsim.NodeOVA(ctx, ova, "1.0.0"); err != nil {
		t.Fatal(err)
	}
	image := importImage(t, ctx, c, ova, true)
	if again := importImage(t, ctx, c, ova, false); again != image {
		t.Fatalf("second import: image %q, want %q", again, image)
	}

	masters := 1
	spec := &v1.ClusterSpec{APIVersion: v1.APIVersion, Kind: "Cluster", Name: "small", Provider: "lab", Image: image,
		Masters: &masters, Workers: 1, VIP: "198.18.10.79", PodCIDR: "198.19.0.0/17", ServiceCIDR: "198.19.128.0/20",
		MasterDataDiskGiB: 8, WorkerSize: &v1.NodeSize{CPUs: 2, MemoryMiB: 2048}}
	op := runOperation(t, ctx, c, v1.OperationCreate, func() (*v1.Operation, error) { return c.CreateCluster(ctx, spec) })
	if len(op.Nodes) != 2 {
		t.Fatalf("create operation shows %d nodes: %+v", len(op.Nodes), op.Nodes)
	}
	cl, err := c.Cluster(ctx, "small")
	if err != nil {
		t.Fatalf("cluster: %v", err)
	}
	if cl.Status.Phase != v1.PhaseRunning || len(cl.Status.Nodes) != 2 || cl.Spec.Workers != 1 {
		t.Fatalf("cluster after create: phase %s, workers %d, nodes %+v", cl.Status.Phase, cl.Spec.Workers, cl.Status.Nodes)
	}
	if list, err := c.Clusters(ctx); err != nil || len(list) != 1 || list[0].Spec.Name != "small" {
		t.Fatalf("clusters: %+v, %v", list, err)
	}

	zero := 0
	runOperation(t, ctx, c, v1.OperationScale, func() (*v1.Operation, error) {
		return c.ScaleCluster(ctx, "small", v1.ScaleRequest{Workers: &zero})
	})
	if cl, err = c.Cluster(ctx, "small"); err != nil {
		t.Fatalf("cluster: %v", err)
	}
	if cl.Status.Phase != v1.PhaseRunning || len(cl.Status.Nodes) != 1 || cl.Spec.Workers != 0 {
		t.Fatalf("cluster after scaling in: phase %s, workers %d, nodes %+v", cl.Status.Phase, cl.Spec.Workers, cl.Status.Nodes)
	}

	runOperation(t, ctx, c, v1.OperationDelete, func() (*v1.Operation, error) { return c.DeleteCluster(ctx, "small", true) })
	_, err = c.Cluster(ctx, "small")
	wantAPIError(t, "cluster after delete", err, http.StatusNotFound, v1.CodeNotFound, "small")
	if list, err := c.Clusters(ctx); err != nil || len(list) != 0 {
		t.Fatalf("clusters after delete: %+v, %v", list, err)
	}
}

// importImage imports an OVA into provider lab. The first import must
// start an operation, which is followed to its end; another must answer
// with the image at once.
func importImage(t *testing.T, ctx context.Context, c *client.Client, path string, first bool) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	op, img, err := c.ImportImage(ctx, "lab", f, st.Size())
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	if !first {
		if op != nil || img == nil || img.State != v1.ImageReady {
			t.Fatalf("import again: operation %+v, image %+v; want the ready image", op, img)
		}
		return img.Name
	}
	if op == nil || img != nil || op.Kind != v1.OperationImport {
		t.Fatalf("first import: operation %+v, image %+v; want an import operation", op, img)
	}
	if op, err = c.WaitOperation(ctx, op.ID, nil); err != nil {
		t.Fatalf("wait for import: %v", err)
	}
	if op.State != v1.OperationSucceeded {
		t.Fatalf("import %s: %s", op.State, op.Message)
	}
	images, err := c.Images(ctx, "lab")
	if err != nil || len(images) != 1 || images[0].State != v1.ImageReady {
		t.Fatalf("images after import: %+v, %v", images, err)
	}
	_, name, _ := strings.Cut(op.Image, "/")
	if name != images[0].Name {
		t.Fatalf("operation names image %q, the list %q", op.Image, images[0].Name)
	}
	return name
}

// runOperation starts an operation, checks its kind, follows it with
// WaitOperation and fails unless it succeeded.
func runOperation(t *testing.T, ctx context.Context, c *client.Client, kind v1.OperationKind, start func() (*v1.Operation, error)) *v1.Operation {
	t.Helper()
	op, err := start()
	if err != nil {
		t.Fatalf("start %s: %v", kind, err)
	}
	if op.ID == "" || op.Kind != kind {
		t.Fatalf("started operation %q of kind %q, want %q", op.ID, op.Kind, kind)
	}
	if got, err := c.Operation(ctx, op.ID); err != nil || got.ID != op.ID || got.Kind != kind {
		t.Fatalf("operation %s: %+v, %v", op.ID, got, err)
	}
	var seen int
	final, err := c.WaitOperation(ctx, op.ID, func(*v1.Operation) { seen++ })
	if err != nil {
		t.Fatalf("wait for %s: %v", kind, err)
	}
	if seen == 0 || final.ID != op.ID || final.Kind != kind || final.State != v1.OperationSucceeded {
		t.Fatalf("%s ended %s after %d states: %s", kind, final.State, seen, final.Message)
	}
	return final
}

// A controller restarted while a client waits for its operation: the wait
// resumes against the new controller and ends with the operation, as
// harmonyctl's --wait must when the controller restarts mid-upgrade.
func TestWaitOperationOutlivesAControllerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds VMs in a simulated vCenter")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Clones slow enough that the create is still running when the
	// controller stops.
	sim, err := vcsim.Start(vcsim.Options{MethodDelay: map[string]int{"CloneVM_Task": 1500}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	tc := controllertest.Start(t, func(cfg *controller.Config) {
		cfg.RetryBase = 20 * time.Millisecond
		cfg.CloneParallelism = 1
	})
	c := tc.Admin
	p := sim.Provider("lab", &v1.IPPool{Network: "198.18.10.0/24", Ranges: []string{"198.18.10.20-198.18.10.79"}, Gateway: "198.18.10.1"})
	if _, err := c.ApplyProvider(ctx, &p); err != nil {
		t.Fatal(err)
	}
	ova := filepath.Join(t.TempDir(), "harmony-node.ova")
	if err := vcsim.NodeOVA(ctx, ova, "1.0.0"); err != nil {
		t.Fatal(err)
	}
	image := importImage(t, ctx, c, ova, true)
	masters := 1
	op, err := c.CreateCluster(ctx, &v1.ClusterSpec{APIVersion: v1.APIVersion, Kind: "Cluster", Name: "rs", Provider: "lab", Image: image,
		Masters: &masters, Workers: 2, VIP: "198.18.10.79", PodCIDR: "198.19.0.0/17", ServiceCIDR: "198.19.128.0/20"})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		op  *v1.Operation
		err error
	}
	waited := make(chan result, 1)
	go func() {
		final, err := c.WaitOperation(ctx, op.ID, nil)
		waited <- result{final, err}
	}()
	time.Sleep(500 * time.Millisecond)
	tc.Restart(t, 3*time.Second)
	r := <-waited
	if r.err != nil {
		t.Fatalf("wait across the restart: %v", r.err)
	}
	if r.op.ID != op.ID || r.op.State != v1.OperationSucceeded {
		t.Fatalf("create ended %s: %s", r.op.State, r.op.Message)
	}
}
