package kubeadm

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/harmonykaas/harmony/agent/reconcile"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// csrTemplate is what a kubelet asks for: its node's name and address.
func csrTemplate(node, ip string) x509.CertificateRequest {
	return x509.CertificateRequest{
		Subject:     pkix.Name{CommonName: nodeUserPrefix + node, Organization: []string{nodesGroup}},
		DNSNames:    []string{node},
		IPAddresses: []net.IP{net.ParseIP(ip)},
	}
}

func csrPEM(t *testing.T, tmpl x509.CertificateRequest) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

// nodeRequest is w1's kubelet asking for its serving certificate, as the
// apiserver records it.
func nodeRequest(t *testing.T, tmpl x509.CertificateRequest) csrSpec {
	return csrSpec{
		SignerName: kubeletServingSigner, Request: csrPEM(t, tmpl),
		Usages:   []string{"digital signature", "server auth"},
		Username: nodeUserPrefix + "w1", Groups: []string{nodesGroup, "system:authenticated"},
	}
}

// Each attack on the approver is denied, naming what is wrong; w1's own
// request is approved.
func TestServingRequestsAreJudgedAgainstTheRole(t *testing.T) {
	cl := newTestCluster(t)
	peers := cl.role(t, "m1", 40).Peers
	const w1, m1, vip = "198.18.40.21", "198.18.40.11", "198.18.40.10"

	if err := judgeServingRequest(nodeRequest(t, csrTemplate("w1", w1)), peers); err != nil {
		t.Fatalf("w1's own request: %v", err)
	}
	ipOnly := csrTemplate("w1", w1)
	ipOnly.DNSNames = nil
	if err := judgeServingRequest(nodeRequest(t, ipOnly), peers); err != nil {
		t.Errorf("w1's request for its address alone: %v", err)
	}

	for _, tc := range []struct {
		attack string
		change func(*csrSpec)
		want   string
	}{
		{"another signer", func(s *csrSpec) { s.SignerName = "kubernetes.io/kube-apiserver-client" }, "spec.signerName"},
		{"a user who is not a node", func(s *csrSpec) { s.Username, s.Groups = "kubernetes-admin", []string{"kubeadm:cluster-admins"} }, "is not a node's kubelet"},
		{"a bootstrap token", func(s *csrSpec) {
			s.Username, s.Groups = "system:bootstrap:abcdef", []string{"system:bootstrappers", "system:bootstrappers:kubeadm:default-node-token"}
		}, "is not a node's kubelet"},
		{"a node's name outside the nodes group", func(s *csrSpec) { s.Groups = []string{"system:authenticated"} }, "spec.groups"},
		{"a node of no machine of this cluster", func(s *csrSpec) {
			s.Username = nodeUserPrefix + "evil"
			s.Request = csrPEM(t, csrTemplate("evil", w1))
		}, `node "evil" is not a node of this cluster`},
		{"client auth too", func(s *csrSpec) { s.Usages = append(s.Usages, "client auth") }, `"client auth" is not for a serving certificate`},
		{"no server auth", func(s *csrSpec) { s.Usages = []string{"digital signature"} }, "lacks server auth"},
		{"another node's subject", func(s *csrSpec) { s.Request = csrPEM(t, csrTemplate("m1", w1)) }, `subject CN "system:node:m1"`},
		{"the masters' group", func(s *csrSpec) {
			tmpl := csrTemplate("w1", w1)
			tmpl.Subject.Organization = []string{"system:masters"}
			s.Request = csrPEM(t, tmpl)
		}, "subject O"},
		{"the VIP's address", func(s *csrSpec) {
			tmpl := csrTemplate("w1", w1)
			tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(vip))
			s.Request = csrPEM(t, tmpl)
		}, "IP address " + vip + " is not node w1's address"},
		{"another node's address", func(s *csrSpec) { s.Request = csrPEM(t, csrTemplate("w1", m1)) }, "IP address " + m1},
		{"another name", func(s *csrSpec) {
			tmpl := csrTemplate("w1", w1)
			tmpl.DNSNames = append(tmpl.DNSNames, "kubernetes.default.svc")
			s.Request = csrPEM(t, tmpl)
		}, `DNS name "kubernetes.default.svc"`},
		{"an e-mail name", func(s *csrSpec) {
			tmpl := csrTemplate("w1", w1)
			tmpl.EmailAddresses = []string{"root@w1"}
			s.Request = csrPEM(t, tmpl)
		}, "e-mail or URI"},
		{"a URI name", func(s *csrSpec) {
			tmpl := csrTemplate("w1", w1)
			tmpl.URIs = []*url.URL{{Scheme: "spiffe", Host: "cluster.local", Path: "/ns/kube-system/sa/default"}}
			s.Request = csrPEM(t, tmpl)
		}, "e-mail or URI"},
		{"no name at all", func(s *csrSpec) {
			tmpl := csrTemplate("w1", w1)
			tmpl.DNSNames, tmpl.IPAddresses = nil, nil
			s.Request = csrPEM(t, tmpl)
		}, "names neither"},
		{"not PEM", func(s *csrSpec) { s.Request = []byte("not a request") }, "not exactly one PEM"},
		{"a second request after the first", func(s *csrSpec) {
			s.Request = append(s.Request, csrPEM(t, csrTemplate("m1", m1))...)
		}, "not exactly one PEM"},
		{"a request someone else signed", func(s *csrSpec) {
			block, _ := pem.Decode(s.Request)
			block.Bytes[len(block.Bytes)-1] ^= 0xff // in the signature
			s.Request = pem.EncodeToMemory(block)
		}, "spec.request"},
	} {
		t.Run(tc.attack, func(t *testing.T) {
			spec := nodeRequest(t, csrTemplate("w1", w1))
			tc.change(&spec)
			err := judgeServingRequest(spec, peers)
			if err == nil {
				t.Fatal("approved")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("denied with %q, want it to say %q", err, tc.want)
			}
		})
	}
}

