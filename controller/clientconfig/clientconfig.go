// Package clientconfig reads and writes the admin client configuration,
// the file the controller writes to DIR/admin.conf on first start and that
// harmonyctl reads, as kubeadm's admin.conf and kubectl do.
package clientconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"sigs.k8s.io/yaml"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/atomicfile"
)

// EnvVar names the environment variable that points at a config file.
const EnvVar = "HARMONY_CONFIG"

// Config is a client configuration: the controller, its CA, and a
// credential, an admin certificate and key (admin.conf), a user's session
// (harmonyctl login), or both. It holds secrets: the file is written with
// mode 0600.
type Config struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Server     string `json:"server"`
	// CertificateAuthority is the PEM bundle that verifies the server.
	CertificateAuthority string   `json:"certificateAuthority"`
	ClientCertificate    string   `json:"clientCertificate,omitempty"`
	ClientKey            string   `json:"clientKey,omitempty"`
	Session              *Session `json:"session,omitempty"`
}

// Session is a signed-in user's, from harmonyctl login; when present it
// is the credential used, and the client refreshes it.
type Session struct {
	Username         string    `json:"username"`
	AccessToken      string    `json:"accessToken"`
	AccessExpiresAt  time.Time `json:"accessExpiresAt"`
	RefreshToken     string    `json:"refreshToken"`
	RefreshExpiresAt time.Time `json:"refreshExpiresAt"`
}

// FromAPI is the session an API answer holds.
func FromAPI(s v1.Session) *Session {
	return &Session{Username: s.User.Name, AccessToken: s.AccessToken, AccessExpiresAt: s.AccessExpiresAt,
		RefreshToken: s.RefreshToken, RefreshExpiresAt: s.RefreshExpiresAt}
}

const kind = "ClientConfig"

// New returns a config for server with the given PEMs.
func New(server string, caPEM, certPEM, keyPEM []byte) *Config {
	return &Config{
		APIVersion:           v1.APIVersion,
		Kind:                 kind,
		Server:               server,
		CertificateAuthority: string(caPEM),
		ClientCertificate:    string(certPEM),
		ClientKey:            string(keyPEM),
	}
}

// Marshal encodes the config as the file holds it.
func (c *Config) Marshal() ([]byte, error) {
	data, err := yaml.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encode client config: %w", err)
	}
	return data, nil
}

// Write saves the config with mode 0600.
func (c *Config) Write(path string) error {
	data, err := c.Marshal()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("write client config: %w", err)
	}
	return atomicfile.Write(path, data, 0o600)
}

// Load reads and validates a config file.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read client config: %w", err)
	}
	var c Config
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, fmt.Errorf("client config %s: %w", path, err)
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("client config %s: %w", path, err)
	}
	return &c, nil
}

func (c *Config) validate() error {
	if c.APIVersion != v1.APIVersion || c.Kind != kind {
		return fmt.Errorf("apiVersion/kind: want %s %s, got %q %q", v1.APIVersion, kind, c.APIVersion, c.Kind)
	}
	if err := v1.ValidateControllerURL(c.Server); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	if _, err := v1.ParseCertificatesPEM([]byte(c.CertificateAuthority)); err != nil {
		return fmt.Errorf("certificateAuthority: %w", err)
	}
	if c.ClientCertificate != "" || c.ClientKey != "" || c.Session == nil {
		if _, err := tls.X509KeyPair([]byte(c.ClientCertificate), []byte(c.ClientKey)); err != nil {
			return fmt.Errorf("clientCertificate/clientKey: %w", err)
		}
	}
	if s := c.Session; s != nil && (s.Username == "" || s.AccessToken == "" || s.RefreshToken == "") {
		return errors.New("session: username, accessToken and refreshToken are all needed; run harmonyctl login again")
	}
	return nil
}

// TLSConfig returns a client TLS configuration that trusts only the
// configured CA and presents the admin certificate, if there is one.
func (c *Config) TLSConfig() (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(c.CertificateAuthority)) {
		return nil, errors.New("certificateAuthority holds no certificate")
	}
	var certs []tls.Certificate
	if c.ClientCertificate != "" {
		pair, err := tls.X509KeyPair([]byte(c.ClientCertificate), []byte(c.ClientKey))
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		certs = append(certs, pair)
	}
	// The server must be the controller, not any holder of a certificate
	// from its CA (a node's, say), or the admin's requests, passwords
	// included, would go to it.
	return &tls.Config{RootCAs: pool, Certificates: certs, MinVersion: tls.VersionTLS12,
		VerifyConnection: v1.VerifyController}, nil
}

// Find returns the config path: the flag if set, else $HARMONY_CONFIG,
// else ~/.harmony/config.
func Find(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if env := os.Getenv(EnvVar); env != "" {
		return env, nil
	}
	path, err := DefaultPath()
	if err != nil {
		return "", fmt.Errorf("no --config, no $%s and %w", EnvVar, err)
	}
	return path, nil
}

// DefaultPath is the config's path when neither a flag nor $HARMONY_CONFIG
// names one: ~/.harmony/config.
func DefaultPath() (string, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no home directory: %w", err)
	}
	return filepath.Join(home, ".harmony", "config"), nil
}
