package haproxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/agent/service"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

const haproxyBinary = "/usr/sbin/haproxy"

func needHAProxy(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath(haproxyBinary); err != nil {
		t.Fatalf("these tests validate with the real HAProxy: %v", err)
	}
}

// testCA is a cluster CA as the controller would put it in a role.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pair *v1.KeyPair
}

func newCA(t *testing.T, cn string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pair: &v1.KeyPair{
		Certificate: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		Key:         string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})),
	}}
}

// servingCert issues what kubeadm gives an apiserver: CN kube-apiserver,
// the DNS SAN "kubernetes" and the node's IP.
func (ca *testCA) servingCert(t *testing.T, ips ...net.IP) (certDER []byte, key *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}

// masterRole is a validated master role with n masters (198.18.0.11...,
// given in reverse rank order on purpose) and two workers.
func masterRole(t *testing.T, n int, ca *testCA) *v1.Role {
	t.Helper()
	r := &v1.Role{
		APIVersion: v1.APIVersion,
		Kind:       "Role",
		NodeName:   "m1",
		Revision:   1,
		Role:       v1.RoleMaster,
		Cluster: v1.ClusterSettings{
			Name: "demo",
			VIP:  "198.18.0.10",
			VRID: 51,
		},
		Addresses: v1.NodeAddresses{IPs: []string{"198.18.0.11"}},
	}
	r.Peers = append(r.Peers, v1.Peer{Name: "w1", Role: v1.RoleWorker, Address: "198.18.0.21"})
	for i := n; i >= 1; i-- {
		r.Peers = append(r.Peers, v1.Peer{Name: fmt.Sprintf("m%d", i), Role: v1.RoleMaster, Address: fmt.Sprintf("198.18.0.%d", 10+i), Rank: i - 1})
	}
	r.Peers = append(r.Peers, v1.Peer{Name: "w2", Role: v1.RoleWorker, Address: "198.18.0.22"})
	if ca != nil {
		r.PKI = &v1.ClusterPKI{ClusterCA: ca.pair}
	}
	if err := r.Validate(); err != nil {
		t.Fatalf("test role is not valid: %v", err)
	}
	return r
}

func newHost(t *testing.T, m service.Manager) *reconcile.Host {
	t.Helper()
	return &reconcile.Host{Root: t.TempDir(), Services: m}
}

// newTestComponent uses the real haproxy and no stats probe: the recorder
// runs no process to ask.
func newTestComponent() *Component {
	return New(Config{Binary: haproxyBinary, NoStatsProbe: true})
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) uint16 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}
