package v1_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// fixtures are real certificates, keys and a CSR, made once per test binary
// because key generation dominates the cost of the tests and fuzz targets.
type fixtures struct {
	ca      *x509.Certificate
	caPEM   string
	caKey   string // PKCS#8 PEM of the CA's key
	caPin   string
	otherCA *x509.Certificate
	// otherCAPEM and otherKey belong to a second, unrelated CA: its key
	// does not match ca, and its pin is not ca's.
	otherCAPEM string
	otherKey   string
	leafPEM    string // a certificate signed by ca that is not a CA
	leafKey    string
	csrPEM     string
	token      string
}

var (
	fixOnce sync.Once
	fix     *fixtures
	fixErr  error
)

func mustFixtures(tb testing.TB) *fixtures {
	tb.Helper()
	fixOnce.Do(func() { fix, fixErr = makeFixtures() })
	if fixErr != nil {
		tb.Fatalf("make fixtures: %v", fixErr)
	}
	return fix
}

func makeFixtures() (*fixtures, error) {
	var f fixtures
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if f.ca, err = selfSignedCA("harmony test CA", caKey); err != nil {
		return nil, err
	}
	f.caPEM = string(v1.EncodeCertificatesPEM(f.ca))
	if f.caKey, err = pkcs8PEM(caKey); err != nil {
		return nil, err
	}
	f.caPin = v1.CAPin(f.ca)

	otherKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if f.otherCA, err = selfSignedCA("other CA", otherKey); err != nil {
		return nil, err
	}
	f.otherCAPEM = string(v1.EncodeCertificatesPEM(f.otherCA))
	if f.otherKey, err = pkcs8PEM(otherKey); err != nil {
		return nil, err
	}

	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leafTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(2),
		Subject:               pkix.Name{CommonName: "node-1"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  false,
	}
	der, err := x509.CreateCertificate(rand.Reader, leafTmpl, f.ca, &leafKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	f.leafPEM = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	if f.leafKey, err = pkcs8PEM(leafKey); err != nil {
		return nil, err
	}

	csrDER, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:  pkix.Name{CommonName: "node-1"},
		DNSNames: []string{"node-1.example.com"},
	}, leafKey)
	if err != nil {
		return nil, err
	}
	f.csrPEM = v1.EncodeCSR(csrDER)
	f.token = "0123456789abcdef." + strings.Repeat("0123456789abcdef", 4)
	return &f, nil
}

func selfSignedCA(cn string, key *ecdsa.PrivateKey) (*x509.Certificate, error) {
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

func pkcs8PEM(key crypto.PrivateKey) (string, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", err
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), nil
}

// validBootstrap is a complete document that DecodeBootstrap accepts.
func validBootstrap(f *fixtures) *v1.Bootstrap {
	return &v1.Bootstrap{
		APIVersion:  v1.APIVersion,
		Kind:        "Bootstrap",
		Controllers: []string{"https://controller-1.example.com:8443", "https://10.0.0.2/"},
		CABundle:    f.caPEM,
		CAPin:       f.caPin,
		NodeName:    "node-1.example.com",
		Token:       f.token,
	}
}

// validRole is a worker role with every optional part set except the PKI,
// which validPKI adds.
func validRole() *v1.Role {
	return &v1.Role{
		APIVersion: v1.APIVersion,
		Kind:       "Role",
		NodeName:   "node-1",
		Revision:   3,
		UpdatedAt:  time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		Role:       v1.RoleWorker,
		Cluster: v1.ClusterSettings{
			Name:              "prod",
			KubernetesVersion: "v1.31.2",
			VIP:               "10.0.0.100",
			VRID:              51,
			PodCIDR:           "10.244.0.0/16",
			ServiceCIDR:       "10.96.0.0/12",
			DNSDomain:         "cluster.local",
			CNI:               v1.CNISettings{Type: "contiv", Contiv: &v1.ContivSettings{Mode: "vxlan", VNI: 4096}},
		},
		Addresses: v1.NodeAddresses{
			IPs:       []string{"10.0.0.11", "fd00::11"},
			DNSNames:  []string{"node-1.example.com"},
			Interface: "ens192",
		},
		Peers: []v1.Peer{
			{Name: "master-1", Role: v1.RoleMaster, Address: "10.0.0.1", Rank: 0},
			{Name: "master-2", Role: v1.RoleMaster, Address: "10.0.0.2", Rank: 1},
		},
		Versions: v1.ComponentVersions{
			Kubernetes: "v1.31.2", Etcd: "3.5.16", Containerd: "1.7.22",
			Keepalived: "2.3.1", HAProxy: "3.0.5", CNI: "1.2.3-rc.1",
		},
		Etcd: &v1.EtcdSettings{DataDir: "/var/lib/etcd"},
	}
}

