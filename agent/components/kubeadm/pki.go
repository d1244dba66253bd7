package kubeadm

import (
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"github.com/harmonykaas/harmony/agent/files"
	"github.com/harmonykaas/harmony/agent/pki"
	"github.com/harmonykaas/harmony/agent/reconcile"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// etcdClientLeaf is the apiserver's client certificate for the local etcd,
// issued by the agent from the role's etcd CA (kubeadm does not, with
// external etcd).
var etcdClientLeaf = pki.Leaf{
	CommonName: "kube-apiserver-etcd-client",
	Usages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
}

// writePKI puts the role's cluster CAs where kubeadm expects them (keys
// 0600; of the etcd CA only the certificate), the service account key pair,
// and the apiserver's etcd client certificate. digest identifies what the
// local phases read from here. owe (if not nil) runs before any of them
// changes.
func writePKI(host *reconcile.Host, role *v1.Role, owe func() error, st *reconcile.Status) (digest string, err error) {
	r := role.PKI
	saKey, err := v1.ParsePrivateKeyPEM([]byte(r.ServiceAccountKey))
	if err != nil {
		return "", fmt.Errorf("pki.serviceAccountKey: %w", err)
	}
	signer, ok := saKey.(crypto.Signer)
	if !ok {
		return "", fmt.Errorf("pki.serviceAccountKey: a %T cannot sign tokens", saKey)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(signer.Public())
	if err != nil {
		return "", fmt.Errorf("pki.serviceAccountKey: %w", err)
	}
	saPub := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})

	want := []struct {
		nodePath string
		data     string
		perm     os.FileMode
	}{
		{CACertFile, r.ClusterCA.Certificate, 0o644},
		{CAKeyFile, r.ClusterCA.Key, 0o600},
		{FrontProxyCACertFile, r.FrontProxyCA.Certificate, 0o644},
		{FrontProxyCAKeyFile, r.FrontProxyCA.Key, 0o600},
		{EtcdCAFile, r.EtcdCA.Certificate, 0o644},
		{ServiceAccountKeyFile, r.ServiceAccountKey, 0o600},
		{ServiceAccountPubFile, string(saPub), 0o644},
	}
	h := sha256.New()
	for _, f := range want {
		fmt.Fprintf(h, "%s\x00%s\x00", f.nodePath, f.data)
		c, err := files.WriteOwing(host.Path(f.nodePath), []byte(f.data), f.perm, nil, owe)
		if err != nil {
			return "", err
		}
		if c {
			st.Actions = append(st.Actions, "wrote "+f.nodePath)
		}
	}

	etcdCA, err := pki.LoadCA(r.EtcdCA)
	if err != nil {
		return "", fmt.Errorf("pki.etcdCA: %w", err)
	}
	c, err := etcdCA.EnsureOwing(host.Path(EtcdClientCertFile), host.Path(EtcdClientKeyFile), etcdClientLeaf, owe)
	if err != nil {
		return "", fmt.Errorf("apiserver etcd client certificate: %w", err)
	}
	if c {
		st.Actions = append(st.Actions, "issued "+EtcdClientCertFile)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// kubeadm's leaf certificates, by the CA that signs them.
var leafCerts = []struct {
	name string // base name under PKIDir
	ca   string // "cluster" or "front-proxy"
}{
	{"apiserver", "cluster"},
	{"apiserver-kubelet-client", "cluster"},
	{"front-proxy-client", "front-proxy"},
}

// kubeconfigFiles are the kubeconfigs this master's kubeconfig phase
// makes. Only the first master makes super-admin.conf (the cluster phases
// use it) and its own kubelet.conf; the others' kubelet.conf comes from
// kubeadm join's TLS bootstrap, where a kubelet exists.
func kubeconfigFiles(p *plan) []string {
	if p.first {
		return []string{"admin.conf", "super-admin.conf", "kubelet.conf", "controller-manager.conf", "scheduler.conf"}
	}
	return []string{"admin.conf", "controller-manager.conf", "scheduler.conf"}
}

// prune removes what kubeadm would refuse to reuse and refuse to replace:
// leaf certificates not signed by the role's CA (a rotated CA), an
// apiserver certificate missing a name it must now carry, and kubeconfigs
// trusting another CA; and what is due for renewal (due, from
// dueForRenewal, by node path). kubeadm then makes them afresh.
func prune(host *reconcile.Host, role *v1.Role, p *plan, kubeconfigs []string, due map[string]string, st *reconcile.Status) error {
	cas := map[string]*x509.Certificate{}
	for name, pemText := range map[string]string{"cluster": role.PKI.ClusterCA.Certificate, "front-proxy": role.PKI.FrontProxyCA.Certificate} {
		certs, err := v1.ParseCertificatesPEM([]byte(pemText))
		if err != nil {
			return fmt.Errorf("pki %s CA: %w", name, err)
		}
		cas[name] = certs[0]
	}
	for _, leaf := range leafCerts {
		certPath := host.Path(path.Join(PKIDir, leaf.name+".crt"))
		cert, err := readCert(certPath)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		why := ""
		switch {
		case err != nil:
			why = err.Error()
		case cert.CheckSignatureFrom(cas[leaf.ca]) != nil:
			why = "not signed by the role's " + leaf.ca + " CA"
		case leaf.name == "apiserver":
			why = missingName(cert, apiServerNames(role, p))
		}
		if why == "" {
			why = due[path.Join(PKIDir, leaf.name+".crt")]
		}
		if why == "" {
			continue
		}
		for _, ext := range []string{".crt", ".key"} {
			if err := os.Remove(host.Path(path.Join(PKIDir, leaf.name+ext))); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("remove stale %s%s: %w", leaf.name, ext, err)
			}
		}
		st.Actions = append(st.Actions, fmt.Sprintf("removed %s/%s.crt and .key (%s)", PKIDir, leaf.name, why))
	}
	for _, name := range kubeconfigs {
		nodePath := path.Join(KubernetesDir, name)
		kc, err := readKubeconfig(host.Path(nodePath))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		why := ""
		if err != nil {
			why = err.Error()
		} else if ca, err := kc.caCert(); err != nil || !ca.Equal(cas["cluster"]) {
			why = "it trusts another CA"
		} else {
			why = due[nodePath]
		}
		if why == "" {
			continue
		}
		if err := os.Remove(host.Path(nodePath)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove stale %s: %w", nodePath, err)
		}
		st.Actions = append(st.Actions, fmt.Sprintf("removed %s (%s)", nodePath, why))
	}
	return nil
}

// apiServerNames are the names kubeadm puts in the apiserver certificate
// and checks an existing one for.
func apiServerNames(role *v1.Role, p *plan) []string {
	domain := role.Cluster.DNSDomain
	if domain == "" {
		domain = defaultDNSDomain
	}
	names := []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + domain,
		p.nodeName, p.serviceSubnet.Addr().Next().String(), p.advertise.String()}
	return appendUnique(names, p.certSANs...)
}

func missingName(cert *x509.Certificate, names []string) string {
	var missing []string
	for _, n := range names {
		if cert.VerifyHostname(n) != nil {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return ""
	}
	return "lacks " + strings.Join(missing, ", ")
}

func readCert(path string) (*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	certs, err := v1.ParseCertificatesPEM(data)
	if err != nil {
		return nil, fmt.Errorf("unreadable certificate: %w", err)
	}
	return certs[0], nil
}
