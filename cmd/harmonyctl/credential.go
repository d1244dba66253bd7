package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/client"
	"github.com/harmonykaas/harmony/internal/atomicfile"
	"github.com/harmonykaas/harmony/internal/kubeconfig"
)

// credentialReuse: a cached certificate is handed out again only while it
// has this long left, so kubectl never gets one about to expire.
const credentialReuse = time.Minute

// cachedCredential is a cluster credential kept between kubectl's runs of
// the plugin, with its key (0600, in the config's directory).
type cachedCredential struct {
	Credential v1.Credential `json:"credential"`
	KeyPEM     string        `json:"keyPEM"`
}

// credentialCache is the file of one controller's and cluster's credential
// for one client config.
func credentialCache(conn *connection, cluster string) string {
	sum := sha256.Sum256([]byte(conn.server + "\x00" + cluster))
	return filepath.Join(filepath.Dir(conn.path), "credentials", cluster+"-"+hex.EncodeToString(sum[:6])+".json")
}

// clusterCredential returns a credential for cluster, from the cache while
// it lasts, else a new one: a key made here, a CSR, and the controller's
// certificate for it.
func clusterCredential(ctx context.Context, conn *connection, cluster string) (*cachedCredential, error) {
	path := credentialCache(conn, cluster)
	var cached cachedCredential
	if data, err := os.ReadFile(path); err == nil && json.Unmarshal(data, &cached) == nil &&
		time.Until(cached.Credential.ExpiresAt) > credentialReuse {
		return &cached, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		return nil, err
	}
	cred, err := conn.Credential(ctx, cluster, v1.EncodeCSR(der))
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	cached = cachedCredential{Credential: *cred, KeyPEM: string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))}
	data, err := json.Marshal(cached)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if err := atomicfile.Write(path, data, 0o600); err != nil {
		return nil, err
	}
	return &cached, nil
}

func credentialCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "credential NAME",
		Short: "Print a short-lived credential for a cluster's apiserver (kubectl's exec plugin)",
		Long: `kubectl runs this, through the kubeconfig that harmonyctl cluster kubeconfig
writes, whenever it needs a credential: it prints an ExecCredential
(client.authentication.k8s.io/v1) with a client certificate for a key made
on this machine, valid for 5 minutes, that names you and the group of your
grant on the cluster. It is cached until a minute before it expires.
Revoking your grant, disabling you or ending your sessions stops new ones
at once.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			conn, err := g.connect()
			if err != nil {
				return err
			}
			cred, err := clusterCredential(cmd.Context(), conn, args[0])
			if err != nil {
				var apiErr *client.APIError
				if errors.As(err, &apiErr) && apiErr.Status == 404 {
					return fmt.Errorf("cluster %s: not found, or not granted to you: %w", args[0], err)
				}
				return err
			}
			return printJSON(cmd.OutOrStdout(), kubeconfig.ExecCredential{
				APIVersion: kubeconfig.ExecAPIVersion, Kind: "ExecCredential",
				Status: kubeconfig.ExecCredentialStatus{ExpirationTimestamp: cred.Credential.ExpiresAt.UTC(),
					ClientCertificateData: cred.Credential.Certificate, ClientKeyData: cred.KeyPEM},
			})
		},
	}
}