// checkServingRequests, against the real apiserver: a pass approves w1's
// request for its own name and address, and denies, saying why, w1's
// request for the VIP and an admin's for m1's name; a request already
// decided and one to another signer are left alone; the next pass
// decides nothing. The decisions are counted.
func checkServingRequests(t *testing.T, c *Component, host *reconcile.Host, cl *testCluster, role *v1.Role, api *apiClient, admin *tls.Certificate) {
	t.Helper()
	const w1, vip = "198.18.40.21", "198.18.40.10"
	node := clusterClientCert(t, cl, nodeUserPrefix+"w1", nodesGroup)
	create := func(cert *tls.Certificate, name, signer string, tmpl x509.CertificateRequest, usages ...string) {
		t.Helper()
		body, err := json.Marshal(map[string]any{
			"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
			"metadata": map[string]any{"name": name},
			"spec":     map[string]any{"signerName": signer, "request": csrPEM(t, tmpl), "usages": usages},
		})
		if err != nil {
			t.Fatal(err)
		}
		mustSend(t, api, cert, http.MethodPost, csrPath, string(body), http.StatusCreated)
	}
	withVIP := csrTemplate("w1", w1)
	withVIP.IPAddresses = append(withVIP.IPAddresses, net.ParseIP(vip))
	create(node, "w1-serving", kubeletServingSigner, csrTemplate("w1", w1), "digital signature", "server auth")
	create(node, "w1-vip", kubeletServingSigner, withVIP, "digital signature", "server auth")
	create(admin, "admin-as-m1", kubeletServingSigner, csrTemplate("m1", "198.18.40.11"), "digital signature", "server auth")
	create(admin, "a-client", "kubernetes.io/kube-apiserver-client", x509.CertificateRequest{Subject: pkix.Name{CommonName: "bob"}}, "client auth")
	create(node, "w1-decided", kubeletServingSigner, csrTemplate("w1", w1), "digital signature", "server auth")
	denied := `{"apiVersion":"certificates.k8s.io/v1","kind":"CertificateSigningRequest","metadata":{"name":"w1-decided"},` +
		`"status":{"conditions":[{"type":"Denied","status":"True","reason":"ByHand","message":"an operator said no"}]}}`
	mustSend(t, api, admin, http.MethodPut, csrPath+"/w1-decided/approval", denied, http.StatusOK)

	// Through the pass, as the runner makes it.
	st := c.Reconcile(context.Background(), host, role)
	if st.Phase != reconcile.PhaseConverged || !st.Healthy {
		t.Fatalf("pass with requests: %+v", st)
	}
	slices.Sort(st.Actions)
	want := []string{
		"approved kubelet serving certificate request w1-serving of system:node:w1",
		`denied kubelet serving certificate request admin-as-m1 of kubernetes-super-admin: spec.username: "kubernetes-super-admin" is not a node's kubelet (system:node:NAME)`,
		"denied kubelet serving certificate request w1-vip of system:node:w1: spec.request: IP address " + vip + " is not node w1's address (" + w1 + ")",
	}
	if !slices.Equal(st.Actions, want) {
		t.Errorf("decided %q,\nwant %q", st.Actions, want)
	}
	for name, want := range map[string]string{
		"w1-serving":  "Approved/" + approvedReason,
		"w1-vip":      "Denied/" + deniedReason,
		"admin-as-m1": "Denied/" + deniedReason,
		"w1-decided":  "Denied/ByHand",
		"a-client":    "",
	} {
		var o csrObject
		getJSON(t, api, admin, csrPath+"/"+name, &o)
		var got []string
		for _, c := range o.Status.Conditions {
			got = append(got, c.Type+"/"+c.Reason)
		}
		if strings.Join(got, ",") != want {
			t.Errorf("%s: conditions %q, want %q", name, got, want)
		}
	}
	if decided, err := c.judgeServingRequests(context.Background(), host, role); err != nil || len(decided) != 0 {
		t.Errorf("a second look decided %q, %v", decided, err)
	}
	metrics := gathered(t, c)
	for decision, want := range map[string]float64{"approved": 1, "denied": 2} {
		if got := metrics["harmony_agent_kubelet_serving_certificate_requests_total/"+decision]; got != want {
			t.Errorf("%s requests counted %v, want %v", decision, got, want)
		}
	}
}
