package lab

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/harmonykaas/harmony/agent/pki"
	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/atomicfile"
)

// clusterPKI makes the cluster's CAs. The controller will hold these for
// real clusters (the controller issue); the lab stands in for it and
// hands them to the masters in their roles.
func clusterPKI() (*v1.ClusterPKI, error) {
	const validity = 10 * 365 * 24 * time.Hour
	var p v1.ClusterPKI
	for _, ca := range []struct {
		name string
		dst  **v1.KeyPair
	}{{"kubernetes", &p.ClusterCA}, {"etcd-ca", &p.EtcdCA}, {"front-proxy-ca", &p.FrontProxyCA}} {
		kp, err := pki.NewCA(ca.name, validity)
		if err != nil {
			return nil, fmt.Errorf("lab CA %s: %w", ca.name, err)
		}
		*ca.dst = kp
	}
	sa, err := pki.NewKey()
	if err != nil {
		return nil, fmt.Errorf("lab service account key: %w", err)
	}
	p.ServiceAccountKey = sa
	return &p, nil
}

// credential is a client certificate on disk.
type credential struct{ CA, Cert, Key string }

// clientCert issues a client certificate from ca into dir/name.{crt,key},
// with the CA beside it as dir/ca.crt.
func clientCert(ca *v1.KeyPair, dir, name string, orgs ...string) (credential, error) {
	signer, err := pki.LoadCA(ca)
	if err != nil {
		return credential{}, err
	}
	c := credential{
		CA:   filepath.Join(dir, "ca.crt"),
		Cert: filepath.Join(dir, name+".crt"),
		Key:  filepath.Join(dir, name+".key"),
	}
	if _, err := signer.Ensure(c.Cert, c.Key, pki.Leaf{CommonName: name, Organization: orgs,
		Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return credential{}, fmt.Errorf("client certificate %s: %w", name, err)
	}
	if _, err := signer.WriteCACert(c.CA); err != nil {
		return credential{}, err
	}
	return c, nil
}

// writeKubeconfig writes an admin kubeconfig (0600: it embeds a key) for
// the apiserver behind the VIP.
func writeKubeconfig(path, server string, cred credential) error {
	read := func(p string) (string, error) {
		data, err := os.ReadFile(p)
		return base64.StdEncoding.EncodeToString(data), err
	}
	ca, err := read(cred.CA)
	if err != nil {
		return err
	}
	cert, err := read(cred.Cert)
	if err != nil {
		return err
	}
	key, err := read(cred.Key)
	if err != nil {
		return err
	}
	doc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: lab-admin
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: lab
  context: {cluster: lab, user: lab-admin}
current-context: lab
`, server, ca, cert, key)
	return atomicfile.Write(path, []byte(doc), 0o600)
}

// randomString returns n characters of [a-z0-9].
func randomString(n int) (string, error) {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	out := make([]byte, 0, n)
	buf := make([]byte, 1)
	for len(out) < n {
		if _, err := rand.Read(buf); err != nil {
			return "", err
		}
		// 252 is the largest multiple of 36 below 256: no bias.
		if buf[0] < 252 {
			out = append(out, alphabet[int(buf[0])%len(alphabet)])
		}
	}
	return string(out), nil
}
