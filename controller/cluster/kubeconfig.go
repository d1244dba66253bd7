package cluster

import (
	"crypto"
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
	rec, sec, clusterCA, now, err := s.clusterCA(name)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	user := v1.KubernetesUser(by)
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

// UserKubeconfig is a kubeconfig for user's own access to the cluster:
// the server and the CA, and a credential from the exec plugin
// (v1.CredentialCommand), which asks for one under the user's grant each
// time. Nothing is signed here, so nothing is recorded.
func (s *Service) UserKubeconfig(name, user string) (*v1.Kubeconfig, error) {
	rec, sec, _, _, err := s.clusterCA(name)
	if err != nil {
		return nil, err
	}
	out := &v1.Kubeconfig{Cluster: name, Server: v1.APIServerURL(rec.Spec.VIP), User: v1.KubernetesUser(user)}
	kc := kubeconfig.NewExec(name, out.Server, []byte(sec.PKI.ClusterCA.Certificate), out.User, v1.CredentialCommand, v1.CredentialArgs(name))
	kc.Users[0].User.Exec.InstallHint = v1.CredentialInstallHint
	data, err := kc.Marshal()
	if err != nil {
		return nil, err
	}
	out.Kubeconfig = string(data)
	return out, nil
}

// clusterCA loads a cluster that is not being deleted, its secrets and
// its CA, ready to sign.
func (s *Service) clusterCA(name string) (*record, *secrets, *ca.CA, time.Time, error) {
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
		return nil, nil, nil, time.Time{}, err
	}
	if rec.Deleting {
		return nil, nil, nil, time.Time{}, refuse(Conflict, "", "cluster %q is being deleted", name)
	}
	now := s.cfg.Now().UTC()
	clusterCA, err := ca.Parse([]byte(sec.PKI.ClusterCA.Certificate), []byte(sec.PKI.ClusterCA.Key), now)
	if err != nil {
		return nil, nil, nil, time.Time{}, fmt.Errorf("cluster CA of %s: %w", name, err)
	}
	return rec, sec, clusterCA, now, nil
}

// UserCredential signs a user's key for the cluster's apiserver: the
// user's name (KubernetesUser), the group of their grant role and their
// directory groups (KubernetesDirectoryGroup), for lifetime. The key was made on the user's machine; only its public half
// is here. Not recorded as an event: kubectl asks for one every few
// minutes.
func (s *Service) UserCredential(name, user string, role v1.GrantRole, groups []string, key crypto.PublicKey, lifetime time.Duration) (*v1.Credential, error) {
	rec, sec, clusterCA, now, err := s.clusterCA(name)
	if err != nil {
		return nil, err
	}
	out := &v1.Credential{Cluster: name, Server: v1.APIServerURL(rec.Spec.VIP), CertificateAuthority: sec.PKI.ClusterCA.Certificate,
		User: v1.KubernetesUser(user), Groups: []string{role.KubernetesGroup()}}
	for _, g := range groups[:min(len(groups), v1.MaxCredentialGroups)] {
		out.Groups = append(out.Groups, v1.KubernetesDirectoryGroup(g))
	}
	cert, err := clusterCA.Issue(ca.Leaf{CommonName: out.User, Organization: out.Groups[0], MoreOrganizations: out.Groups[1:],
		PublicKey: key, Lifetime: lifetime}, now)
	if err != nil {
		return nil, err
	}
	out.Certificate = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}))
	out.ExpiresAt = cert.NotAfter
	return out, nil
}