// validPKI holds the fixture CA as every cluster CA.
func validPKI(f *fixtures) *v1.ClusterPKI {
	kp := func() *v1.KeyPair { return &v1.KeyPair{Certificate: f.caPEM, Key: f.caKey} }
	return &v1.ClusterPKI{ClusterCA: kp(), EtcdCA: kp(), FrontProxyCA: kp(), ServiceAccountKey: f.caKey}
}

func validStatus() *v1.Status {
	return &v1.Status{
		APIVersion:       v1.APIVersion,
		Kind:             "Status",
		NodeName:         "node-1",
		ReportedAt:       time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC),
		ObservedRevision: 7,
		Phase:            v1.PhaseReady,
		AgentVersion:     "v0.3.1+g1234abc",
		Addresses:        []string{"10.0.0.11", "fd00::11"},
		EtcdMemberID:     "8e9e05c52164694d",
		KubernetesNode: &v1.KubernetesNodeStatus{Ready: "False", Reason: "KubeletNotReady",
			Message: "container runtime network not ready", KubeletVersion: "v1.34.2",
			ObservedAt: time.Date(2025, 1, 2, 3, 4, 0, 0, time.UTC)},
		Components: []v1.ComponentStatus{
			{Name: "kubelet", Healthy: true, Phase: "Running", Version: "v1.31.2"},
			{Name: "etcd", Healthy: false, Phase: "Starting", Message: "waiting for peers: master-2"},
		},
	}
}

// fieldOf returns the Field of the *v1.FieldError in err's chain, failing
// the test if there is none: every decoder promises one.
func fieldOf(tb testing.TB, err error) string {
	tb.Helper()
	var fe *v1.FieldError
	if !errors.As(err, &fe) {
		tb.Fatalf("error %q (%T) is not a *v1.FieldError", err, err)
	}
	return fe.Field
}

// checkResult asserts that err is nil when wantField is "-", and otherwise
// that err names wantField.
func checkResult(tb testing.TB, err error, wantField string) {
	tb.Helper()
	if wantField == okField {
		if err != nil {
			tb.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if err == nil {
		tb.Fatalf("no error, want one for field %q", wantField)
	}
	if got := fieldOf(tb, err); got != wantField {
		tb.Fatalf("error names field %q, want %q (error: %v)", got, wantField, err)
	}
}

// okField marks a table case that must be accepted.
const okField = "-"

// padTo appends spaces to a JSON document until it is n bytes long, so that
// only its size, not its content, can make a decoder refuse it.
func padTo(tb testing.TB, doc []byte, n int) []byte {
	tb.Helper()
	if len(doc) > n {
		tb.Fatalf("document is already %d bytes, more than %d", len(doc), n)
	}
	return append(doc, strings.Repeat(" ", n-len(doc))...)
}

// semanticEqual compares decoded documents the way their JSON form can
// tell them apart: a nil and an empty slice are the same (both omitted),
// and times are compared as instants, not by *time.Location.
func semanticEqual(a, b any) bool {
	return valuesEqual(reflect.ValueOf(a), reflect.ValueOf(b))
}

var timeType = reflect.TypeFor[time.Time]()

func valuesEqual(a, b reflect.Value) bool {
	if a.Type() != b.Type() {
		return false
	}
	if a.Type() == timeType {
		return a.Interface().(time.Time).Equal(b.Interface().(time.Time))
	}
	switch a.Kind() {
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return valuesEqual(a.Elem(), b.Elem())
	case reflect.Struct:
		for i := range a.NumField() {
			if !valuesEqual(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	case reflect.Slice, reflect.Array:
		if a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !valuesEqual(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	default:
		return a.Equal(b)
	}
}

// TestSemanticEqual guards the helper the round-trip checks rely on: if it
// called everything equal, the fuzz targets would prove nothing.
func TestSemanticEqual(t *testing.T) {
	a := validRole()
	b := validRole()
	b.Peers = append([]v1.Peer(nil), b.Peers...)
	b.UpdatedAt = a.UpdatedAt.In(time.FixedZone("X", 3600))
	if !semanticEqual(a, b) {
		t.Fatal("equal roles compared unequal")
	}
	b.Peers[1].Rank = 9
	if semanticEqual(a, b) {
		t.Fatal("roles differing in peers[1].rank compared equal")
	}
	c, d := validStatus(), validStatus()
	c.Addresses, d.Addresses = nil, []string{}
	if !semanticEqual(c, d) {
		t.Fatal("nil and empty slices compared unequal")
	}
	d.ReportedAt = d.ReportedAt.Add(time.Nanosecond)
	if semanticEqual(c, d) {
		t.Fatal("different instants compared equal")
	}
}
