package cni

import (
	"encoding/json"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/agent/components/cni/contiv"
	"github.com/harmonykaas/harmony/agent/components/cni/plugin"
	"github.com/harmonykaas/harmony/agent/pki"
	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/agent/service"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

func testPKI(t *testing.T) *v1.ClusterPKI {
	t.Helper()
	cluster, err := pki.NewCA("cluster-ca", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	etcd, err := pki.NewCA("etcd-ca", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &v1.ClusterPKI{ClusterCA: cluster, EtcdCA: etcd}
}

// testRole is a validated role of node name (m1, m2 masters; w1 worker).
// A worker gets the cluster CA's certificate alone, as the lab gives it.
func testRole(t *testing.T, name string, p *v1.ClusterPKI) *v1.Role {
	t.Helper()
	r := &v1.Role{
		APIVersion: v1.APIVersion, Kind: "Role", NodeName: name, Revision: 1, Role: v1.RoleWorker,
		Cluster: v1.ClusterSettings{
			Name: "demo", VIP: "198.18.0.10", VRID: 51,
			PodCIDR: "198.19.0.0/17", ServiceCIDR: "198.19.128.0/20",
			CNI: v1.CNISettings{Type: "contiv", Contiv: &v1.ContivSettings{Mode: "vxlan", VNI: 4096}},
		},
		Peers: []v1.Peer{
			{Name: "m1", Role: v1.RoleMaster, Address: "198.18.0.11"},
			{Name: "m2", Role: v1.RoleMaster, Address: "198.18.0.12", Rank: 1},
			{Name: "w1", Role: v1.RoleWorker, Address: "198.18.0.21"},
		},
		PKI: p,
	}
	for _, peer := range r.Peers {
		if peer.Name == name {
			r.Role = peer.Role
		}
	}
	if r.Role == v1.RoleWorker && p != nil {
		r.PKI = &v1.ClusterPKI{ClusterCA: &v1.KeyPair{Certificate: p.ClusterCA.Certificate}}
	}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	return r
}

func testHost(root string, services service.Manager) *reconcile.Host {
	return &reconcile.Host{Root: root, Services: services,
		Facts: reconcile.Facts{Interface: "eth0", Addresses: []netip.Addr{netip.MustParseAddr("198.18.0.99")}}}
}

// absentBinaries points the plugin at binaries that do not exist, as on
// every host of this lab: Contiv is not packaged in Debian.
func absentBinaries(t *testing.T) contiv.Config {
	dir := filepath.Join(t.TempDir(), "not-installed")
	return contiv.Config{
		NetmasterBinary: filepath.Join(dir, "netmaster"), NetpluginBinary: filepath.Join(dir, "netplugin"),
		CNIBinary: filepath.Join(dir, "contivk8s"), EtcdBinary: filepath.Join(dir, "etcd"),
	}
}

// placeholderBinaries are empty executable files where the binaries
// would be, for tests whose service manager is a servicetest.Recorder,
// which runs nothing.
func placeholderBinaries(t *testing.T) contiv.Config {
	cfg := absentBinaries(t)
	for _, b := range []string{cfg.NetmasterBinary, cfg.NetpluginBinary, cfg.CNIBinary, cfg.EtcdBinary} {
		if err := os.MkdirAll(filepath.Dir(b), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(b, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return cfg
}

// snapshot is every file under root: path to mode and bytes.
func snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		out[strings.TrimPrefix(path, root)] = info.Mode().String() + "\n" + string(data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameSnapshot(t *testing.T, before, after map[string]string) {
	t.Helper()
	for p, v := range before {
		if after[p] != v {
			t.Errorf("%s changed", p)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("%s appeared", p)
		}
	}
}

// standInNetmasterAPI is NOT Contiv's netmaster, which cannot run here: an
// in-memory stand-in for the two REST routes the Contiv plan writes
// (objects by path; a missing one is a 500 "... not found", as
// contivmodel answers), so that the component's apply step has a server.
type standInNetmasterAPI struct {
	mu      sync.Mutex
	objects map[string][]byte
}

func newStandInNetmasterAPI(t *testing.T) (*standInNetmasterAPI, int) {
	s := &standInNetmasterAPI{objects: map[string][]byte{}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv.Listener.Addr().(*net.TCPAddr).Port
}

func (s *standInNetmasterAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.Method {
	case http.MethodGet:
		obj, ok := s.objects[r.URL.Path]
		if !ok {
			http.Error(w, "object not found", http.StatusInternalServerError)
			return
		}
		w.Write(obj)
	case http.MethodPost:
		body, _ := io.ReadAll(r.Body)
		if !json.Valid(body) {
			http.Error(w, "bad json", http.StatusInternalServerError)
			return
		}
		s.objects[r.URL.Path] = body
		w.Write(body)
	}
}

func (s *standInNetmasterAPI) object(t *testing.T, path string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out map[string]any
	if err := json.Unmarshal(s.objects[path], &out); err != nil {
		t.Fatalf("netmaster holds no %s: %v", path, err)
	}
	return out
}

// testPlugin is NOT a real CNI: a second registry entry, to prove the
// contract (switching CNIs removes the other plugin's files and units; a
// refused configuration keeps the live one).
type testPlugin struct {
	conflist []byte
	binary   string
}

const (
	testConfList = plugin.ConfListDir + "/20-testcni.conflist"
	testUnit     = "testcni-daemon"
)

func (p *testPlugin) Name() string { return "testcni" }

func (p *testPlugin) Owned() plugin.Owned {
	return plugin.Owned{Files: []string{testConfList}, Units: []string{testUnit}}
}

func (p *testPlugin) Plan(host *reconcile.Host, role *v1.Role) (*plugin.Plan, error) {
	rule := plugin.ConfListRule{CNIVersion: "1.0.0", Name: "testnet", Types: []string{"bridge"}}
	return &plugin.Plan{
		Files:    []plugin.File{{Path: testConfList, Data: p.conflist, Mode: 0o644, Validate: plugin.ConfListValidator(rule), Units: []string{testUnit}}},
		Units:    []service.Unit{{Name: testUnit, Command: []string{p.binary}}},
		Binaries: []string{p.binary},
	}, nil
}
