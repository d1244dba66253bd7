// Package kubeconfig is the kubeconfig file format (clientcmd's v1
// Config), the fields Harmony writes and reads: the controller issues
// admin kubeconfigs in it, and the agent reads the ones kubeadm writes.
package kubeconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"sigs.k8s.io/yaml"
)

// Config is a kubeconfig with embedded certificate data.
type Config struct {
	APIVersion     string         `json:"apiVersion,omitempty"`
	Kind           string         `json:"kind,omitempty"`
	Clusters       []NamedCluster `json:"clusters"`
	Users          []NamedUser    `json:"users"`
	Contexts       []NamedContext `json:"contexts,omitempty"`
	CurrentContext string         `json:"current-context,omitempty"`
}

// NamedCluster is an API server and the CA that verifies it.
type NamedCluster struct {
	Name    string  `json:"name"`
	Cluster Cluster `json:"cluster"`
}

// Cluster is where a cluster's API is, and its CA's certificates (PEM).
type Cluster struct {
	Server string `json:"server"`
	CAData []byte `json:"certificate-authority-data,omitempty"`
}

// NamedUser is a client credential.
type NamedUser struct {
	Name string `json:"name"`
	User User   `json:"user"`
}

// User is a client certificate and its key (PEM), embedded or, as in
// the kubelet's kubeconfig after TLS bootstrap, in files; or a command
// that gives one (an exec credential plugin).
type User struct {
	CertData []byte `json:"client-certificate-data,omitempty"`
	KeyData  []byte `json:"client-key-data,omitempty"`
	CertFile string `json:"client-certificate,omitempty"`
	KeyFile  string `json:"client-key,omitempty"`
	Exec     *Exec  `json:"exec,omitempty"`
}

// ExecAPIVersion is the exec credential protocol kubectl speaks.
const ExecAPIVersion = "client.authentication.k8s.io/v1"

// Exec is an exec credential plugin: the command kubectl runs for a
// credential, which prints an ExecCredential.
type Exec struct {
	APIVersion      string   `json:"apiVersion"`
	Command         string   `json:"command"`
	Args            []string `json:"args,omitempty"`
	InteractiveMode string   `json:"interactiveMode"`
	// InstallHint is what kubectl says when Command is not found.
	InstallHint string `json:"installHint,omitempty"`
}

// ExecCredential is what the plugin prints: a client certificate and key
// (PEM) and when the certificate expires, after which kubectl runs the
// plugin again.
type ExecCredential struct {
	APIVersion string               `json:"apiVersion"`
	Kind       string               `json:"kind"`
	Status     ExecCredentialStatus `json:"status"`
}

// ExecCredentialStatus is an ExecCredential's credential.
type ExecCredentialStatus struct {
	ExpirationTimestamp   time.Time `json:"expirationTimestamp"`
	ClientCertificateData string    `json:"clientCertificateData"`
	ClientKeyData         string    `json:"clientKeyData"`
}

// NewExec is a kubeconfig with one cluster, one user whose credential
// comes from command with args, and the context that joins them.
func NewExec(cluster, server string, caPEM []byte, user, command string, args []string) *Config {
	c := New(cluster, server, caPEM, user, nil, nil)
	c.Users[0].User = User{Exec: &Exec{APIVersion: ExecAPIVersion, Command: command, Args: args, InteractiveMode: "Never"}}
	return c
}

// NamedContext pairs a cluster with a user.
type NamedContext struct {
	Name    string  `json:"name"`
	Context Context `json:"context"`
}

// Context names a cluster and a user of the file.
type Context struct {
	Cluster string `json:"cluster"`
	User    string `json:"user"`
}

// New is a kubeconfig with one cluster, one user and the context that
// joins them, named for the cluster.
func New(cluster, server string, caPEM []byte, user string, certPEM, keyPEM []byte) *Config {
	return &Config{APIVersion: "v1", Kind: "Config", CurrentContext: cluster,
		Clusters: []NamedCluster{{Name: cluster, Cluster: Cluster{Server: server, CAData: caPEM}}},
		Users:    []NamedUser{{Name: user, User: User{CertData: certPEM, KeyData: keyPEM}}},
		Contexts: []NamedContext{{Name: cluster, Context: Context{Cluster: cluster, User: user}}},
	}
}

// Marshal encodes the file.
func (c *Config) Marshal() ([]byte, error) { return yaml.Marshal(c) }

// Parse decodes a kubeconfig that has at least one cluster and one user.
func Parse(data []byte) (*Config, error) {
	var c Config
	if err := yaml.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("unreadable kubeconfig: %w", err)
	}
	if len(c.Clusters) == 0 || len(c.Users) == 0 {
		return nil, errors.New("kubeconfig without a cluster or a user")
	}
	return &c, nil
}

// TLSConfig is a client configuration for the file's first cluster and
// user: the cluster's CA and the user's certificate.
func (c *Config) TLSConfig() (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(c.Clusters[0].Cluster.CAData) {
		return nil, fmt.Errorf("kubeconfig cluster %q: no CA certificate", c.Clusters[0].Name)
	}
	cert, err := tls.X509KeyPair(c.Users[0].User.CertData, c.Users[0].User.KeyData)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig user %q: %w", c.Users[0].Name, err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
