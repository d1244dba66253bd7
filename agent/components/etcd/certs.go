package etcd

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"path/filepath"

	"github.com/harmonykaas/harmony/agent/pki"
	"github.com/harmonykaas/harmony/agent/reconcile"
)

// ClientCommonName is the subject of the certificate the agent presents to
// etcd.
const ClientCommonName = "harmony-agent"

// ensureCerts makes the member's certificates from the etcd CA: the server
// certificate clients see, the peer certificate members see, and the
// client certificate the agent itself presents. etcd reads the trusted CA
// only at start: a new one owes it a restart, recorded before the file
// changes.
func ensureCerts(host *reconcile.Host, s settings) (actions []string, err error) {
	dir := host.Path(PKIDir)
	caChanged, err := s.ca.WriteCACert(filepath.Join(dir, caFile), host.OweReload(UnitName))
	if err != nil {
		return nil, fmt.Errorf("write %s/%s: %w", PKIDir, caFile, err)
	}
	if caChanged {
		actions = append(actions, "wrote "+PKIDir+"/"+caFile)
	}
	ip := net.IP(s.ip.AsSlice())
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	for _, c := range []struct {
		what, cert, key string
		leaf            pki.Leaf
	}{
		{"server", serverCert, serverKey, pki.Leaf{
			CommonName: s.name,
			DNSNames:   []string{s.name, "localhost"},
			IPs:        []net.IP{ip, net.IPv4(127, 0, 0, 1).To4()},
			Usages:     both,
		}},
		{"peer", peerCert, peerKey, pki.Leaf{
			CommonName: s.name,
			DNSNames:   []string{s.name},
			IPs:        []net.IP{ip},
			Usages:     both,
		}},
		{"client", clientCert, clientKey, pki.Leaf{
			CommonName: ClientCommonName,
			Usages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}},
	} {
		changed, err := s.ca.Ensure(filepath.Join(dir, c.cert), filepath.Join(dir, c.key), c.leaf)
		if err != nil {
			return actions, fmt.Errorf("%s certificate: %w", c.what, err)
		}
		if changed {
			actions = append(actions, "issued "+c.what+" certificate")
		}
	}
	return actions, nil
}

// clientTLS is the agent's TLS configuration towards the members: its
// client certificate, and the etcd CA alone as the trusted root.
func clientTLS(host *reconcile.Host, s settings) (*tls.Config, error) {
	dir := host.Path(PKIDir)
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, clientCert), filepath.Join(dir, clientKey))
	if err != nil {
		return nil, fmt.Errorf("load the agent's etcd client certificate: %w", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(s.ca.Cert)
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: roots, MinVersion: tls.VersionTLS12}, nil
}
