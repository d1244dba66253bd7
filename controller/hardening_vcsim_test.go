package controller

import (
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// The stored vCenter password went to whatever server a re-applied
// provider named. A change of where it would go (URL, username,
// thumbprint, insecure) now needs the password again, and nothing is
// sent before that.
func TestStoredPasswordIsNeverSentElsewhere(t *testing.T) {
	e := newClusterEnv(t)
	// A "vCenter" the attacker controls: it must never see a connection.
	trap, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer trap.Close()
	var contacted atomic.Int32
	go func() {
		for {
			c, err := trap.Accept()
			if err != nil {
				return
			}
			contacted.Add(1)
			c.Close()
		}
	}()
	changes := map[string]func(p *v1.Provider){
		"vcenter.url": func(p *v1.Provider) {
			p.VCenter.URL = "https://" + trap.Addr().String() + "/sdk"
			p.VCenter.Thumbprint, p.VCenter.Insecure = "", true
		},
		"vcenter.username":   func(p *v1.Provider) { p.VCenter.Username = "someone-else" },
		"vcenter.thumbprint": func(p *v1.Provider) { p.VCenter.Thumbprint = "" },
		"vcenter.insecure":   func(p *v1.Provider) { p.VCenter.Thumbprint, p.VCenter.Insecure = "", true },
	}
	for field, change := range changes {
		p := e.sim.Provider("lab", testPool())
		p.VCenter.Password = ""
		change(&p)
		r := doJSON(t, e.tc.admin, "PUT", e.tc.url+v1.PathProviders+"/lab", p)
		if r.status != http.StatusUnprocessableEntity || r.err.Code != v1.CodePasswordRequired || r.err.Field != "vcenter.password" ||
			!strings.Contains(r.err.Message, field) {
			t.Fatalf("%s changed without the password: %d %+v", field, r.status, r.err)
		}
	}
	if n := contacted.Load(); n != 0 {
		t.Fatalf("the controller connected %d times to the new URL", n)
	}
	var stored v1.Provider
	doJSON(t, e.tc.admin, "GET", e.tc.url+v1.PathProviders+"/lab", nil).decode(t, &stored)
	if stored.VCenter.URL != e.sim.URL || stored.VCenter.Username != e.sim.Username {
		t.Fatalf("a refused apply changed the provider: %+v", stored.VCenter)
	}
	// With the password given again the change is an ordinary apply.
	p := e.sim.Provider("lab", testPool())
	p.VCenter.Thumbprint, p.VCenter.Insecure = "", true
	if r := doJSON(t, e.tc.admin, "PUT", e.tc.url+v1.PathProviders+"/lab", p); r.status != http.StatusOK {
		t.Fatalf("apply with the password: %d %s", r.status, r.body)
	}
}

// enrollClusterNode enrolls a cluster's node with the bootstrap token the
// controller wrote into its VM's guestinfo, as the agent would.
func (e *clusterEnv) enrollClusterNode(cluster, name string) *http.Client {
	e.t.Helper()
	r, cert := e.enrollWith(name, extraConfig(e.vms(cluster)[name], v1.GuestinfoKey))
	if r.status != http.StatusOK {
		e.t.Fatalf("enroll %s: %d %s", name, r.status, r.body)
	}
	return e.tc.certClient(cert)
}

// enrollWith enrolls node, as its agent would, with a bootstrap as the
// controller encodes it into guestinfo.
func (e *clusterEnv) enrollWith(node, encoded string) (response, tls.Certificate) {
	e.t.Helper()
	data, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		e.t.Fatalf("bootstrap of %s: %v", node, err)
	}
	var b v1.Bootstrap
	if err := json.Unmarshal(data, &b); err != nil {
		e.t.Fatal(err)
	}
	n := e.node(node)
	csr, key := makeCSR(e.t, csrOptions{cn: node, dnsNames: []string{node}, ips: []net.IP{net.ParseIP(n.IPs[0])}})
	return e.tc.enroll(b.Token, csr, key)
}

// node is the controller's record of a node.
func (e *clusterEnv) node(name string) v1.Node {
	e.t.Helper()
	var n v1.Node
	doJSON(e.t, e.tc.admin, "GET", e.tc.url+v1.PathNodes+"/"+name, nil).decode(e.t, &n)
	return n
}

