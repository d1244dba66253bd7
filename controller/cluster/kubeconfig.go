package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/ca"
	"github.com/harmonykaas/harmony/controller/store"
	"github.com/harmonykaas/harmony/internal/kubeconfig"
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
	data, err := kubeconfig.New(name, out.Server, []byte(sec.PKI.ClusterCA.Certificate), user,
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})).Marshal()
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
