package flannel

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/internal/kubeconfig"
	"github.com/harmonykaas/harmony/internal/testutil"
)

// apiStandIn is NOT a Kubernetes apiserver: it records the objects POSTed
// to it over mutual TLS and answers with a fixed status, to test what the
// plugin asks for; the lab runs it against the real one.
type apiStandIn struct {
	mu      sync.Mutex
	status  int
	objects map[string]map[string]any
}

func (a *apiStandIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var obj map[string]any
	if r.Method != http.MethodPost || len(r.TLS.PeerCertificates) == 0 || json.NewDecoder(r.Body).Decode(&obj) != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	a.mu.Lock()
	a.objects[r.URL.Path] = obj
	status := a.status
	a.mu.Unlock()
	w.WriteHeader(status)
}

func (a *apiStandIn) answer(status int) {
	a.mu.Lock()
	a.status = status
	a.mu.Unlock()
}

func newAPIStandIn(t *testing.T) (*apiStandIn, string) {
	ca := testutil.NewCA(t)
	certPEM, keyPEM := ca.Issue(t, "127.0.0.1", x509.ExtKeyUsageServerAuth)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	api := &apiStandIn{status: http.StatusCreated, objects: map[string]map[string]any{}}
	srv := httptest.NewUnstartedServer(api)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	clientCert, clientKey := ca.Issue(t, "kubernetes-admin", x509.ExtKeyUsageClientAuth)
	data, err := kubeconfig.New("demo", srv.URL, ca.PEM, "admin", clientCert, clientKey).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "admin.conf")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return api, path
}

// The grant is read access to Nodes for the group every kubelet is in,
// nothing more; existing objects are left alone; a refusal is an error
// naming the object.
func TestEnsureRBAC(t *testing.T) {
	api, admin := newAPIStandIn(t)
	ctx := context.Background()
	actions, err := ensureRBAC(ctx, &reconcile.Host{}, admin)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(actions, []string{"created ClusterRole " + nodesReader, "created ClusterRoleBinding " + nodesReader}) {
		t.Errorf("actions %q", actions)
	}
	api.mu.Lock()
	role := api.objects["/apis/rbac.authorization.k8s.io/v1/clusterroles"]
	binding := api.objects["/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"]
	api.mu.Unlock()
	rules, _ := json.Marshal(role["rules"])
	if string(rules) != `[{"apiGroups":[""],"resources":["nodes"],"verbs":["get","list","watch"]}]` {
		t.Errorf("the ClusterRole grants %s", rules)
	}
	subjects, _ := json.Marshal(binding["subjects"])
	if string(subjects) != `[{"apiGroup":"rbac.authorization.k8s.io","kind":"Group","name":"system:nodes"}]` {
		t.Errorf("the binding's subjects are %s", subjects)
	}

	api.answer(http.StatusConflict)
	if actions, err := ensureRBAC(ctx, &reconcile.Host{}, admin); err != nil || len(actions) != 0 {
		t.Errorf("existing objects: actions %q, err %v", actions, err)
	}
	api.answer(http.StatusForbidden)
	if _, err := ensureRBAC(ctx, &reconcile.Host{}, admin); err == nil || !strings.Contains(err.Error(), "ClusterRole "+nodesReader) {
		t.Errorf("refused: %v", err)
	}
}
