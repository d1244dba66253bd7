package kubeadm

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"

	"sigs.k8s.io/yaml"

	"github.com/harmonykaas/harmony/agent/kubeapi"
	v1 "github.com/harmonykaas/harmony/api/v1"
	kubeconfigfile "github.com/harmonykaas/harmony/internal/kubeconfig"
)

// kubeconfig is a kubeconfig kubeadm wrote: one cluster and one user,
// with embedded data.
type kubeconfig struct{ *kubeconfigfile.Config }

func readKubeconfig(path string) (*kubeconfig, error) {
	data, err := kubeapi.ReadBounded(path)
	if err != nil {
		return nil, err
	}
	kc, err := kubeconfigfile.Parse(data)
	if err != nil {
		return nil, err
	}
	return &kubeconfig{kc}, nil
}

func (kc *kubeconfig) caCert() (*x509.Certificate, error) {
	certs, err := v1.ParseCertificatesPEM(kc.Clusters[0].Cluster.CAData)
	if err != nil {
		return nil, err
	}
	return certs[0], nil
}

// clientCert is the embedded client certificate, or nil (a kubelet's
// kubeconfig after TLS bootstrap points at a file instead).
func (kc *kubeconfig) clientCert() *x509.Certificate {
	certs, err := v1.ParseCertificatesPEM(kc.Users[0].User.CertData)
	if err != nil {
		return nil
	}
	return certs[0]
}

func (kc *kubeconfig) keyPair() (tls.Certificate, error) {
	return tls.X509KeyPair(kc.Users[0].User.CertData, kc.Users[0].User.KeyData)
}

// localKubeconfig is super-admin.conf pointed at this master's own
// apiserver instead of the VIP, for the cluster phases: they must not
// depend on HAProxy and keepalived having converged.
func localKubeconfig(superAdmin []byte, server string) ([]byte, error) {
	var doc map[string]any
	if err := yaml.Unmarshal(superAdmin, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", SuperAdminKubeconfig, err)
	}
	clusters, _ := doc["clusters"].([]any)
	if len(clusters) == 0 {
		return nil, fmt.Errorf("%s: no clusters", SuperAdminKubeconfig)
	}
	for _, c := range clusters {
		entry, _ := c.(map[string]any)
		cluster, _ := entry["cluster"].(map[string]any)
		if cluster == nil {
			return nil, fmt.Errorf("%s: a cluster entry without a cluster", SuperAdminKubeconfig)
		}
		cluster["server"] = server
	}
	return yaml.Marshal(doc)
}
