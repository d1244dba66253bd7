package contiv

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
)

// standInNetmaster is NOT Contiv: netmaster cannot run here (no
// binaries, no OVS). It answers the REST routes the plan uses the way
// contivmodel's handlers do (JSON objects by key, a missing one as 500
// "... not found", extra fields such as link-sets in what it returns), so
// that the plan's read-compare-write logic is tested against a server.
type standInNetmaster struct {
	mu      sync.Mutex
	objects map[string]map[string]any
	writes  []string
	failAll bool
}

func newStandInNetmaster(t *testing.T) (*standInNetmaster, *httptest.Server) {
	s := &standInNetmaster{objects: map[string]map[string]any{}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv
}

func (s *standInNetmaster) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failAll {
		http.Error(w, "etcd cluster is unavailable", http.StatusInternalServerError)
		return
	}
	if !strings.HasPrefix(r.URL.Path, "/api/v1/globals/") && !strings.HasPrefix(r.URL.Path, "/api/v1/networks/") {
		http.NotFound(w, r)
		return
	}
	switch r.Method {
	case http.MethodGet:
		obj, ok := s.objects[r.URL.Path]
		if !ok {
			http.Error(w, "object not found", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(obj)
	case http.MethodPost:
		body, _ := io.ReadAll(r.Body)
		var obj map[string]any
		if err := json.Unmarshal(body, &obj); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		obj["link-sets"] = map[string]any{}
		s.objects[r.URL.Path] = obj
		s.writes = append(s.writes, r.URL.Path)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(obj)
	default:
		http.Error(w, "method", http.StatusMethodNotAllowed)
	}
}

func (s *standInNetmaster) takeWrites() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.writes
	s.writes = nil
	return w
}

func TestApplyPodNetwork(t *testing.T) {
	ctx := context.Background()
	nm, srv := newStandInNetmaster(t)
	api := newNetmasterAPI(srv.URL)
	spec := NetworkSpec{
		Global:  Global{Key: "global", Name: "global", ArpMode: "proxy", FwdMode: "routing", NetworkInfraType: "default", PvtSubnet: "172.19.0.0/16", Vlans: "1-4094", Vxlans: "1-10000"},
		Network: Network{Key: "default:default-net", TenantName: "default", NetworkName: "default-net", NwType: "data", Encap: "vxlan", PktTag: 4096, Subnet: "198.19.0.0/17", Gateway: "198.19.0.1"},
	}

	actions, err := api.applyFunc(spec)(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(actions) != 2 || !slices.Equal(nm.takeWrites(), []string{"/api/v1/globals/global/", "/api/v1/networks/default:default-net/"}) {
		t.Errorf("first apply: actions %q", actions)
	}
	got := nm.objects["/api/v1/networks/default:default-net/"]
	if got["subnet"] != "198.19.0.0/17" || got["pktTag"] != float64(4096) || got["encap"] != "vxlan" || got["gateway"] != "198.19.0.1" {
		t.Errorf("netmaster holds %v", got)
	}

	// Converged: reads only.
	actions, err = api.applyFunc(spec)(ctx)
	if err != nil || len(actions) != 0 {
		t.Errorf("second apply: %q, %v", actions, err)
	}
	if w := nm.takeWrites(); len(w) != 0 {
		t.Errorf("second apply wrote %q", w)
	}

	// A new VNI rewrites the network, not the global settings.
	spec.Network.PktTag = 4097
	actions, err = api.applyFunc(spec)(ctx)
	if err != nil || len(actions) != 1 || !strings.Contains(actions[0], "VNI 4097") {
		t.Errorf("VNI change: %q, %v", actions, err)
	}
	if w := nm.takeWrites(); !slices.Equal(w, []string{"/api/v1/networks/default:default-net/"}) {
		t.Errorf("VNI change wrote %q", w)
	}

	nm.mu.Lock()
	nm.failAll = true
	nm.mu.Unlock()
	if _, err := api.applyFunc(spec)(ctx); err == nil || !strings.Contains(err.Error(), "etcd cluster is unavailable") {
		t.Errorf("a failing netmaster: %v", err)
	}
	srv.Close()
	if _, err := api.applyFunc(spec)(ctx); err == nil || !strings.Contains(err.Error(), "netmaster API") {
		t.Errorf("no netmaster: %v", err)
	}
}
