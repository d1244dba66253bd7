package kubeadm

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/agent/reconcile"
	v1 "github.com/harmonykaas/harmony/api/v1"
	kubeconfigfile "github.com/harmonykaas/harmony/internal/kubeconfig"
)

// A master's kubeadm-made certificates do not outlive the year kubeadm
// gives them. With the real kubeadm: the apiserver's certificate expired
// and the controller manager's kubeconfig in the last third of its
// client certificate's life are made afresh in one pass, valid again;
// the control plane carries the renewal's time in its environment, so it
// restarts to read them; what is not due stays byte for byte, and so does
// kubelet.conf, whose certificate the kubelet rotates itself. The next
// pass does nothing.
func TestExpiringCertificatesAreRenewed(t *testing.T) {
	cl := newTestCluster(t)
	ctx := context.Background()
	c, host, rec := standInHost(t, k8sBin(t))
	role := cl.role(t, "m1", 0)
	if st := c.Reconcile(ctx, host, role); st.Phase != reconcile.PhaseConverged {
		t.Fatalf("first pass: %+v", st)
	}
	ca := parseCA(t, cl.clusterCA)
	now := time.Now()
	apiserverCrt := host.Path(path.Join(PKIDir, "apiserver.crt"))
	cmConf := host.Path(path.Join(KubernetesDir, "controller-manager.conf"))
	kubeletConf := host.Path(KubeletKubeconfig)

	// Expired, and in its last third: re-signed by the cluster CA with
	// the same names and key, only the dates changed.
	expired := resign(t, ca, readCertFile(t, apiserverCrt), now.Add(-48*time.Hour), now.Add(-time.Hour))
	if err := os.WriteFile(apiserverCrt, expired, 0o644); err != nil {
		t.Fatal(err)
	}
	setClientCertDates(t, ca, cmConf, now.Add(-3*time.Hour), now.Add(time.Hour))
	setClientCertDates(t, ca, kubeletConf, now.Add(-3*time.Hour), now.Add(time.Hour))
	kept := map[string][]byte{}
	for _, p := range []string{path.Join(PKIDir, "front-proxy-client.crt"), path.Join(PKIDir, "apiserver-kubelet-client.crt"),
		path.Join(KubernetesDir, "scheduler.conf"), path.Join(KubernetesDir, "admin.conf"), KubeletKubeconfig} {
		kept[p] = readFile(t, host.Path(p))
	}
	rec.TakeCalls()

	st := c.Reconcile(ctx, host, role)
	if st.Phase != reconcile.PhaseConverged {
		t.Fatalf("renewing pass: %+v", st)
	}
	for _, want := range []string{
		"removed " + PKIDir + "/apiserver.crt and .key (expired ",
		"removed " + KubernetesDir + "/controller-manager.conf (its client certificate expires ",
		"ran kubeadm init phase certs all",
		"ran kubeadm init phase control-plane all",
	} {
		if !slices.ContainsFunc(st.Actions, func(a string) bool { return strings.HasPrefix(a, want) }) {
			t.Errorf("no action %q in %q", want, st.Actions)
		}
	}
	validAgain := now.Add(20 * time.Hour)
	if cert := readCertFile(t, apiserverCrt); !cert.NotAfter.After(validAgain) || pemOf(cert) == string(expired) {
		t.Errorf("apiserver.crt after the renewal: valid until %s", cert.NotAfter)
	}
	if cert := clientCertOf(t, cmConf); !cert.NotAfter.After(validAgain) {
		t.Errorf("controller-manager.conf's client certificate after the renewal: valid until %s", cert.NotAfter)
	}
	for p, data := range kept {
		if string(readFile(t, host.Path(p))) != string(data) {
			t.Errorf("%s changed, though it was not due (or is the kubelet's to rotate)", p)
		}
	}
	for _, name := range []string{"kube-apiserver.yaml", "kube-controller-manager.yaml", "kube-scheduler.yaml"} {
		if !strings.Contains(string(readFile(t, host.Path(ManifestsDir+"/"+name))), CertsRenewedEnv) {
			t.Errorf("%s does not carry %s: its pod would not restart to read the renewed files", name, CertsRenewedEnv)
		}
	}
	u, _ := rec.Unit(APIServerUnit)
	if !slices.ContainsFunc(u.Env, func(e string) bool { return strings.HasPrefix(e, CertsRenewedEnv+"=") }) {
		t.Errorf("stand-in environment %q lacks %s", u.Env, CertsRenewedEnv)
	}
	if calls := rec.TakeCalls(); !slices.Contains(calls, "ensure "+APIServerUnit) {
		t.Errorf("the stand-in apiserver was not restarted with its renewed certificate: %q", calls)
	}

	if st := c.Reconcile(ctx, host, role); st.Phase != reconcile.PhaseConverged || len(st.Actions) != 0 {
		t.Errorf("pass after the renewal acted: %+v", st)
	}
	if calls := rec.TakeCalls(); len(calls) != 0 {
		t.Errorf("pass after the renewal touched units: %q", calls)
	}
}

type testCA struct {
	cert *x509.Certificate
	key  crypto.Signer
}

func parseCA(t *testing.T, kp *v1.KeyPair) testCA {
	t.Helper()
	certs, err := v1.ParseCertificatesPEM([]byte(kp.Certificate))
	if err != nil {
		t.Fatal(err)
	}
	key, err := v1.ParsePrivateKeyPEM([]byte(kp.Key))
	if err != nil {
		t.Fatal(err)
	}
	return testCA{certs[0], key.(crypto.Signer)}
}

// resign returns cert, PEM-encoded, signed again by ca with new dates.
func resign(t *testing.T, ca testCA, cert *x509.Certificate, notBefore, notAfter time.Time) []byte {
	t.Helper()
	cert.NotBefore, cert.NotAfter = notBefore, notAfter
	der, err := x509.CreateCertificate(rand.Reader, cert, ca.cert, cert.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func readCertFile(t *testing.T, p string) *x509.Certificate {
	t.Helper()
	cert, err := readCert(p)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func pemOf(cert *x509.Certificate) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}))
}

func clientCertOf(t *testing.T, p string) *x509.Certificate {
	t.Helper()
	kc, err := readKubeconfig(p)
	if err != nil {
		t.Fatal(err)
	}
	cert := kc.clientCert()
	if cert == nil {
		t.Fatalf("%s has no embedded client certificate", p)
	}
	return cert
}

// setClientCertDates re-signs the kubeconfig's embedded client
// certificate with new dates.
func setClientCertDates(t *testing.T, ca testCA, p string, notBefore, notAfter time.Time) {
	t.Helper()
	kc, err := kubeconfigfile.Parse(readFile(t, p))
	if err != nil {
		t.Fatal(err)
	}
	kc.Users[0].User.CertData = resign(t, ca, clientCertOf(t, p), notBefore, notAfter)
	data, err := kc.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
