package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"time"

	"sigs.k8s.io/yaml"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/ca"
	"github.com/harmonykaas/harmony/controller/store"
)

// Kubeconfig issues a cluster-admin kubeconfig for the cluster's API on
// its VIP: a new key and a client certificate from the cluster CA in
// group system:masters, named for the caller, expiring after lifetime.
// Each issue is recorded as a cluster event.
func (s *Service) Kubeconfig(name, by string, lifetime time.Duration) (*v1.Kubeconfig, error) {
	var rec *record
	var sec *secrets
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		var err error
		if rec, err = s.load(tx, name); err != nil {
			return err
		}
		sec, err = loadSecrets(tx, name)
		return err
	})
	if err != nil {
		return nil, err
	}
	if rec.Deleting {
		return nil, refuse(Conflict, "", "cluster %q is being deleted", name)
	}
	now := s.cfg.Now().UTC()
	clusterCA, err := ca.Parse([]byte(sec.PKI.ClusterCA.Certificate), []byte(sec.PKI.ClusterCA.Key), now)
	if err != nil {
		return nil, fmt.Errorf("cluster CA of %s: %w", name, err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	user := "harmony:" + by
	cert, err := clusterCA.Issue(ca.Leaf{CommonName: user, Organization: "system:masters", PublicKey: &key.PublicKey, Lifetime: lifetime}, now)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	out := &v1.Kubeconfig{Cluster: name, Server: v1.APIServerURL(rec.Spec.VIP), User: user, ExpiresAt: cert.NotAfter}
	doc := kubeconfigDoc{APIVersion: "v1", Kind: "Config", CurrentContext: name,
		Clusters: []namedCluster{{Name: name, Cluster: kubeCluster{Server: out.Server, CAData: []byte(sec.PKI.ClusterCA.Certificate)}}},
		Users: []namedUser{{Name: user, User: kubeUser{
			CertData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}),
			KeyData:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		}}},
		Contexts: []namedContext{{Name: name, Context: kubeContext{Cluster: name, User: user}}},
	}
	data, err := yaml.Marshal(doc)
	if err != nil {
		return nil, err
	}
	out.Kubeconfig = string(data)
	err = s.cfg.Store.Update(func(tx *store.Tx) error {
		_, err := addEvent(tx, name, v1.Event{Time: now, Reason: "KubeconfigIssued",
			Message: fmt.Sprintf("admin kubeconfig for %s (serial %s), valid until %s", user, cert.SerialNumber.Text(16), cert.NotAfter.Format(time.RFC3339))})
		return err
	})
	if err != nil {
		return nil, err
	}
	s.log.Info("kubeconfig issued", "cluster", name, "user", user, "expires", cert.NotAfter)
	return out, nil
}

// The kubeconfig file format (clientcmd's v1 Config), the fields used.
type kubeconfigDoc struct {
	APIVersion     string         `json:"apiVersion"`
	Kind           string         `json:"kind"`
	Clusters       []namedCluster `json:"clusters"`
	Users          []namedUser    `json:"users"`
	Contexts       []namedContext `json:"contexts"`
	CurrentContext string         `json:"current-context"`
}

type namedCluster struct {
	Name    string      `json:"name"`
	Cluster kubeCluster `json:"cluster"`
}

type kubeCluster struct {
	Server string `json:"server"`
	CAData []byte `json:"certificate-authority-data"`
}

type namedUser struct {
	Name string   `json:"name"`
	User kubeUser `json:"user"`
}

type kubeUser struct {
	CertData []byte `json:"client-certificate-data"`
	KeyData  []byte `json:"client-key-data"`
}

type namedContext struct {
	Name    string      `json:"name"`
	Context kubeContext `json:"context"`
}

type kubeContext struct {
	Cluster string `json:"cluster"`
	User    string `json:"user"`
}