// Watchers were told of a scale inside its transaction, before the
// commit: they read the old role and waited for their next poll, up to a
// minute late. Now a watching node has the new peers at once.
func TestScaleWakesRoleWatchesAtOnce(t *testing.T) {
	e := newClusterEnv(t)
	e.do("POST", v1.PathClusters, e.spec("demo", 1, 1))
	node := e.enrollClusterNode("demo", "demo-w1")
	var before v1.Role
	doJSON(t, node, "GET", e.tc.url+v1.PathNodeRole, nil).decode(t, &before)

	type answer struct {
		role v1.Role
		at   time.Time
	}
	got := make(chan answer, 1)
	go func() {
		r := doJSON(t, node, "GET", e.tc.url+v1.PathNodeRole+"?wait=60s&after="+itoa(before.Revision), nil)
		var role v1.Role
		if r.status == http.StatusOK {
			r.decode(t, &role)
		}
		got <- answer{role, time.Now()}
	}()
	waitFor(t, "the watch held", func() bool { return gaugeValue(e.tc.c.metrics.activeWatches) == 1 })
	r := doJSON(t, e.tc.admin, "POST", e.tc.url+v1.PathClusters+"/demo/scale", v1.ScaleRequest{Workers: new(2)})
	returned := time.Now()
	if r.status != http.StatusAccepted {
		t.Fatalf("scale: %d %s", r.status, r.body)
	}
	select {
	case a := <-got:
		// The defect made this the watch's whole wait (a minute); a second
		// is the target, with room for a loaded machine.
		if lag := a.at.Sub(returned); lag > 5*time.Second {
			t.Fatalf("the watch answered %s after the scale returned", lag)
		}
		if !slices.ContainsFunc(a.role.Peers, func(p v1.Peer) bool { return p.Name == "demo-w2" }) {
			t.Fatalf("the role the watch got has peers %+v, without demo-w2", a.role.Peers)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the watch did not wake on the scale")
	}
}

// An upload that takes longer than the server's write timeout still gets
// its answer: the upload route sets its own deadlines.
func TestSlowUploadGetsItsAnswer(t *testing.T) {
	e := newClusterEnv(t, func(c *Config) { c.WriteTimeout = time.Second })
	data, err := os.ReadFile(nodeOVA(t, "2.0.0"))
	if err != nil {
		t.Fatal(err)
	}
	// A bit more than three times the write timeout, in small pieces.
	body := &slowReader{r: bytes.NewReader(data), every: 3500 * time.Millisecond / time.Duration(len(data)/(32<<10)+1)}
	req, _ := http.NewRequest("POST", e.tc.url+v1.PathImages+"?provider=lab", body)
	req.ContentLength = int64(len(data))
	resp, err := e.tc.admin.Do(req)
	if err != nil {
		t.Fatalf("slow upload: no answer: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		msg, _ := io.ReadAll(resp.Body)
		t.Fatalf("slow upload: %d %s", resp.StatusCode, msg)
	}
}

type slowReader struct {
	r     io.Reader
	every time.Duration
}

func (s *slowReader) Read(p []byte) (int, error) {
	time.Sleep(s.every)
	return s.r.Read(p[:min(len(p), 32<<10)])
}

// An OVA whose disks the template datastore cannot hold is refused
// before anything goes to vCenter, naming the problem.
func TestImageLargerThanTheDatastoreIsRefused(t *testing.T) {
	e := newClusterEnv(t)
	if err := e.sim.SetDatastoreFree("LocalDS_0", 1024); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(nodeOVA(t, "3.0.0"))
	if err != nil {
		t.Fatal(err)
	}
	r := doJSON(t, e.tc.admin, "POST", e.tc.url+v1.PathImages+"?provider=lab", data)
	if r.status != http.StatusUnprocessableEntity || r.err.Code != v1.CodePrecheckFailed || r.err.Field != "ova" ||
		!strings.Contains(r.err.Message, "LocalDS_0") {
		t.Fatalf("an image larger than the free space: %d %+v", r.status, r.err)
	}
	var list v1.ImageList
	doJSON(t, e.tc.admin, "GET", e.tc.url+v1.PathImages, nil).decode(t, &list)
	if len(list.Items) != 1 {
		t.Fatalf("images after the refusal: %+v", list.Items)
	}
}
