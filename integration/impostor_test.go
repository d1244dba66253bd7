package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/agent"
	"github.com/harmonykaas/harmony/agent/controlclient"
	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller"
	"github.com/harmonykaas/harmony/controller/ca"
	"github.com/harmonykaas/harmony/controller/client"
)

// impostor serves at addr with a certificate from the controller's own CA
// that is not the controller's (a node's, which any enrolled machine
// holds, with server auth for its metrics), and hands out an evil role.
func impostor(t *testing.T, c *ctl, addr string, org string) *atomic.Int32 {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf, err := c.c.CA().Issue(ca.Leaf{CommonName: "w2", Organization: org, SubjectSerial: "x",
		DNSNames: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}, PublicKey: &key.PublicKey,
		Lifetime: time.Hour, ServerAuth: true}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var served atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+v1.PathNodeRole, func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		json.NewEncoder(w).Encode(v1.Role{APIVersion: v1.APIVersion, Kind: "Role", NodeName: "w1", Role: v1.RoleWorker,
			Revision: 999, Cluster: v1.ClusterSettings{Name: "evil"}})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { served.Add(1) })
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, TLSConfig: &tls.Config{Certificates: []tls.Certificate{{
		Certificate: [][]byte{leaf.Raw, c.c.CA().Certificate().Raw}, PrivateKey: key}}}}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	return &served
}

// A server holding a node's certificate from the same CA fed an agent a
// role (revision 999, cluster "evil") and the agent applied it. The agent
// and harmonyctl now accept only the controller's serving certificate.
func TestAgentAndAdminRefuseAServerThatIsNotTheController(t *testing.T) {
	port := freePort(t)
	listen := "127.0.0.1:" + itoa(int64(port))
	c := startController(t, func(cfg *controller.Config) { cfg.Listen = listen })
	b := c.addNode(t, v1.NodeSpec{Name: "w1"})
	dir := t.TempDir()
	bootFile := filepath.Join(dir, "bootstrap.json")
	writeBootstrap(t, bootFile, b)
	state := filepath.Join(dir, "state")
	ra := startAgent(t, agent.Config{BootstrapFile: bootFile, StateDir: state})
	ra.waitRole(t, 1)
	ra.stop()
	c.stop()

	served := impostor(t, c, listen, v1.OrgNodes)
	ra2 := startAgent(t, agent.Config{BootstrapFile: bootFile, StateDir: state})
	eventually(t, "the agent refuses the impostor", func() bool {
		return strings.Contains(ra2.logs.String(), "is not a Harmony controller")
	})
	select {
	case r := <-ra2.roles:
		t.Fatalf("the agent took a role from the impostor: %+v", r)
	case <-time.After(time.Second):
	}
	if n := served.Load(); n != 0 {
		t.Fatalf("the impostor answered %d requests", n)
	}

	// harmonyctl's client: the admin's requests (vCenter passwords among
	// them) never reach it.
	admin, err := client.New(c.cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	err = admin.Do(context.Background(), "GET", v1.PathNodes, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "is not a Harmony controller") {
		t.Fatalf("admin client against the impostor: %v", err)
	}
	// The pinned-CA fetch of a pin-only bootstrap too.
	_, err = controlclient.FetchPinnedCA(context.Background(), []string{"https://" + listen}, c.c.CA().Pin())
	if err == nil || !strings.Contains(err.Error(), "is not a Harmony controller") {
		t.Fatalf("pinned CA fetch from the impostor: %v", err)
	}
	if n := served.Load(); n != 0 {
		t.Fatalf("the impostor answered %d requests", n)
	}
}
